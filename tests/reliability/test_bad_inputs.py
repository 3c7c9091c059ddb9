"""Bad inputs: every broken image, unsafe path and odd annotation ends as a reject with a
reason code (or, for a file that cannot be parsed at all, a clear error naming the file and
position), never a crash and never a silent loss.

One dataset holds most cases and is converted once; each test checks one case in it.
Expectations come from how the dataset was built, not from the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from reliability_data import convert_argv, jpeg, png, read_jsonl, write

from recordbeam import filesystems
from recordbeam.cli import main as cli
from recordbeam.dataset.names import TEMP_PREFIX
from recordbeam.records import ImageRecord
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.image_encoder import ImageChecks, ImageExampleEncoder

MAX_PIXELS = 1_000_000  # the run's --max-pixels: the "bomb" below decodes to 4 M pixels
GOOD = 30
CASE = pytest.mark.case


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height``, followed by an empty IEND."""
    import struct
    import zlib

    def chunk(kind: bytes, payload: bytes) -> bytes:
        body = kind + payload
        return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def _jpeg_claiming(width: int, height: int) -> bytes:
    data = bytearray(jpeg())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 7] = height.to_bytes(2, "big")
    data[sof + 7 : sof + 9] = width.to_bytes(2, "big")
    return bytes(data)


def _gif() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("P", (16, 16)).save(buffer, "GIF")
    return buffer.getvalue()


def _gif_claiming(width: int, height: int) -> bytes:
    data = bytearray(_gif())
    data[6:10] = width.to_bytes(2, "little") + height.to_bytes(2, "little")  # logical screen
    return bytes(data)


#: file name -> (bytes written into the images folder, expected image reject reason)
BAD_FILES = {
    "truncated.jpg": (jpeg()[:300], "truncated"),
    "empty.jpg": (b"", "empty"),
    "notes.jpg": (b"this is a note, not a picture\n" * 4, "not_an_image"),
    "animation.gif": (_gif(), "unsupported_format"),
    "bomb.png": (png(2000, 2000), "too_large"),
    "absurd.png": (_png_header(2**31 - 1, 2**31 - 1), "too_large"),
    "absurd.jpg": (_jpeg_claiming(65535, 65535), "too_large"),
    "absurd.gif": (_gif_claiming(65535, 65535), "too_large"),
}


class BadDataset:
    """The dataset: images/, outside/ (never to be read), annotations/instances.json."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.images = os.path.join(root, "images")
        self.outside = os.path.join(root, "outside")
        self.annotations = os.path.join(root, "annotations", "instances.json")
        for folder in (self.images, self.outside, os.path.dirname(self.annotations)):
            os.makedirs(folder)
        self.secret = write(os.path.join(self.outside, "secret.jpg"), jpeg(color=(1, 2, 3)))
        self.entries: list[dict] = []
        self.annotations_list: list[dict] = []
        self.good: dict[str, int] = {}  # file name -> image id, for images that must be written
        self.ann_reasons: dict[int, str] = {}

    def image(self, image_id, name, data: bytes | None = None, **extra) -> dict:
        if data is not None:
            write(os.path.join(self.images, name), data)
        entry = {"id": image_id, "file_name": name, "width": 32, "height": 24, **extra}
        self.entries.append(entry)
        return entry

    def annotate(self, ann_id, image_id, bbox, category_id=1, **extra) -> None:
        self.annotations_list.append(
            {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": bbox, **extra}
        )

    def save(self) -> None:
        document = {
            "images": self.entries,
            "annotations": self.annotations_list,
            "categories": [{"id": 1, "name": "thing"}, {"id": 2, "name": "other"}],
        }
        with open(self.annotations, "w", encoding="ascii") as f:
            json.dump(document, f, ensure_ascii=True)  # \udcff escapes for the odd name


def _build(root: str) -> BadDataset:
    d = BadDataset(root)
    for i in range(GOOD):
        name = f"good_{i:02d}.jpg"
        d.image(i + 1, name, jpeg(color=(i * 8, 40, 90)))
        d.good[name] = i + 1
        d.annotate(1000 + i, i + 1, [2.0, 2.0, 8.0, 8.0])
    for offset, (name, (data, _reason)) in enumerate(BAD_FILES.items()):
        d.image(100 + offset, name, data)
    # Links: one staying inside (fine), one leading out, one dangling, one looping.
    os.symlink(os.path.join(d.images, "good_00.jpg"), os.path.join(d.images, "link_inside.jpg"))
    d.image(200, "link_inside.jpg")
    d.good["link_inside.jpg"] = 200
    os.symlink(d.secret, os.path.join(d.images, "link_outside.jpg"))
    d.image(201, "link_outside.jpg")
    os.symlink(os.path.join(d.root, "nowhere.jpg"), os.path.join(d.images, "dangling.jpg"))
    d.image(202, "dangling.jpg")
    os.symlink("loop.jpg", os.path.join(d.images, "loop.jpg"))
    d.image(203, "loop.jpg")
    # Names leaving the folder.
    d.image(300, "../outside/secret.jpg")
    d.image(301, d.secret)
    # Annotation problems.
    d.entries.append({"id": 400, "width": 32, "height": 24})  # no file_name
    d.annotate(401, 1, None)
    del d.annotations_list[-1]["category_id"]  # an annotation without category_id
    d.image(410, "dup_id_a.jpg", jpeg())
    d.image(410, "dup_id_b.jpg", jpeg())
    d.image(411, "dup_name.jpg", jpeg())
    d.image(412, "dup_name.jpg")
    d.annotate(420, 2, [2.0, 2.0, -5.0, 4.0])  # negative width
    d.ann_reasons[420] = "invalid_bbox"
    d.image(430, "bad\udcffname.jpg")  # a lone surrogate: a name that was not UTF-8
    write(os.path.join(d.images.encode(), b"raw\xffname.jpg"), jpeg())  # not UTF-8 on disk
    # Huge numbers.
    d.image(10**30, "huge_id.jpg", jpeg(), width=10**30)
    d.good["huge_id.jpg"] = 10**30
    d.annotate(440, 3, [1e308, 1e308, 1e308, 1e308])
    d.ann_reasons[440] = "empty_bbox"
    d.annotate(441, 4, [10**400, 1, 2, 2])
    d.ann_reasons[441] = "invalid_bbox"
    d.annotate(442, 5, [1.0, 1.0, 4.0, 5.0], area=10**400)
    d.annotate(443, 6, [1.0, 1.0, 4.0, 5.0], category_id=2**70)
    d.ann_reasons[443] = "unknown_category"
    d.save()
    return d


class Run:
    def __init__(self, dataset: BadDataset, output: str, code: int, opened: list[str]) -> None:
        self.dataset = dataset
        self.output = output
        self.code = code
        self.opened = opened
        self.rejects = read_jsonl(os.path.join(output, "rejects.jsonl"))
        with open(os.path.join(output, "manifest.json"), encoding="utf-8") as f:
            self.manifest = json.load(f)
        shards = sorted(n for n in os.listdir(output) if ".tfrecord" in n)
        self.examples = [
            decode_example(r) for n in shards for r in open_records(os.path.join(output, n))
        ]

    def image_rejects(self, reason: str) -> list[dict]:
        return [r for r in self.rejects if r["kind"] == "image" and r["reason"] == reason]

    def written(self) -> dict[str, dict]:
        return {e["image/filename"][0].decode(): e for e in self.examples}


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory) -> Run:
    root = str(tmp_path_factory.mktemp("bad-inputs"))
    dataset = _build(root)
    output = os.path.join(root, "out")
    opened: list[str] = []
    real_open = filesystems.open_read

    def recording_open(path):
        opened.append(path)
        return real_open(path)

    with pytest.MonkeyPatch.context() as mp:  # in-memory mode: workers run in this process
        mp.setattr(filesystems, "open_read", recording_open)
        argv = convert_argv(dataset.images, dataset.annotations, output)
        code = cli.main(argv + ["--max-pixels", str(MAX_PIXELS), "--max-reject-fraction", "0.9"])
    assert code == 0
    return Run(dataset, output, code, opened)


# ----------------------------------------------------------------- images


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            "truncated.jpg", marks=CASE("Truncated JPEG", "reject `truncated`; run succeeds")
        ),
        pytest.param("empty.jpg", marks=CASE("Empty file", "reject `empty`")),
        pytest.param("notes.jpg", marks=CASE("Text file named .jpg", "reject `not_an_image`")),
        pytest.param(
            "animation.gif", marks=CASE("GIF (format not stored)", "reject `unsupported_format`")
        ),
        pytest.param(
            "bomb.png",
            marks=CASE(
                "Decompression bomb: 2000x2000 PNG of 4 KB, --max-pixels 1M",
                "reject `too_large` from the header; pixels never decoded",
            ),
        ),
        pytest.param(
            "absurd.png",
            marks=CASE("PNG header claiming 2^31-1 x 2^31-1 pixels", "reject `too_large`"),
        ),
        pytest.param(
            "absurd.jpg",
            marks=CASE("JPEG header claiming 65535 x 65535 pixels", "reject `too_large`"),
        ),
        pytest.param(
            "absurd.gif",
            marks=CASE("GIF header claiming 65535 x 65535 pixels",
                       "reject `too_large` (not `unsupported_format`)"),
        ),
    ],
)
def test_bad_image_is_rejected_with_its_reason(bad_run, name):
    expected = BAD_FILES[name][1]
    path = os.path.join(bad_run.dataset.images, name)
    found = [r for r in bad_run.rejects if r["source"] == path]
    assert [(r["kind"], r["reason"]) for r in found] == [("image", expected)]
    assert found[0]["detail"], "a reject explains itself"
    assert name not in bad_run.written()


@CASE(
    "Pixel limit is configurable",
    "`max_pixels=None` (CLI `--max-pixels 0`) accepts the same 4 M-pixel PNG",
)
def test_pixel_limit_is_configurable(tmp_path):
    path = write(tmp_path / "bomb.png", BAD_FILES["bomb.png"][0])
    record = ImageRecord(identity="1", path=path, size=os.path.getsize(path))
    limited = ImageExampleEncoder(ImageChecks(max_pixels=MAX_PIXELS)).encode(record)
    assert [r.reason for r in limited.rejects] == ["too_large"]
    unlimited = ImageExampleEncoder(ImageChecks(max_pixels=None)).encode(record)
    assert unlimited.rejects == ()
    assert unlimited.features["image/width"] == 2000


_UNREADABLE_SCRIPT = """
import json, sys
from recordbeam.write.image_encoder import ImageExampleEncoder
from recordbeam.records import ImageRecord
record = ImageRecord(identity="1", path=sys.argv[1], size=int(sys.argv[2]))
print(json.dumps([[r.reason, r.detail] for r in ImageExampleEncoder().encode(record).rejects]))
"""


@CASE("Unreadable image (permission denied)", "reject `unreadable`, naming the error")
def test_unreadable_image_is_rejected(tmp_path):
    path = write(tmp_path / "locked.jpg", jpeg())
    os.chmod(path, 0)
    # Root reads any file whatever its mode: as root the reader runs without the
    # capabilities that bypass file permissions.
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    command = [sys.executable, "-c", _UNREADABLE_SCRIPT, path, str(os.path.getsize(path))]
    result = subprocess.run(
        (drop if os.geteuid() == 0 else []) + command,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [(reason, detail)] = json.loads(result.stdout)
    assert reason == "unreadable"
    assert "Permission denied" in detail


# ----------------------------------------------------------------- links and paths


@CASE("Symlink to a file inside the images folder", "read and written like the file")
def test_symlink_inside_the_root_is_read(bad_run):
    written = bad_run.written()
    assert (
        written["link_inside.jpg"]["image/encoded"][0] == written["good_00.jpg"]["image/encoded"][0]
    )


@CASE(
    "Symlink leading outside the images folder", "reject `outside_root`; the target is never opened"
)
def test_symlink_outside_the_root_is_rejected_unopened(bad_run):
    link = os.path.join(bad_run.dataset.images, "link_outside.jpg")
    found = [r for r in bad_run.image_rejects("outside_root") if r["source"] == link]
    assert len(found) == 1
    assert bad_run.dataset.secret in found[0]["detail"]
    assert "--allow-outside-root" in found[0]["detail"]
    assert link not in bad_run.opened
    assert all(os.path.realpath(p) != bad_run.dataset.secret for p in bad_run.opened)


@CASE("Dangling symlink, and a symlink loop", "reject `missing` (listed, no readable file)")
def test_dangling_and_looping_symlinks_are_missing(bad_run):
    missing = {os.path.basename(r["source"]) for r in bad_run.image_rejects("missing")}
    assert {"dangling.jpg", "loop.jpg"} <= missing


@CASE("`../` and absolute `file_name`s", "reject `outside_root`; never opened")
def test_dotdot_and_absolute_names_are_rejected_unopened(bad_run):
    sources = {r["source"] for r in bad_run.image_rejects("outside_root")}
    assert {"../outside/secret.jpg", bad_run.dataset.secret} <= sources
    assert not any(".." in p.split("/") for p in bad_run.opened)
    assert bad_run.dataset.secret not in bad_run.opened
    allowed = {bad_run.dataset.images, os.path.dirname(bad_run.dataset.annotations), bad_run.output}
    temp = os.path.join(os.path.realpath(bad_run.output), TEMP_PREFIX)  # the run's own files
    assert {os.path.dirname(os.path.realpath(p)) for p in bad_run.opened
            if not os.path.realpath(p).startswith(temp)} <= allowed


@CASE("`--allow-outside-root`", "`../`, absolute and linked-out files are read and written")
def test_allow_outside_root_reads_them(tmp_path, capsys):
    d = BadDataset(str(tmp_path / "data"))
    d.image(1, "inside.jpg", jpeg())
    os.symlink(d.secret, os.path.join(d.images, "link_outside.jpg"))
    d.image(2, "link_outside.jpg")
    d.image(3, "../outside/secret.jpg")
    d.image(4, d.secret)
    d.image(5, "../outside/absent.jpg")
    d.save()
    out = str(tmp_path / "out")
    code = cli.main(
        convert_argv(
            d.images, d.annotations, out, "--allow-outside-root", "--max-reject-fraction", "0.5"
        )
    )
    assert code == 0, capsys.readouterr().err
    shard = [n for n in os.listdir(out) if n.endswith(".tfrecord")]
    examples = [decode_example(r) for r in open_records(os.path.join(out, shard[0]))]
    names = sorted(e["image/filename"][0].decode() for e in examples)
    assert names == sorted(["inside.jpg", "link_outside.jpg", "../outside/secret.jpg", d.secret])
    with open(d.secret, "rb") as f:
        secret = f.read()
    assert sum(e["image/encoded"][0] == secret for e in examples) == 3
    rejects = read_jsonl(os.path.join(out, "rejects.jsonl"))
    assert [(r["reason"], os.path.basename(r["source"])) for r in rejects] == [
        ("missing", "absent.jpg")
    ]


# ----------------------------------------------------------------- annotations


@CASE(
    "Entries missing required fields (image without `file_name`, annotation without "
    "`category_id`)",
    "reject `missing_field` naming the file and the list position",
)
def test_missing_fields_are_rejected(bad_run):
    found = [r for r in bad_run.rejects if r["reason"] == "missing_field"]
    assert sorted(r["kind"] for r in found) == ["annotation", "image"]
    for r in found:
        assert r["source"].startswith(bad_run.dataset.annotations + ": ")
    assert any("lacks category_id" in r["detail"] for r in found)


@CASE("Duplicate image ids", "both entries rejected `duplicate_image_id`, saying so")
def test_duplicate_image_ids_reject_both(bad_run):
    found = bad_run.image_rejects("duplicate_image_id")
    assert sorted(os.path.basename(r["source"]) for r in found) == ["dup_id_a.jpg", "dup_id_b.jpg"]
    assert all("All of them were rejected" in r["detail"] for r in found)
    assert not {"dup_id_a.jpg", "dup_id_b.jpg"} & set(bad_run.written())


@CASE("Duplicate file names", "both entries rejected `duplicate_file_name`")
def test_duplicate_file_names_reject_both(bad_run):
    found = bad_run.image_rejects("duplicate_file_name")
    assert sorted(r["source"] for r in found) == [
        "dup_name.jpg (image id 411)",
        "dup_name.jpg (image id 412)",
    ]
    assert "dup_name.jpg" not in bad_run.written()


@CASE("Negative box width", "annotation rejected `invalid_bbox`; its image is written without it")
def test_negative_box_drops_the_object_not_the_image(bad_run):
    found = [r for r in bad_run.rejects if r["source"] == "annotation 420"]
    assert [r["reason"] for r in found] == ["invalid_bbox"]
    good_01 = bad_run.written()["good_01.jpg"]
    assert len(good_01["image/object/bbox/xmin"]) == 1  # only its valid box


@CASE("`file_name` that is not valid UTF-8 (`\\udcff` escape)", "reject `invalid_file_name`")
def test_lone_surrogate_name_is_rejected(bad_run):
    found = bad_run.image_rejects("invalid_file_name")
    assert [r["source"] for r in found] == ["bad\\udcffname.jpg"]


@CASE("Image file whose name on disk is not UTF-8", "counted as unlisted; the run does not crash")
def test_non_utf8_name_on_disk_is_counted(bad_run):
    assert bad_run.manifest["splits"]["train"]["counts"]["unlisted_files"] == 1


@CASE(
    "Huge numbers: 10^30 image id and width, 10^400 box and area, 2^70 category",
    "image written; boxes rejected `invalid_bbox` / `empty_bbox` / `unknown_category`",
)
def test_huge_numbers_become_rejects(bad_run):
    written = bad_run.written()
    assert written["huge_id.jpg"]["image/source_id"][0] == str(10**30).encode()
    reasons = {
        int(r["source"].split()[1]): r["reason"]
        for r in bad_run.rejects
        if r["kind"] == "annotation" and r["source"].startswith("annotation ")
    }
    for ann_id, reason in bad_run.dataset.ann_reasons.items():
        assert reasons[ann_id] == reason, ann_id
    assert not any(r["reason"] == "encode_error" for r in bad_run.rejects)
    image_5 = written["good_04.jpg"]  # annotation 442's area of 10^400 is recomputed: 4 x 5
    assert sorted(image_5["image/object/area"]) == [20.0, 64.0]


@CASE("Every listed image", "either written once or rejected with a reason: no silent loss")
def test_every_listed_image_is_written_or_rejected(bad_run):
    written = bad_run.written()
    assert sorted(written) == sorted(bad_run.dataset.good)
    image_rejects = [r for r in bad_run.rejects if r["kind"] == "image"]
    listed = len(bad_run.dataset.entries)
    assert len(written) + len(image_rejects) == listed
    assert bad_run.manifest["splits"]["train"]["rejects"]["images"] == len(image_rejects)


def _error_run(tmp_path, text: bytes, capsys) -> tuple[int, str, str]:
    images = tmp_path / "images"
    images.mkdir()
    write(images / "a.jpg", jpeg())
    annotations = write(tmp_path / "instances.json", text)
    out = tmp_path / "out"
    code = cli.main(convert_argv(str(images), annotations, str(out)))
    assert not (out / "manifest.json").exists()
    return code, capsys.readouterr().err, annotations


_HEAD = b'{"categories": [{"id": 1, "name": "a"}], "annotations": [], "images": [' + b" " * 3000
_OK = b'{"id": 1, "file_name": "a.jpg"}'


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        pytest.param(
            _HEAD + _OK + b', {"id": 2 "file_name": "b.jpg"}]}',
            b'"file_name": "b',
            marks=CASE(
                "Malformed annotation JSON (missing comma)",
                "run fails (exit 1) naming the file and byte position",
            ),
        ),
        pytest.param(
            _HEAD + _OK + b', {"id": 2, "file_na',
            b"file_na",
            marks=CASE(
                "Truncated annotation JSON", "run fails (exit 1) naming the file and byte position"
            ),
        ),
        pytest.param(
            _HEAD + _OK + b', {"id": 2, "file_name": "b\xff.jpg"}]}',
            b"\xff",
            marks=CASE(
                "Annotation JSON with bytes that are not UTF-8",
                "run fails (exit 1) naming the file and byte position",
            ),
        ),
        pytest.param(
            _HEAD + _OK + b'], "annotations": [{"id": 1, "image_id": 1, "category_id": 1, '
            b'"bbox": [NaN, 1, 2, 2]}]}',
            b"NaN",
            marks=CASE(
                "NaN in a box (not JSON; Python writes it)",
                "run fails (exit 1) naming the file and byte position",
            ),
        ),
    ],
)
def test_unparsable_json_fails_naming_file_and_position(tmp_path, capsys, text, bad):
    code, err, annotations = _error_run(tmp_path, text, capsys)
    assert code == 1
    assert annotations in err and "malformed JSON" in err
    position = int(err.split("before byte ")[1].split(")")[0])
    where = text.index(bad)
    assert where <= position <= where + 65536


@CASE("Category id beyond 64 bits", "run fails (exit 1): labels could not be written")
def test_category_id_beyond_int64_fails_clearly(tmp_path, capsys):
    text = (
        b'{"categories": [{"id": 1180591620717411303424, "name": "a"}], "annotations": [],'
        b' "images": [' + _OK + b"]}"
    )
    code, err, _ = _error_run(tmp_path, text, capsys)
    assert code == 1
    assert "64-bit" in err and "--contiguous-labels" in err


# ----------------------------------------------------------------- reject limit


def _fraction_dataset(root) -> BadDataset:
    d = BadDataset(str(root))
    for i in range(4):
        d.image(i + 1, f"ok_{i}.jpg", jpeg())
    d.image(5, "cut.jpg", jpeg()[:200])
    d.save()
    return d


@CASE(
    "Rejects above `--max-reject-fraction` (1 of 5 = 0.2 vs 0.19; 0.2 passes)",
    "run fails (exit 1) with the summary; nothing committed",
)
def test_reject_fraction_boundary(tmp_path, capsys):
    d = _fraction_dataset(tmp_path / "data")
    at_limit = tmp_path / "at-limit"
    assert (
        cli.main(
            convert_argv(d.images, d.annotations, str(at_limit), "--max-reject-fraction", "0.2")
        )
        == 0
    )
    assert (at_limit / "manifest.json").exists()
    capsys.readouterr()
    over = tmp_path / "over"
    code = cli.main(
        convert_argv(d.images, d.annotations, str(over), "--max-reject-fraction", "0.19")
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "1 of 5 images were rejected (20.0%)" in err and "truncated: 1" in err
    # The lock file records the rejects file as recordbeam's, for the next run to replace.
    assert sorted(os.listdir(over)) == [".recordbeam-lock.json", "failed-run-rejects.jsonl"]


@CASE("`../` and absolute paths in manifest rows",
      "reject `outside_root` (URLs are allowed) unless `--allow-outside-root`")
def test_manifest_rows_leaving_the_manifest_folder_are_rejected(tmp_path, capsys):
    data = tmp_path / "data"
    (data / "img").mkdir(parents=True)
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(jpeg())
    (data / "img" / "a.jpg").write_bytes(jpeg())
    (data / "rows.csv").write_text(
        f"image,label\nimg/a.jpg,1\n../outside.jpg,2\n{outside},3\n", encoding="utf-8")
    argv = ["convert", "manifest", "--manifest", str(data / "rows.csv"), "--quiet",
            "--max-reject-fraction", "1", "--direct_running_mode=in_memory",
            "--direct_num_workers=1"]
    assert cli.main([*argv, "--output", str(tmp_path / "strict")]) == 0, capsys.readouterr().err
    rejects = [json.loads(line) for line in
               (tmp_path / "strict" / "rejects.jsonl").read_text().splitlines()]
    assert sorted((r["source"].rsplit(":", 1)[1], r["reason"]) for r in rejects) == [
        ("3", "outside_root"), ("4", "outside_root")]
    strict = [decode_example(r)["label"].tolist() for r in
              open_records(str(next((tmp_path / "strict").glob("*.tfrecord"))))]
    assert strict == [[1]]

    assert cli.main([*argv, "--output", str(tmp_path / "open"), "--allow-outside-root"]) == 0
    labels = sorted(decode_example(r)["label"].tolist()[0] for r in
                    open_records(str(next((tmp_path / "open").glob("*.tfrecord")))))
    assert labels == [1, 2, 3]
