"""Names users already type keep working after the move into layer packages."""

from __future__ import annotations

import subprocess
import sys


def test_old_import_paths_name_the_same_objects():
    import recordbeam
    from recordbeam import runner, sink
    from recordbeam.dataset.reader import read
    from recordbeam.local.runner import LocalRunner
    from recordbeam.write import sink as write_sink

    assert runner.LocalRunner is LocalRunner
    assert sink.WriteShards is write_sink.WriteShards
    assert sink.ShardOptions is write_sink.ShardOptions
    assert sink.ExampleEncoder is write_sink.ExampleEncoder
    assert recordbeam.read is read


def test_runner_option_with_the_old_path_runs_a_pipeline(tmp_path):
    # Beam resolves --runner by importing the dotted path, as a user's command would.
    code = (
        "import apache_beam as beam\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "opts = PipelineOptions(['--runner', 'recordbeam.runner.LocalRunner',\n"
        "                        '--direct_running_mode', 'in_memory'])\n"
        "with beam.Pipeline(options=opts) as p:\n"
        f"    _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2) | beam.io.WriteToText({str(tmp_path / 'out')!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    written = sorted(int(line) for f in tmp_path.glob("out*") for line in f.read_text().split())
    assert written == [2, 4, 6]


def test_convert_is_the_function_even_after_the_cli_imported_its_module():
    # The CLI imports recordbeam.converter; recordbeam.convert stays the function.
    code = ("import recordbeam, sys\n"
            "import recordbeam.cli.pipeline_commands\n"
            "from recordbeam.converter import convert\n"
            "assert recordbeam.convert is convert and callable(recordbeam.convert)\n"
            "assert 'apache_beam' not in sys.modules\n"
            "assert set(recordbeam.__all__) == {'__version__', 'convert', 'read'}\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)
