# Two commands on a fresh machine:  `make demo`  and  `make test`.
# Each creates .venv on first use and installs what it needs there.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP_FLAGS ?= --disable-pip-version-check --quiet
comma := ,
# The newest Beam the local runner is tested with (recordbeam.local.internals.TESTED_BEAM):
# .venv holds it, whatever newer one the index has. pyproject.toml admits newer ones.
NEWEST_BEAM ?= 2.77.0

.PHONY: demo wheel test test-fast test-exhaustive test-all test-cluster test-oldest test-newest-beam docs \
	lint bench bench-coco clean

# Test lanes (docs/development.md): test-fast is the edit loop, test proves every promise
# once, test-all runs everything (CI). Tests run in one pytest process per core and one
# more, at most 4: the tests that wait on processes of their own (commands, workers,
# emulators) leave a core idle otherwise.
CORES := $(shell nproc 2>/dev/null || echo 2)
TEST_PROCESSES ?= $(shell n=$$(( $(CORES) + 1 )); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST_PARALLEL := -n $(TEST_PROCESSES) --dist worksteal
# test-fast's tests hardly wait on processes: one per core (at most 4), as a process more
# only adds its imports and collection (2 cores: 52-59 s against 59-66 s with 3).
FAST_PROCESSES ?= $(shell n=$(CORES); [ $$n -gt 4 ] && n=4; echo $$n)

$(VENV)/.runtime: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) -e . 'apache-beam==$(NEWEST_BEAM)'
	touch $@

$(VENV)/.test: $(VENV)/.runtime
	$(PY) -m pip install $(PIP_FLAGS) -e '.[test,interop,gcp,aws,report,formats-test]' \
		'apache-beam[gcp,aws]==$(NEWEST_BEAM)'
	# The PyTorch dataset test: the CPU build (this exact version is the CPU wheel on
	# our machines; a bare `torch` would pull several GB of CUDA packages).
	$(PY) -m pip install $(PIP_FLAGS) torch==2.13.0
	# Model Garden's decoder, for `check --for model-garden`'s interop test: without its
	# declared dependencies, which would replace TensorFlow; the few it imports, by hand.
	$(PY) -m pip install $(PIP_FLAGS) --no-deps tf-models-official==2.20.0 tf-keras==2.21.0 \
		gin-config==0.5.0 tf-slim==1.1.0
	$(PY) -m pip install $(PIP_FLAGS) scipy opencv-python-headless pyyaml immutabledict
	touch $@

# The edit loop's environment: the runtime dependencies and the test runner, nothing else.
$(VENV)/.fast: $(VENV)/.runtime
	$(PY) -m pip install $(PIP_FLAGS) -e '.[test-fast]'
	touch $@

$(VENV)/.docs: $(VENV)/.runtime
	$(PY) -m pip install $(PIP_FLAGS) -e '.[docs]'
	touch $@

# The wheel users and workers install (recordbeam is not on the package index):
# dist/recordbeam-<version>-py3-none-any.whl. `pip install 'dist/recordbeam-...whl[gcp]'`.
# build/ goes first: setuptools packs what an earlier build left there, deleted modules too.
wheel: $(VENV)/.runtime
	rm -rf build
	$(PY) -m pip wheel $(PIP_FLAGS) --no-deps . -w dist/

demo: $(VENV)/.runtime
	$(VENV)/bin/recordbeam demo --output demo-output --overwrite

# Every promise proven once: each format converted and read back by TensorFlow, rejects
# and limits, the commit and the lock, one kill point, one bomb... The other cases of each
# matrix (marked exhaustive) run in test-exhaustive; tests/cluster in test-cluster.
test: $(VENV)/.test
	$(PY) -m ruff check src tests pipelines benchmarks tools deploy docs
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not exhaustive" tests --ignore=tests/cluster \
		--durations=15

# The edit loop: the unit tests and one small conversion per format, with the runtime
# dependencies and the test runner only (no TensorFlow, torch or cloud clients).
test-fast: $(VENV)/.fast
	$(PY) -m pytest -q -n $(FAST_PROCESSES) --dist worksteal -m "not exhaustive" tests/unit \
		tests/integration/test_each_format.py

# What test leaves out: every case of the matrices, and the property tests with their
# full example counts.
test-exhaustive: $(VENV)/.test
	RECORDBEAM_TEST_LANE=all $(PY) -m pytest $(PYTEST_PARALLEL) -m "exhaustive or hypothesis" \
		tests --ignore=tests/cluster --durations=15

# Everything: what CI runs (.ci/run), and test-exhaustive, which CI leaves out.
test-all: test test-exhaustive test-newest-beam docs test-cluster test-oldest

# The docs site into site/. --strict: a broken link or anchor, a page missing from the nav,
# an unreadable docstring or an options table of a command that does not exist fails it.
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# The cluster path, from environments made as users and workers make them: the docs'
# Dataflow command as a dry run from fresh `python3 -m venv`s (only what venv and pip give
# them), gs:// on a GCS emulator; and what a job stages, installed in fresh venvs as Beam's
# SDK container installs it, run on Beam's job service and worker pool. Each kind of venv
# is built once per run (tests/cluster/conftest.py lists them). Also the deploy images'
# install steps (deploy/), and the example DAGs
# (deploy/airflow/dags) run by real Airflow, which lives in an environment of its own,
# built once: its dependencies never touch .venv, and the DAGs run recordbeam from .venv,
# as a deployment runs it from recordbeam's own environment. Airflow's constraints file
# is on GitHub, out of CI's reach: deploy/airflow/constraints-py3.11.txt pins what the
# tests passed with (~3 min to install on 2 cores). All of it: 8-11 min on 2 cores.
AIRFLOW_VENV ?= .venv-airflow
# The Python it is made from: AIRFLOW_PYTHON=/usr/bin/python3 on Debian 12 builds it as a
# Debian user does, from Python 3.11.2 (the constraints hold releases that accept it).
AIRFLOW_PYTHON ?= $(PYTHON)
AIRFLOW_PACKAGES := apache-airflow==3.3.2 apache-airflow-providers-apache-beam==6.3.1 \
	apache-airflow-providers-google==22.8.0
$(AIRFLOW_VENV)/.airflow: deploy/airflow/constraints-py3.11.txt
	$(AIRFLOW_PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install $(PIP_FLAGS) \
		-c deploy/airflow/constraints-py3.11.txt $(AIRFLOW_PACKAGES)
	touch $@

test-cluster: $(VENV)/.test $(AIRFLOW_VENV)/.airflow
	RECORDBEAM_AIRFLOW_VENV=$(AIRFLOW_VENV) $(PY) -m pytest tests/cluster --durations=15

# The oldest Beam pyproject.toml admits, in its own environment: pip picks the protobuf and
# numpy that Beam accepts (4.25 and 2.1 for 2.60). It runs what depends on Beam's version
# or on those (OLDEST_TESTS): the unit tests (the format core under protobuf 4.25, quick),
# every format's pipeline (test_each_format), the local runner and what it changes of
# Beam's (runner, standby, spilled shuffles, feed, flattens), the portable and Dataflow
# runners, the sink and its commit, Beam's filesystems on object stores, and the reads in
# byte ranges (COCO's, and the tables' through Beam's text source). Not the interop tests
# (the bytes TensorFlow reads come from the format core, whose unit tests run here), nor
# the formats' own parsing, the reliability tests or the matrices' other cases: recordbeam's
# own code, which make test and test-exhaustive prove on the newest Beam.
# Its dependencies (.deps) are installed apart from recordbeam itself, so CI can build
# them while `make test` runs (.ci/run) without a second build of the project beside it.
OLDEST_VENV ?= .venv-oldest
OLDEST_BEAM ?= 2.60.0
OLDEST_EXTRAS := test,gcp,aws,report
OLDEST_PINS := 'apache-beam[gcp,aws]==$(OLDEST_BEAM)'
$(OLDEST_VENV)/.deps: pyproject.toml tools/dependencies.py
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	$(PYTHON) tools/dependencies.py $(subst $(comma), ,$(OLDEST_EXTRAS)) > $(OLDEST_VENV)/requirements.txt
	$(OLDEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -r $(OLDEST_VENV)/requirements.txt \
		$(OLDEST_PINS)
	touch $@

$(OLDEST_VENV)/.test: $(OLDEST_VENV)/.deps setup.py
	$(OLDEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[$(OLDEST_EXTRAS)]' $(OLDEST_PINS)
	touch $@

OLDEST_TESTS := tests/unit $(addprefix tests/integration/test_,each_format.py local_runner.py \
	standby.py spilled_shuffles.py local_feed.py grouped_flattens.py runners.py remote_runs.py \
	sink_planning.py shard_size.py ownership.py stores.py coco_annotation_ranges.py \
	tabular_pipeline.py)
test-oldest: $(OLDEST_VENV)/.test
	$(OLDEST_VENV)/bin/python -m pytest $(PYTEST_PARALLEL) -m "not exhaustive" $(OLDEST_TESTS)

# The newest Beam on the index, the day it is released: pyproject.toml admits it, so users
# get it. When it is newer than NEWEST_BEAM, it goes into its own environment (built once
# per release: .beam names the one it holds) and the unit and integration tests run there;
# local runs are Beam's plain FnApiRunner on it (the tests of the local runner's own
# machinery skip, saying so), and test_same_bytes_across_beams compares its shards with
# $(VENV)'s, made on NEWEST_BEAM by the local runner's own path. The interop tests stay in
# `make test`: TensorFlow reads what the format core writes, which no Beam touches, and
# leaving TensorFlow out keeps this within CI's time. When the index has nothing newer,
# one line says so.
NEWEST_VENV ?= .venv-newest
test-newest-beam: $(VENV)/.runtime
	@said=$$(mktemp); on_index=$$($(PY) -m pip index versions apache-beam 2>$$said \
		| sed -n 's/^apache-beam (\(.*\))$$/\1/p'); \
	if [ -z "$$on_index" ]; then \
		cat $$said >&2; rm -f $$said; \
		echo "test-newest-beam: the package index named no apache-beam release" >&2; exit 1; \
	fi; \
	rm -f $$said; \
	newest=$$(printf '%s\n%s\n' "$$on_index" "$(NEWEST_BEAM)" | sort -V | tail -n 1); \
	if [ "$$newest" = "$(NEWEST_BEAM)" ]; then \
		echo "test-newest-beam: apache-beam $$on_index, the newest on the index, is no newer than NEWEST_BEAM ($(NEWEST_BEAM)), which make test tests"; \
		exit 0; \
	fi; \
	echo "test-newest-beam: apache-beam $$on_index, newer than NEWEST_BEAM ($(NEWEST_BEAM)), in $(NEWEST_VENV)"; \
	if [ "$$(cat $(NEWEST_VENV)/.beam 2>/dev/null)" != "$$on_index" ] \
			|| [ pyproject.toml -nt $(NEWEST_VENV)/.beam ]; then \
		rm -rf $(NEWEST_VENV) && $(PYTHON) -m venv $(NEWEST_VENV) \
		&& $(NEWEST_VENV)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip \
		&& $(NEWEST_VENV)/bin/python -m pip install $(PIP_FLAGS) \
			-e '.[test,gcp,aws,report]' "apache-beam[gcp,aws]==$$on_index" \
		&& echo "$$on_index" > $(NEWEST_VENV)/.beam || exit 1; \
	fi; \
	RECORDBEAM_REFERENCE_PYTHON=$(abspath $(PY)) \
		$(NEWEST_VENV)/bin/python -m pytest $(PYTEST_PARALLEL) -m "not exhaustive" tests/unit \
		tests/integration

bench: $(VENV)/.test
	$(PY) benchmarks/framing_bench.py
	$(PY) benchmarks/codec_bench.py

# The end-to-end benchmark runs in its own environment: recordbeam's runtime dependencies
# (what `pip install recordbeam` gives a user) plus what the comparison cases need. The
# test environment's cloud extras make every Beam process import ~0.5 s more.
BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.bench: pyproject.toml setup.py Makefile
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install $(PIP_FLAGS) -e . tensorflow-cpu google-crc32c
	# The model_garden case: Model Garden's converter without its declared dependencies
	# (they would replace TensorFlow), and what its converter imports.
	$(BENCH_VENV)/bin/python -m pip install $(PIP_FLAGS) --no-deps tf-models-official==2.20.0 \
		tf-keras==2.21.0 gin-config==0.5.0 tf-slim==1.1.0
	$(BENCH_VENV)/bin/python -m pip install $(PIP_FLAGS) tensorflow-datasets matplotlib pyyaml \
		scipy pycocotools opencv-python-headless immutabledict
	touch $@

bench-coco: $(BENCH_VENV)/.bench
	$(BENCH_VENV)/bin/python benchmarks/coco_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(NEWEST_VENV) $(BENCH_VENV) $(AIRFLOW_VENV) demo-output site \
		build dist src/*.egg-info
