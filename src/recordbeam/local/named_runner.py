"""The runner ``--runner`` names, loaded before the options are checked.

``--runner`` takes any runner Beam can load: a name Beam knows (``FlinkRunner``,
``DataflowRunner``...) or the full path of a ``PipelineRunner`` subclass
(``package.module.Class``). Some runners define their options in their own module
(``DaskRunner``'s ``--dask_client_address``, ``RenderRunner``'s ``--render_output``), so
that module is imported first, as Beam will import it to run the job; only then are the
other arguments checked against every option Beam defines.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence

from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.runner import PipelineRunner, create_runner

from recordbeam.errors import UsageError

#: Runners recordbeam refuses, by class name, and why.
REFUSED_RUNNERS = {
    "DaskRunner": (
        "recordbeam does not run on Beam's DaskRunner: it gives each output of a ParDo "
        "with several outputs the elements of all of them, and recordbeam sends records and "
        "rejects down separate outputs, so the shards would be wrong; use the local runner, "
        "FlinkRunner, SparkRunner, PortableRunner or DataflowRunner"),
}


def runner_name(beam_args: Sequence[str]) -> str | None:
    """The value of ``--runner`` among ``beam_args`` (the last one given), or None."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--runner")
    known, _rest = parser.parse_known_args(list(beam_args))
    return known.runner


def load_named_runner(beam_args: Sequence[str]) -> PipelineRunner | None:
    """Load the runner ``--runner`` names as Beam does (so that options its module defines
    are known), or None when no runner is named. Raises ``UsageError``, in one line, for a
    runner recordbeam refuses or one Beam cannot load."""
    name = runner_name(beam_args)
    if not name:
        return None
    refusal = REFUSED_RUNNERS.get(name.rsplit(".", 1)[-1])
    if refusal:
        raise UsageError(f"--runner {name}: {refusal}")
    try:
        runner = create_runner(name)
    except ValueError:  # a short name Beam does not know
        raise UsageError(f"--runner {name}: Beam knows no runner of that name{_closest(name)}; "
                         "give a runner Beam knows or the full path of a PipelineRunner "
                         "subclass (package.module.Class)") from None
    except Exception as error:  # noqa: BLE001 - its module failed to import, or its class
        reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        raise UsageError(f"--runner {name}: Beam cannot load this runner ({reason})") from None
    if not isinstance(runner, PipelineRunner):
        raise UsageError(f"--runner {name}: {type(runner).__name__} is no Beam PipelineRunner")
    return runner


def _closest(name: str) -> str:
    """`` (did you mean FlinkRunner?)`` for ``Flnk``, as Beam matches names: without case,
    ``Runner`` optional."""
    stems = {known.lower().removesuffix("runner"): known
             for known in StandardOptions.KNOWN_RUNNER_NAMES}
    close = difflib.get_close_matches(name.lower().removesuffix("runner"), stems, n=1)
    return f" (did you mean {stems[close[0]]}?)" if close else ""
