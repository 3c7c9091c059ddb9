"""After any sequence of incremental runs, the split holds the examples a full rebuild of
the same inputs holds: random sequences of additions, changes and deletions (seeded, so a
failure reproduces), several runs each, compared with a full rebuild after every run; on
the local runner for every format, and once on the portable runner (Beam's job service,
LOOPBACK workers), the path Flink and Spark take."""

from __future__ import annotations

import random

import pytest
from beam_services import free_port, job_service
from growing_corpus import (
    IN_MEMORY,
    KINDS,
    MUTATIONS,
    SMALL_SHARDS,
    Corpus,
    examples,
    globbed_examples,
    last_run,
    rejects,
    split_facts,
)
from lanes import exhaustive, one_in_make_test

from recordbeam.cli.main import main

RUNS = 4


def _run_sequence(corpus: Corpus, tmp_path, rng: random.Random, runner: tuple[str, ...] = ()):
    out = tmp_path / "incremental"
    done: list[str] = []
    for run in range(RUNS):
        if run:
            for _ in range(rng.randrange(1, 6)):
                what = rng.choice(MUTATIONS)
                if corpus.mutate(what, rng) is not None:
                    done.append(what)
            corpus.write()
        compact = ("--compact-below", "0.6") if rng.random() < 0.3 else ()
        argv = corpus.argv(out, "--incremental", *SMALL_SHARDS, *compact)
        if runner:  # the portable runner in place of the in-memory local one
            argv = [a for a in argv if a not in IN_MEMORY] + list(runner)
        assert main(argv) == 0, done
        full = tmp_path / f"full{run}"
        assert main(corpus.argv(full, *SMALL_SHARDS)) == 0
        said = f"after run {run} ({', '.join(done)})"
        assert examples(out) == examples(full), said
        assert globbed_examples(out) == examples(full), said
        assert split_facts(out) == split_facts(full), said
        assert rejects(out) == rejects(full), said
        assert last_run(out)["examples"] == sum(examples(full).values())
    return out


@pytest.mark.parametrize(("kind", "seed"), one_in_make_test(
    [(kind, seed) for kind in ("coco", *(k for k in KINDS if k != "coco")) for seed in (0, 1)]))
def test_random_sequences_of_runs_give_what_full_rebuilds_give(kind, seed, tmp_path):
    rng = random.Random(f"{kind}/{seed}")
    corpus = Corpus.make(kind, tmp_path / "in", rng.randrange(6, 14), seed)
    _run_sequence(corpus, tmp_path, rng)


@exhaustive
def test_a_sequence_on_the_portable_runner_gives_what_full_rebuilds_give(tmp_path):
    port = free_port()
    with job_service(port, tmp_path / "job_service.log"):
        rng = random.Random("portable")
        corpus = Corpus.make("coco", tmp_path / "in", 10, 3)
        _run_sequence(corpus, tmp_path, rng, ("--runner=PortableRunner",
                                             f"--job_endpoint=localhost:{port}",
                                             "--environment_type=LOOPBACK"))
