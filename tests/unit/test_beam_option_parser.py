"""Beam option checking does not depend on Beam's private parser class: the plain parser
it falls back on finds the same unknown arguments and the same bad values."""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from recordbeam.errors import UsageError
from recordbeam.local import runner

ARGS = [
    ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1",
     "--temp_location", "gs://b/tmp", "--template_location", "gs://b/t.json"],
    ["--num_workers", "3", "--max_num_workers=8", "--experiments", "a", "--experiments=b"],
    ["--direct_num_workers", "2", "--shards", "4", "stray", "--no_such_option", "x"],
    ["--sdk_container_image", "img", "--setup_file", "./setup.py", "--job_nme", "typo"],
]


def _parser(base: type) -> object:
    class Checking(base):
        def error(self, message):
            raise UsageError(message)

    parser = Checking(allow_abbrev=False, add_help=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)
    return parser


@pytest.mark.parametrize("args", ARGS)
def test_the_plain_parser_finds_the_unknown_arguments_beams_finds(args):
    beams = _parser(runner._beam_parser_class()).parse_known_args(args)[1]
    plain = _parser(runner.PlainBeamParser).parse_known_args(args)[1]
    assert plain == beams


def test_the_plain_parser_refuses_the_bad_values_beams_refuses():
    for base in (runner._beam_parser_class(), runner.PlainBeamParser):
        with pytest.raises(UsageError, match="num_workers"):
            _parser(base).parse_known_args(["--num_workers", "three"])


def test_unknown_arguments_are_found_by_the_parser_in_use():
    assert runner.unknown_beam_args(["--project", "p", "--prjoect", "q"]) == ["--prjoect", "q"]
