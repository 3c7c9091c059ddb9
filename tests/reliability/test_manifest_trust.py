"""Untrusted manifests: rows past the launcher's schema sample that disagree with it."""

from __future__ import annotations

import json

import pytest
from reliability_data import jpeg

from recordbeam.cli import main as cli

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _manifest(tmp_path) -> str:
    (tmp_path / "img").mkdir()
    for name in "abcdefg":
        (tmp_path / "img" / f"{name}.jpg").write_bytes(jpeg())
    rows = [{"image": f"img/{n}.jpg", "label": i, "split": "train"} for i, n in enumerate("abc")]
    rows += [
        {"image": "img/d.jpg", "label": "four", "split": "train"},  # text in an int64 column
        {"image": "img/e.jpg", "label": 5, "split": "train", "note": "new"},  # a new column
        {"label": 6, "split": "train"},  # no image
        {"image": "img/g.jpg", "label": 7, "split": "test"},  # a split the sample lacks
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _argv(manifest: str, output, *more: str) -> list[str]:
    return ["convert", "manifest", "--manifest", manifest, "--output", str(output),
            "--split-column", "split", "--schema-sample-rows", "3", "--quiet", *more, *IN_MEMORY]


@CASE("Manifest row after the schema sample whose type, columns, image or split disagree",
      "reject `bad_row` / `unknown_split` naming `<manifest>:<line>` and the option to pass; "
      "the run fails (exit 1) past the reject limit")
def test_rows_disagreeing_with_the_sample_are_rejects_counted_against_the_limit(tmp_path, capsys):
    manifest = _manifest(tmp_path)
    assert cli.main(_argv(manifest, tmp_path / "lenient", "--max-reject-fraction", "0.9")) == 0
    rejects = [json.loads(line) for line in
               (tmp_path / "lenient" / "rejects.jsonl").read_text().splitlines()]
    found = sorted((r["source"], r["reason"]) for r in rejects)
    assert found == [(f"{manifest}:4", "bad_row"), (f"{manifest}:5", "bad_row"),
                     (f"{manifest}:6", "bad_row"), (f"{manifest}:7", "unknown_split")]
    details = {r["source"].rsplit(":", 1)[1]: r["detail"] for r in rejects}
    assert "--schema" in details["4"] and "--schema" in details["5"]
    assert "--splits train,test" in details["7"]
    written = json.loads((tmp_path / "lenient" / "manifest.json").read_text())
    assert written["splits"]["train"]["examples"] == 3

    capsys.readouterr()
    code = cli.main(_argv(manifest, tmp_path / "strict", "--max-reject-fraction", "0.5"))
    assert code == cli.EXIT_DATA
    assert not (tmp_path / "strict" / "manifest.json").exists()
    assert "Traceback" not in capsys.readouterr().err

    declared = _argv(manifest, tmp_path / "declared", "--splits", "train,test",
                     "--max-reject-fraction", "0.9")
    assert cli.main(declared) == 0
    written = json.loads((tmp_path / "declared" / "manifest.json").read_text())
    assert written["splits"]["test"]["examples"] == 1


@CASE("Manifest rows that are not UTF-8, read by one worker (`--csv-multiline`) or in byte "
      "ranges",
      "reject `bad_row` naming `<manifest>:<line>`; the other rows are written; the run goes on")
@pytest.mark.parametrize("multiline", [False, True])
def test_rows_that_are_not_utf8_are_rejects_wherever_they_are_read(tmp_path, multiline):
    (tmp_path / "img").mkdir()
    for name in "abcd":
        (tmp_path / "img" / f"{name}.jpg").write_bytes(jpeg())
    path = tmp_path / "rows.csv"
    path.write_bytes(b"image,label,note\nimg/a.jpg,0,x\nimg/b.jpg,1,\"two\nlines\"\n"
                     b"img/c.jpg,2,caf\xe9\nimg/d.jpg,3,y\n")  # line 5: Latin-1, not UTF-8
    more = ["--csv-multiline"] if multiline else ["--schema-sample-rows", "1"]
    argv = ["convert", "manifest", "--manifest", str(path), "--output", str(tmp_path / "out"),
            "--max-reject-fraction", "0.9", "--quiet", *more, *IN_MEMORY]
    assert cli.main(argv) == 0
    rejects = [json.loads(line) for line in
               (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    not_utf8 = [r for r in rejects if "not UTF-8" in r["detail"]]
    assert [(r["source"], r["reason"]) for r in not_utf8] == [(f"{path}:5", "bad_row")]
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    # One reader parses the quoted line break; byte ranges reject its two lines instead.
    assert written["splits"]["train"]["examples"] == (3 if multiline else 2)


@CASE("A file that is no manifest (a JPEG named `.csv` or `.jsonl`)",
      "the run stops before it starts (exit 1), naming the file and what it expected")
@pytest.mark.parametrize("name", ["pic.csv", "pic.jsonl"])
def test_a_file_that_is_no_manifest_stops_the_run_naming_it(tmp_path, capsys, name):
    (tmp_path / name).write_bytes(jpeg())
    argv = ["convert", "manifest", "--manifest", str(tmp_path / name),
            "--output", str(tmp_path / "out"), "--quiet", *IN_MEMORY]
    assert cli.main(argv) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{tmp_path / name}" in err and "not UTF-8" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


@CASE("JSON Lines row with a `\\udcff` escape (a lone surrogate: no character), in the "
      "launcher's schema sample or past it",
      "reject `bad_row` naming `<manifest>:<line>` and the escape; the other rows are written")
def test_a_lone_surrogate_escape_is_a_reject_wherever_the_row_is_read(tmp_path):
    (tmp_path / "img").mkdir()
    for name in "abcd":
        (tmp_path / "img" / f"{name}.jpg").write_bytes(jpeg())
    rows = [json.dumps({"image": f"img/{n}.jpg", "note": note})
            for n, note in zip("abcd", ["ok", "\udcff", "fine", "caf\udce9"], strict=True)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    argv = ["convert", "manifest", "--manifest", str(path), "--output", str(tmp_path / "out"),
            "--schema-sample-rows", "2", "--max-reject-fraction", "0.9", "--quiet", *IN_MEMORY]
    assert cli.main(argv) == 0
    rejects = [json.loads(line) for line in
               (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert sorted((r["source"], r["reason"]) for r in rejects) == [
        (f"{path}:2", "bad_row"), (f"{path}:4", "bad_row")]
    assert all("lone surrogate" in r["detail"] for r in rejects)
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert written["splits"]["train"]["examples"] == 2


@CASE("Manifest whose lines end in a carriage return alone (classic Mac line ends, Excel's "
      "\"CSV (Macintosh)\"), CSV or JSON Lines",
      "every row is read (by one worker: byte ranges cut at line feeds); none lost, none "
      "rejected")
@pytest.mark.parametrize("name", ["rows.csv", "rows.jsonl"])
def test_carriage_return_line_ends_lose_no_row(tmp_path, name):
    (tmp_path / "img").mkdir()
    for n in "abc":
        (tmp_path / "img" / f"{n}.jpg").write_bytes(jpeg())
    if name.endswith(".csv"):
        lines = ["image,label", *(f"img/{n}.jpg,{i}" for i, n in enumerate("abc"))]
    else:
        lines = [json.dumps({"image": f"img/{n}.jpg", "label": i}) for i, n in enumerate("abc")]
    path = tmp_path / name
    path.write_bytes("\r".join(lines).encode() + b"\r")
    argv = ["convert", "manifest", "--manifest", str(path), "--output", str(tmp_path / "out"),
            "--quiet", *IN_MEMORY]
    assert cli.main(argv) == 0
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert written["splits"]["train"]["examples"] == 3
    assert written["rejects"]["total"] == 0


@CASE("A compressed manifest (`rows.csv.gz`)",
      "the run stops before it starts (exit 1), naming the archive and saying to extract it")
def test_a_compressed_manifest_is_named_as_an_archive(tmp_path, capsys):
    import gzip

    path = tmp_path / "rows.csv.gz"
    path.write_bytes(gzip.compress(b"image,label\nimg/a.jpg,0\n"))
    argv = ["convert", "manifest", "--manifest", str(path), "--output", str(tmp_path / "out"),
            "--quiet", *IN_MEMORY]
    assert cli.main(argv) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert f"{path} is a gzip archive" in err and "extract it" in err
    assert "Traceback" not in err
