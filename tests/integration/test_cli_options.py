"""The command line refuses what it would otherwise ignore, and speaks plainly.

Unknown options, stray words and bad values are usage errors (exit 2) naming the option;
messages carry no exception type names; every option's help gives its default.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recordbeam.cli import main as cli

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
PIPELINES = Path(__file__).parents[2] / "pipelines"


def _coco(sample, out, *extra: str) -> list[str]:
    return ["convert", "coco", "--images", sample.images_dir, "--annotations", sample.annotations,
            "--output", str(out), "--quiet", *extra]


# ----------------------------------------------------------------- unknown options


@pytest.mark.parametrize(
    ("extra", "named", "suggested"),
    [
        (["--compresion", "gzip"], "--compresion", "--compression"),
        (["--verify-decodes"], "--verify-decodes", "--verify-decode"),
        (["-n", "3"], "-n", None),
        (["--direct-num-workers=2"], "--direct-num-workers", "--direct_num_workers"),
        (["--label-offset", "1"], "--label-offset", None),  # imagefolder's, not coco's
    ],
)
@pytest.mark.case(
    'Misspelt or unknown option (`--compresion`, `--verify-decodes`, `-n 3`)',
    'usage error (exit 2) naming it and the closest known option; nothing runs',
)
def test_unknown_option_is_a_usage_error_naming_it(coco_sample, tmp_path, capsys, extra, named,
                                                   suggested):
    out = tmp_path / "out"
    code = cli.main(_coco(coco_sample, out, *extra, *IN_MEMORY))
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert f"unknown option {named}" in err
    if suggested:
        assert f"did you mean {suggested}?" in err
    assert "recordbeam convert coco --help" in err
    assert not out.exists()  # refused before anything ran


@pytest.mark.parametrize(("argv", "said"), [
    (["convert", "yolo", "--input", "IN", "--images", "X"],
     "recordbeam: unknown option --images (YOLO finds each image's labels from the image's "
     "path, so the images are where obj.data or data.yaml say; give their folder as --input): "
     "neither recordbeam convert yolo nor Beam defines it; see recordbeam convert yolo --help"),
    (["convert", "voc", "--input", "IN", "--label-map", "X"],
     "recordbeam: unknown option --label-map (VOC's classes are the lines of labelmap.txt in "
     "--input, else the names in the XMLs): neither"),
    (["convert", "manifest", "--manifest", "M.csv", "--images", "X"],
     "recordbeam: unknown option --images (the manifest's rows name the images"),
    (["convert", "manifest", "--input", "M.csv", "--root", "X"],
     "recordbeam: unknown option --root (convert manifest takes the CSV or JSONL file as "
     "--input): neither"),
    (["convert", "imagefolder", "--input", "IN", "--images", "X"],
     "recordbeam: unknown option --images (convert imagefolder takes the class folders' parent "
     "as --input): neither"),
])
def test_an_option_of_another_converter_says_what_this_one_takes(tmp_path, capsys, argv, said):
    # Not "did you mean --max-image-bytes?": --images is no typo there.
    code = cli.main([*argv, "--output", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE and err.startswith(said), err
    assert "did you mean" not in err


@pytest.mark.parametrize(("kind", "given", "said"), [
    ("imagefolder", "--images", "--images: convert imagefolder takes the class folders' parent "
                                "as --input"),
    ("manifest", "--root", "--root: convert manifest takes the CSV or JSONL file as --input"),
    ("coco", "--input", "--input: convert coco takes --images FOLDER and --annotations FILE"),
])
def test_a_missing_required_option_explains_the_option_given_instead(tmp_path, capsys, kind,
                                                                     given, said):
    with pytest.raises(SystemExit) as exited:
        cli.main(["convert", kind, given, str(tmp_path), "--output", str(tmp_path / "out")])
    assert exited.value.code == cli.EXIT_USAGE
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("kind", "other_name"), [("imagefolder", "--root"),
                                                 ("manifest", "--manifest")])
def test_another_name_of_input_is_input(kind, other_name):
    args, _ = cli.build_parser().parse_known_args(
        ["convert", kind, other_name, "IN", "--output", "OUT"])
    assert args.input == "IN"


def test_no_hint_sends_a_user_to_an_option_they_typed():
    # A hint for --root where --root is another name of --input would send users in a
    # circle; a hint for an option the command takes would never be said.
    from recordbeam.options import conversion_options
    from recordbeam.sources.format import formats

    for fmt in formats().values():
        options = (*fmt.options, *conversion_options())
        flags = {flag for option in options for flag in option.flags}
        other_names = {alias for option in options for alias in option.aliases}
        for brought, hint in fmt.instead.items():
            assert brought not in flags, (fmt.name, brought)
            assert not set(re.findall(r"--[a-z][a-z-]*", hint)) & other_names, (fmt.name, hint)


def test_stray_word_is_a_usage_error(coco_sample, tmp_path, capsys):
    code = cli.main(_coco(coco_sample, tmp_path / "out", "gzip", *IN_MEMORY))
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "unexpected argument 'gzip'" in err


def test_bad_value_of_a_beam_option_is_a_usage_error(coco_sample, tmp_path, capsys):
    code = cli.main(_coco(coco_sample, tmp_path / "out", "--direct_num_workers=two"))
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "--direct_num_workers" in err and "'two'" in err


def test_unknown_option_of_a_command_without_beam(tmp_path, capsys):
    assert cli.main(["verify", str(tmp_path / "x.tfrecord"), "--max-problem", "3"]) == 2
    err = capsys.readouterr().err
    assert "unknown option --max-problem (did you mean --max-problems?)" in err
    assert "Beam" not in err


@pytest.mark.case('Misspelt option to a `pipelines/*.py` script', 'usage error (exit 2) naming it')
def test_a_typo_in_a_pipeline_script_is_refused(coco_sample, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(PIPELINES / "coco_to_tfrecord.py"), "--images", coco_sample.images_dir,
         "--annotations", coco_sample.annotations, "--output", str(out), "--compresion", "gzip"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "unknown option --compresion (did you mean --compression?)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


# ----------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--max-pixels", "-1"),
        ("--shards", "0"),
        ("--max-reject-fraction", "1.5"),
        ("--jpeg-quality", "0"),
        ("--max-side", "-5"),
        ("--shard-size", "0"),
        ("--max-image-bytes", "0"),
    ],
)
@pytest.mark.case(
    'Out-of-range value (`--max-pixels -1`, `--shards 0`...)',
    'usage error (exit 2) naming the option',
)
def test_out_of_range_value_is_a_usage_error(coco_sample, tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error
        cli.main(_coco(coco_sample, tmp_path / "out", option, value, *IN_MEMORY))
    assert exited.value.code == cli.EXIT_USAGE
    assert f"argument {option}:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_annotations_naming_a_folder_is_a_usage_error(coco_sample, tmp_path, capsys):
    folder = os.path.dirname(coco_sample.annotations)
    argv = ["convert", "coco", "--images", coco_sample.images_dir, "--annotations", folder,
            "--output", str(tmp_path / "out"), "--quiet", *IN_MEMORY]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert err.strip() == (f"recordbeam: {folder} is a folder; --annotations takes the COCO "
                           "instances JSON file, e.g. annotations/instances_train2017.json")


@pytest.mark.parametrize("flag", ["--annotations", "--captions"])
@pytest.mark.parametrize("content,said", [
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "is not a JSON object (it starts with the bytes "
                                          "ff d8 ff e0 00 10 4a 46)"),
    (b"image,label\na.jpg,1\n", "is not a JSON object (it starts with "
                               "'image,label\\na.jpg,1\\n')"),
    (b"[]", "is not a JSON object (it starts with '[]')"),
    (b"", "holds no JSON (it is empty or blank)"),
    (b"\xef\xbb\xbf" + b" \n" * 40000, "holds no JSON (it is empty or blank)"),
    ("a图像标签说明路径图像标签说明路径".encode(), "is not a JSON object (it starts with "
                                          "'a图像标签说明路径')"),  # cut after a whole character
])
def test_a_coco_file_that_is_no_json_object_is_a_usage_error(
        coco_sample, tmp_path, capsys, flag, content, said):
    given = tmp_path / "given.json"
    given.write_bytes(content)
    argv = ["convert", "coco", "--images", coco_sample.images_dir, flag, str(given),
            "--output", str(tmp_path / "out"), "--quiet", *IN_MEMORY]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    kind = "instances" if flag == "--annotations" else "captions"
    assert err.strip().startswith(f"recordbeam: {given} {said}; {flag} takes the COCO {kind} "
                                  "JSON file"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_output_path_is_a_usage_error(coco_sample, tmp_path, capsys, value):
    # Not the filesystem's root, nor the working folder.
    with pytest.raises(SystemExit) as exited:
        cli.main(_coco(coco_sample, value, *IN_MEMORY))
    assert exited.value.code == cli.EXIT_USAGE
    assert "argument --output: is empty; give the path of a folder" in capsys.readouterr().err


@pytest.mark.case("`--jpeg-quality` where no image is re-encoded as JPEG",
                  "usage error (exit 2) naming the options that use it; never silently unused")
def test_a_jpeg_quality_nothing_uses_is_a_usage_error(coco_sample, tmp_path, capsys):
    for more in ([], ["--transcode", "keep"], ["--transcode", "png"],
                 ["--transcode", "png", "--max-side", "64"]):
        code = cli.main(_coco(coco_sample, tmp_path / "out", "--jpeg-quality", "50", *more,
                              *IN_MEMORY))
        assert code == cli.EXIT_USAGE, more
        err = capsys.readouterr().err
        assert err.startswith("recordbeam: --jpeg-quality 50 would be ignored: no image is "
                              "re-encoded as JPEG"), err
        assert not (tmp_path / "out").exists()
    # Where JPEGs are re-encoded, it is taken.
    for index, more in enumerate((["--transcode", "jpeg"], ["--max-side", "64"])):
        out = tmp_path / f"used{index}"
        assert cli.main(_coco(coco_sample, out, "--jpeg-quality", "50", "--max-reject-fraction",
                              "0.5", *more, *IN_MEMORY)) == cli.EXIT_OK, more
        assert json.loads((out / "manifest.json").read_text())["options"], more


def test_a_coco_file_with_much_whitespace_before_its_object_is_read(coco_sample, tmp_path):
    padded = tmp_path / "padded.json"
    with open(coco_sample.annotations, "rb") as f:
        padded.write_bytes(b"\n" * 100_000 + f.read())
    argv = ["convert", "coco", "--images", coco_sample.images_dir, "--annotations", str(padded),
            "--output", str(tmp_path / "out"), "--quiet", "--max-reject-fraction", "0.5",
            *IN_MEMORY]
    assert cli.main(argv) == cli.EXIT_OK
    assert (tmp_path / "out" / "manifest.json").exists()


def test_an_output_folder_that_cannot_be_created_is_a_usage_error_before_the_job(
        coco_sample, tmp_path, capsys, monkeypatch):
    (tmp_path / "a_file").write_text("x")
    under_a_file = tmp_path / "a_file" / "out"
    assert cli.main(_coco(coco_sample, under_a_file, *IN_MEMORY)) == cli.EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"recordbeam: cannot write the output folder {under_a_file}: {tmp_path / 'a_file'} is "
        "a file, not a folder; choose a folder that can be created and written")

    # Permissions: the test may run as root, whom they do not stop; the probe's own error.
    import tempfile

    def refused(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    started = []
    monkeypatch.setattr("recordbeam.pipeline._run_locally",
                        lambda *a, **k: started.append(a))
    deep = tmp_path / "new" / "deeper"
    assert cli.main(_coco(coco_sample, deep, *IN_MEMORY)) == cli.EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"recordbeam: cannot write the output folder {deep}: Permission denied in {tmp_path}; "
        "choose a folder that can be created and written")
    assert not started and not (tmp_path / "new").exists()


def test_the_output_probe_leaves_nothing_behind(coco_sample, tmp_path):
    out = tmp_path / "new" / "out"
    assert cli.main(_coco(coco_sample, out, "--max-reject-fraction", "0.5", *IN_MEMORY)) == 0
    assert not [p for p in tmp_path.rglob("*") if ".recordbeam-probe-" in p.name]


def test_detach_on_the_local_runner_is_refused(coco_sample, tmp_path, capsys):
    code = cli.main(_coco(coco_sample, tmp_path / "out", "--detach", *IN_MEMORY))
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "--detach needs a remote runner" in err
    assert not (tmp_path / "out").exists()


def test_dry_run_on_a_runner_that_ignores_it_is_refused(coco_sample, tmp_path, capsys):
    code = cli.main(_coco(coco_sample, tmp_path / "out", "--dry_run=True", *IN_MEMORY))
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "--dry_run is honoured by DataflowRunner only" in err


# ----------------------------------------------------------------- messages


def test_reject_limit_from_a_worker_process_exits_one_without_type_names(
        coco_sample, tmp_path, capsys):
    argv = _coco(coco_sample, tmp_path / "out", "--direct_running_mode=multi_processing",
                 "--direct_num_workers=1")
    code = cli.main(argv)
    lines = capsys.readouterr().err.splitlines()
    assert code == cli.EXIT_DATA, lines
    assert lines[0].startswith("recordbeam: 7 of 31 images were rejected (22.6%), above "
                               "--max-reject-fraction 0.01."), lines
    assert lines[0].endswith("if these losses are acceptable."), lines  # no Beam step
    assert lines[1].startswith("recordbeam: the run's log is in ")
    assert not any("RejectLimitExceeded" in line or "Error" in line for line in lines)


def test_summary_and_warnings_use_singulars_and_flag_names(coco_sample, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(_coco(coco_sample, out, "--max-reject-fraction", "0.5", *IN_MEMORY))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "24 examples in 1 shard\n" in captured.out
    assert ("warning: 1 image carries an EXIF orientation other than 1" in captured.err
            and "--apply-exif" in captured.err)
    with open(out / "rejects.jsonl", encoding="utf-8") as f:
        rejects = [json.loads(line) for line in f]
    [unsupported] = [r for r in rejects if r["reason"] == "unsupported_format"]
    assert "--transcode jpeg" in unsupported["detail"]
    [too_large] = [r for r in rejects if r["reason"] == "too_large"]
    assert "--max-pixels" in too_large["detail"] and "max_pixels" not in too_large["detail"]


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from _parsers(child)


def test_every_option_says_its_default():
    missing = []
    for parser in _parsers(cli.build_parser()):
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if action.required:  # nothing to default to
                continue
            if "default" not in (action.help or ""):
                missing.append(f"{parser.prog} {action.option_strings[0]}")
    assert missing == []


@pytest.mark.parametrize("command", ["inspect", "verify", "index"])
def test_help_of_commands_reading_records_says_they_take_an_output_folder(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"usage: recordbeam {command} " in help_text
    assert "PATH_GLOB_OR_FOLDER [PATH_GLOB_OR_FOLDER ...]" in help_text
    assert "or an output folder (the shards its manifest.json lists" in help_text


@pytest.mark.parametrize("command", [["convert"], ["convert", "coco"], ["reshard"]])
def test_help_says_other_options_go_to_beam(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([*command, "--help"])
    assert "go to Beam" in " ".join(capsys.readouterr().out.split())


def test_demo_does_not_name_the_folder_it_deletes(tmp_path, capsys):
    code = cli.main(["demo", "--num-images", "8", "--output", str(tmp_path / "out"), "--quiet",
                     *IN_MEMORY])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("generated a COCO sample of ")
    assert "recordbeam-demo-" not in out and "/tmp" not in out.split("\n")[0]


def test_demo_of_another_format_converts_the_sample_it_declares(tmp_path, capsys):
    out = tmp_path / "out [1]"  # no glob: its first example is found all the same
    assert cli.main(["demo", "--format", "labelstudio", "--output", str(out), "--quiet",
                     *IN_MEMORY]) == 0
    said = capsys.readouterr().out
    assert said.startswith("laid out a sample of labelstudio (")
    assert "  project-1-export.json\n" in said and "  media/upload/1/" in said
    assert "recordbeam convert labelstudio --input project-1-export.json --images media" in said
    assert 'value: "dog"' in said  # the first example, shown
    (split,) = json.loads((out / "manifest.json").read_text())["splits"].values()
    assert split["examples"] == 2
    # Its images differ: no duplicate group in a format's demo.
    assert "duplicate groups  0" in said or "duplicate" not in said


def test_demo_refuses_num_images_for_a_format_that_declares_its_sample(tmp_path, capsys):
    code = cli.main(["demo", "--format", "voc", "--num-images", "3", "--output",
                     str(tmp_path / "out")])
    assert code == 2
    assert "--num-images sizes the generated COCO sample" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("checks", [{"max_pixels": -1}, {"max_pixels": 0}, {"max_bytes": 0}])
def test_image_checks_refuse_limits_that_reject_every_image(checks):
    from recordbeam.write.image_encoder import ImageChecks

    with pytest.raises(ValueError, match="must be above 0"):
        ImageChecks(**checks)


def test_ctrl_c_before_anything_ran_is_one_line(monkeypatch, capsys):
    def interrupted_while_importing():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted_while_importing)
    assert cli.main(["inspect", "x"]) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "recordbeam: interrupted\n"


def test_missing_required_option_names_the_typo_given_instead(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["convert", "yolo", "--inptu", str(tmp_path), "--output", str(tmp_path / "o")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "required: --input" in err and "--inptu looks like a typo of --input" in err


@pytest.mark.parametrize(("argv", "said"), [
    (["imagefolder", "--roott"], "--roott looks like a typo of --root"),
    (["imagefolder", "--inptu"], "--inptu looks like a typo of --input"),
    (["manifest", "--manifets"], "--manifets looks like a typo of --manifest"),
])
def test_a_typo_of_another_name_of_input_is_named(tmp_path, capsys, argv, said):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["convert", *argv, str(tmp_path), "--output", str(tmp_path / "o")])
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("kind", "other"), [("imagefolder", "--root"), ("manifest", "--manifest")])
def test_input_under_both_its_names_is_refused(tmp_path, capsys, kind, other):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["convert", kind, other, str(tmp_path / "a"), "--input", str(tmp_path / "b"),
                  "--output", str(tmp_path / "o")])
    assert stopped.value.code == 2
    assert f"{other} and --input name the same option; give it once" in capsys.readouterr().err
