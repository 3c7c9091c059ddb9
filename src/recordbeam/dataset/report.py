"""``recordbeam report OUT``: one static HTML page about an output folder.

Numbers come from the manifest (examples per split and shard, rejects by reason) and
from one pass over the records (classes, boxes per image, box sizes, image sizes and
formats). Charts are drawn with matplotlib, an optional dependency (the ``report`` extra),
as inline SVG, so the page is one self-contained file without scripts; without
matplotlib the page has the same tables and no charts. The same pass picks each split's
gallery (:mod:`recordbeam.dataset.gallery`: examples drawn from the records as inline
JPEG thumbnails), and a strip shows rejected images that still decode.
"""

from __future__ import annotations

import html
import io
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recordbeam import feature_keys
from recordbeam.dataset.duplicate_gallery import (
    DUPLICATE_ROWS,
    DuplicateRow,
    exact_rows,
    fetch_examples,
    near_rows,
)
from recordbeam.dataset.duplicate_groups import Group
from recordbeam.dataset.find_duplicates import DuplicateFinder, RecordPlace
from recordbeam.dataset.gallery import (
    DEFAULT_GALLERY,
    GallerySample,
    RejectStrip,
    Thumbnail,
    draw_example,
    rejected_images,
)
from recordbeam.dataset.names import DUPLICATES, REJECTS
from recordbeam.dataset.near_groups import NearComponents
from recordbeam.dataset.reader import SplitReader, read, read_manifest
from recordbeam.dataset.schema import label_features
from recordbeam.dataset.tfds import class_names
from recordbeam.errors import counted
from recordbeam.images.perceptual_hash import NEAR_THRESHOLD

__all__ = ["SplitStats", "collect_stats", "render_report", "report_page", "write_report"]



@dataclass
class SplitStats:
    """What one pass over a split's records found."""

    examples_read: int = 0
    classes: Counter = field(default_factory=Counter)
    boxes_per_image: Counter = field(default_factory=Counter)
    box_widths: list = field(default_factory=list)  # pixels
    box_heights: list = field(default_factory=list)  # pixels
    image_widths: list = field(default_factory=list)
    image_heights: list = field(default_factory=list)
    formats: Counter = field(default_factory=Counter)
    gallery: list = field(default_factory=list)  # the examples the gallery draws


def _text(value: Any) -> str:
    item = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


def _count(n: int, noun: str) -> str:
    """``1 shard``, ``12,000 examples``: thousands separated, the noun's number right."""
    return counted(n, noun).replace(str(n), f"{n:,}", 1)


def collect_stats(
    reader: SplitReader, max_examples: int | None = None, gallery: int = 0,
    finder: DuplicateFinder | None = None,
) -> SplitStats:
    """One streaming pass over (at most ``max_examples`` of) a split's records; keeps the
    ``gallery`` examples of smallest salted identity hash among those read, and gives
    ``finder`` each record's image."""
    stats = SplitStats()
    sample = GallerySample(gallery)
    labels = label_features(list(reader.shapes.values()))
    has_boxes = all(name in reader.shapes for name in feature_keys.BOX)
    for example in reader:
        if max_examples is not None and stats.examples_read >= max_examples:
            break
        if finder is not None and feature_keys.ENCODED in example:
            _offer_image(finder, reader, stats.examples_read, example)
        sample.offer(example, stats.examples_read)
        stats.examples_read += 1
        for name in labels:
            stats.classes.update(int(v) for v in np.atleast_1d(example[name]))
        width = int(example[feature_keys.WIDTH]) if feature_keys.WIDTH in example else None
        height = int(example[feature_keys.HEIGHT]) if feature_keys.HEIGHT in example else None
        if width is not None and height is not None:
            stats.image_widths.append(width)
            stats.image_heights.append(height)
        if feature_keys.FORMAT in example:
            stats.formats[_text(example[feature_keys.FORMAT])] += 1
        if has_boxes:
            # 1-D already for our folders; a box feature observed with one value everywhere
            # in files resharded from elsewhere may still arrive as a 0-d array.
            xmin, ymin, xmax, ymax = (np.atleast_1d(example[name]) for name in feature_keys.BOX)
            stats.boxes_per_image[len(xmin)] += 1
            if width and height:
                stats.box_widths.extend(((xmax - xmin) * width).tolist())
                stats.box_heights.extend(((ymax - ymin) * height).tolist())
    stats.gallery = sample.examples()
    return stats


def _offer_image(finder: DuplicateFinder, reader: SplitReader, index: int,
                 example: Mapping[str, Any]) -> None:
    image = example[feature_keys.ENCODED]
    if not (isinstance(image, np.ndarray) and image.ndim == 0):
        return  # several images per record (a list column): not compared
    shard, number = reader.locate(index)
    stored = example.get(feature_keys.SHA256)
    finder.add(RecordPlace(reader.split, reader.shard_files[shard], number), image.item(),
               stored.item() if isinstance(stored, np.ndarray) and stored.ndim == 0 else None)


# --- charts (matplotlib, optional) -----------------------------------------------------


def _pyplot() -> Any | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # no display; must precede importing pyplot
    # Same page bytes for the same folder: SVG element ids from a fixed salt, no date.
    matplotlib.rcParams["svg.hashsalt"] = "recordbeam-report"
    import matplotlib.pyplot as plt

    return plt


def _svg(plt: Any, fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog; the SVG sits inside HTML


def _bar(
    plt: Any,
    labels: Sequence[str],
    values: Sequence[int],
    title: str,
    xlabel: str,
    horizontal: bool = False,
) -> str:
    height = max(2.6, 0.28 * len(labels) + 1) if horizontal else 2.8
    fig, ax = plt.subplots(figsize=(6.2, height))
    if horizontal:
        ax.barh(list(labels)[::-1], list(values)[::-1], color="#4c72b0")
        ax.set_xlabel("count")
    else:
        ax.bar([str(x) for x in labels], values, color="#4c72b0")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("count")
        if len(labels) > 12:
            ax.tick_params(axis="x", labelrotation=90)
        if len(labels) > 40:
            # Past a few dozen bars every label would overlap: label about 20 of them.
            step = -(-len(labels) // 20)
            ax.set_xticks(range(0, len(labels), step))
    from matplotlib.ticker import MaxNLocator

    (ax.xaxis if horizontal else ax.yaxis).set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.grid(axis="x" if horizontal else "y", alpha=0.3)
    return _svg(plt, fig)


def _hist(plt: Any, series: Mapping[str, Sequence[float]], title: str, xlabel: str) -> str:
    fig, ax = plt.subplots(figsize=(6.2, 2.8))
    everything = np.concatenate([np.asarray(v, dtype=float) for v in series.values()])
    count = max(len(v) for v in series.values())
    edges = np.histogram_bin_edges(everything, bins=int(min(40, max(5, np.sqrt(count)))))
    for name, values in series.items():
        ax.hist(values, bins=edges, alpha=0.6, label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    if len(series) > 1:
        ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _svg(plt, fig)


def _scatter(plt: Any, xs: Sequence[int], ys: Sequence[int], title: str) -> str:
    fig, ax = plt.subplots(figsize=(6.2, 2.8))
    sizes = Counter(zip(xs, ys, strict=True))
    points = sorted(sizes)
    ax.scatter(
        [p[0] for p in points],
        [p[1] for p in points],
        s=[12 + 6 * np.sqrt(sizes[p]) for p in points],
        alpha=0.6,
        color="#dd8452",
    )
    ax.set_title(title)
    ax.set_xlabel("width (px)")
    ax.set_ylabel("height (px)")
    ax.grid(alpha=0.3)
    return _svg(plt, fig)


# --- HTML --------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .25em .7em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
.grid { display: flex; flex-wrap: wrap; gap: 1.2em; align-items: flex-start; }
.grid > div { flex: 1 1 480px; }
.chart svg { max-width: 100%; height: auto; }
.note { color: #777; font-size: .9em; }
.gallery { display: flex; flex-wrap: wrap; gap: .8em; align-items: flex-start; }
.gallery figure { margin: 0; max-width: 320px; font-size: .82em; }
.gallery img { display: block; max-width: 100%; border: 1px solid #ddd; }
.gallery figcaption { overflow-wrap: anywhere; margin-top: .2em; }
.gallery .problem { color: #b00; }
"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{v:,}</td>' if isinstance(v, int) else f"<td>{html.escape(str(v))}</td>"
            for v in row
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _section(title: str, table: str, chart: str | None) -> str:
    chart_html = f'<div class="chart">{chart}</div>' if chart else ""
    return f"<h3>{html.escape(title)}</h3><div class='grid'><div>{table}</div><div>{chart_html}</div></div>"


def _figure(thumbnail: Thumbnail, extra: Sequence[str] = ()) -> str:
    picture = (
        f'<img src="{thumbnail.data_uri}" alt="{html.escape(thumbnail.title)}">'
        if thumbnail.data_uri
        else ""
    )
    lines = [f"<b>{html.escape(thumbnail.title)}</b>"] if thumbnail.title else []
    lines += [html.escape(line) for line in (*extra, *thumbnail.lines)]
    lines += [f"<span class='problem'>{html.escape(note)}</span>" for note in thumbnail.notes]
    return f"<figure>{picture}<figcaption>{'<br>'.join(lines)}</figcaption></figure>"


def _gallery_html(
    stats: SplitStats, examples: int, names: list[str] | None, keypoints: Mapping[str, Any]
) -> str:
    if not stats.gallery:
        return ""
    figures = "".join(_figure(draw_example(e, names, keypoints)) for e in stats.gallery)
    among = (
        f"the {stats.examples_read:,} read" if stats.examples_read < examples else f"{examples:,}"
    )
    return (
        f"<h3>Gallery</h3><p class='note'>{len(stats.gallery):,} of {among} examples, drawn "
        "from the written records (the same ones on every run: smallest salted hash of each "
        f"image's identity).</p><div class='gallery'>{figures}</div>"
    )


def _rejects_html(strip: RejectStrip) -> str:
    if not strip.image_rejects:
        return ""
    figures = "".join(
        _figure(thumbnail, [f"split: {split}"] if split else []) for thumbnail, split in strip.shown
    )
    missing = []
    if strip.not_decodable:
        missing.append(f"{strip.not_decodable:,} skipped: the file is missing or does not decode")
    if strip.not_tried:
        missing.append(f"{strip.not_tried:,} not tried (raise --gallery to see more)")
    if strip.refused:
        missing.append(f"{strip.refused:,} not opened: the run refused them as outside its "
                       "folders (outside_root)")
    note = f"{len(strip.shown):,} of {strip.image_rejects:,} rejected images shown"
    note += ("; " + "; ".join(missing)) if missing else ""
    return (
        f"<h2>Rejected images</h2><p class='note'>{html.escape(note)}.</p>"
        f"<div class='gallery'>{figures}</div>"
    )


def _duplicate_rows_html(rows: Sequence[DuplicateRow], examples: Mapping[RecordPlace, Any],
                         names: list[str] | None, keypoints: Mapping[str, Any]) -> str:
    parts = []
    for row in rows:
        figures = []
        for place in row.places:
            example = examples.get(place)
            where = f"{place.split}: {place.shard} record {place.record}"
            if example is None:
                figures.append(f"<figure><figcaption>{html.escape(where)}</figcaption></figure>")
                continue
            source = _text(example.get(feature_keys.SOURCE_ID, b"")) or _text(
                example.get(feature_keys.FILENAME, b""))
            figures.append(_figure(draw_example(example, names, keypoints), [source, where]))
        more = f" ({row.more:,} more not drawn)" if row.more else ""
        parts.append(f"<h3>{html.escape(row.caption + more)}</h3>"
                     f"<div class='gallery'>{''.join(figures)}</div>")
    return "".join(parts)


def _duplicates_html(found: DuplicatesFound, manifest: Mapping[str, Any],
                     names: list[str] | None) -> str:
    """The sections on exact and near duplicates among the records read."""
    keypoints = manifest.get("keypoints") or {}
    exact = found.exact
    across = sum(1 for g in exact if g.across_splits)
    among = "among the records read" if found.partial else "among the records"
    if exact:
        note = (f"{_count(len(exact), 'image')} {'is' if len(exact) == 1 else 'are'} written "
                f"more than once {among} ({sum(g.size for g in exact):,} copies; "
                f"{across:,} in more than one split). ")
    else:
        note = f"No image is written twice {among}. "
    converted = manifest.get("duplicates")
    if converted:
        note += (f"The conversion listed {_count(converted['groups'], 'group')} in "
                 f"{DUPLICATES} ({converted.get('dropped', 0):,} copies dropped).")
    parts = ["<h2>Duplicates</h2>", f"<p class='note'>{html.escape(note)}</p>",
             _duplicate_rows_html(found.exact_rows, found.examples, names, keypoints)]
    if found.near is not None:
        groups = found.near.groups
        note = (f"{_count(len(groups), 'group')} of near-identical pictures {among} "
                f"(re-encoded, resized or slightly cropped copies; perceptual hashes at most "
                f"{NEAR_THRESHOLD} bits apart).")
        parts += ["<h2>Near duplicates</h2>", f"<p class='note'>{html.escape(note)}</p>",
                  _duplicate_rows_html(found.near_rows, found.examples, names, keypoints)]
    return "\n".join(parts)


def _percentiles(values: Sequence[float]) -> list[Any]:
    if not values:
        return ["-"] * 4
    q = np.percentile(np.asarray(values, dtype=float), [0, 50, 95, 100])
    return [f"{v:.1f}" for v in q]


def _split_html(
    name: str,
    entry: Mapping[str, Any],
    stats: SplitStats,
    names: list[str] | None,
    plt: Any | None,
    keypoints: Mapping[str, Any],
) -> str:
    parts = [f"<h2>Split {html.escape(name)}</h2>"]
    shard_rows = [(s["file"], s["examples"], s["bytes"]) for s in entry["shards"]]
    counts = [s["examples"] for s in entry["shards"]]
    parts.append(
        _section(
            "Examples per shard",
            _table(["shard", "examples", "bytes"], shard_rows),
            _bar(plt, list(range(len(counts))), counts, "examples per shard", "shard")
            if plt and counts
            else None,
        )
    )
    reasons = entry.get("rejects", {}).get("by_reason", {})
    if reasons:
        parts.append(
            _section(
                "Rejects by reason",
                _table(["reason", "count"], sorted(reasons.items())),
                _bar(plt, list(reasons), list(reasons.values()), "rejects", "", horizontal=True)
                if plt
                else None,
            )
        )
    else:
        parts.append("<h3>Rejects by reason</h3><p>none</p>")
    if stats.examples_read < entry["examples"]:
        parts.append(
            f"<p class='note'>Histograms below read {stats.examples_read:,} of "
            f"{entry['examples']:,} examples.</p>"
        )
    if stats.classes:

        def label(v: int) -> str:
            return names[v] if names and 0 <= v < len(names) else str(v)

        rows = [(v, label(v), n) for v, n in sorted(stats.classes.items())]
        ordered = stats.classes.most_common(40)
        parts.append(
            _section(
                "Classes",
                _table(["label", "name", "count"], rows),
                _bar(
                    plt,
                    [label(v) for v, _ in ordered],
                    [n for _, n in ordered],
                    "objects per class" if stats.boxes_per_image else "examples per class",
                    "",
                    horizontal=True,
                )
                if plt
                else None,
            )
        )
    if stats.boxes_per_image:
        rows = sorted(stats.boxes_per_image.items())
        parts.append(
            _section(
                "Boxes per image",
                _table(["boxes", "images"], rows),
                _bar(plt, [k for k, _ in rows], [v for _, v in rows], "boxes per image", "boxes")
                if plt
                else None,
            )
        )
    if stats.box_widths:
        table = _table(
            ["box size (px)", "min", "median", "p95", "max"],
            [
                ["width", *_percentiles(stats.box_widths)],
                ["height", *_percentiles(stats.box_heights)],
            ],
        )
        parts.append(
            _section(
                "Box sizes",
                table,
                _hist(
                    plt,
                    {"width": stats.box_widths, "height": stats.box_heights},
                    "box sizes",
                    "pixels",
                )
                if plt
                else None,
            )
        )
    if stats.image_widths:
        sizes = Counter(zip(stats.image_widths, stats.image_heights, strict=True))
        rows = [(f"{w}x{h}", n) for (w, h), n in sizes.most_common(15)]
        rows += [(fmt, n) for fmt, n in sorted(stats.formats.items())]
        parts.append(
            _section(
                "Image sizes and formats",
                _table(["size or format", "images"], rows),
                _scatter(plt, stats.image_widths, stats.image_heights, "image sizes")
                if plt
                else None,
            )
        )
    parts.append(_gallery_html(stats, entry["examples"], names, keypoints))
    return "\n".join(parts)


def render_report(
    output_dir: str,
    manifest: Mapping[str, Any],
    stats: Mapping[str, SplitStats],
    *,
    charts: bool = True,
    rejected: RejectStrip | None = None,
    duplicates: DuplicatesFound | None = None,
) -> str:
    """The HTML page for a manifest, the stats of its splits (with their gallery examples),
    the duplicates found among the records and the strip of rejected images."""
    plt = _pyplot() if charts else None
    names = class_names(manifest)
    splits = manifest.get("splits", {})
    totals = manifest.get("totals", {})
    summary_rows = [
        (name, e["examples"], len(e["shards"]), e["bytes"], e.get("rejects", {}).get("total", 0))
        for name, e in sorted(splits.items())
    ]
    overview = [
        "<h2>Overview</h2>",
        _table(["split", "examples", "shards", "bytes", "rejects"], summary_rows),
        f"<p>{_count(totals.get('examples', 0), 'example')} in "
        f"{_count(totals.get('shards', 0), 'shard')}; "
        f"task: {html.escape(str(manifest.get('task', 'unknown')))}; "
        f"recordbeam {html.escape(str(manifest.get('recordbeam_version', '')))}.</p>",
    ]
    if plt is None:
        overview.append(
            "<p class='note'>Charts need matplotlib: pip install matplotlib. "
            "Tables only.</p>"
        )
    body = "\n".join(
        overview
        + [
            _split_html(
                name, splits[name], stats.get(name, SplitStats()), names, plt,
                manifest.get("keypoints") or {},
            )
            for name in sorted(splits)
        ]
        + ([_duplicates_html(duplicates, manifest, names)] if duplicates else [])
        + ([_rejects_html(rejected)] if rejected else [])
    )
    title = f"recordbeam report: {output_dir}"
    return (
        f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def _rejects_lines(output_dir: str) -> list[str]:
    if "://" in output_dir:
        from recordbeam import filesystems  # Beam, only for remote folders

        path = filesystems.join(output_dir, REJECTS)
        if not filesystems.exists(path):
            return []
        return filesystems.read_bytes(path).decode("utf-8", "replace").splitlines()
    path = os.path.join(output_dir, REJECTS)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


@dataclass
class DuplicatesFound:
    """The duplicate groups among the records read, and the examples their rows draw."""

    exact: list[Group]
    near: NearComponents | None
    exact_rows: list[DuplicateRow]
    near_rows: list[DuplicateRow]
    examples: Mapping[RecordPlace, Any]
    partial: bool  # --max-examples stopped the pass before the end


def _duplicates_found(output_dir: str, finder: DuplicateFinder, partial: bool,
                      rows: int) -> DuplicatesFound:
    exact = finder.exact_groups()
    near = finder.near_groups() if finder.near else None
    exact_drawn = exact_rows(exact, rows)
    near_drawn = near_rows(near.groups, rows) if near is not None else []
    places = [p for row in (*exact_drawn, *near_drawn) for p in row.places]
    return DuplicatesFound(exact, near, exact_drawn, near_drawn,
                           fetch_examples(output_dir, places) if rows else {}, partial)


def report_page(
    output_dir: str,
    *,
    max_examples: int | None = None,
    charts: bool = True,
    gallery: int = DEFAULT_GALLERY,
    near_duplicates: bool = False,
) -> tuple[str, bool]:
    """Read the folder and make the page (see :func:`write_report`), without writing it.

    Returns:
        ``(html, charts_drawn)``; charts are missing when matplotlib is not installed.
    """
    manifest = read_manifest(output_dir)
    finder = DuplicateFinder(near=near_duplicates)
    stats = {
        name: collect_stats(read(output_dir, name), max_examples, gallery, finder)
        for name in sorted(manifest.get("splits", {}))
        if manifest["splits"][name]["examples"]
    }
    partial = any(s.examples_read < manifest["splits"][n]["examples"] for n, s in stats.items())
    duplicates = _duplicates_found(output_dir, finder, partial,
                                   min(DUPLICATE_ROWS, gallery) if gallery else 0)
    rejected = rejected_images(_rejects_lines(output_dir), gallery) if gallery else None
    page = render_report(output_dir, manifest, stats, charts=charts, rejected=rejected,
                         duplicates=duplicates)
    return page, charts and _pyplot() is not None


def write_report(
    output_dir: str,
    html_path: str,
    *,
    max_examples: int | None = None,
    charts: bool = True,
    gallery: int = DEFAULT_GALLERY,
    near_duplicates: bool = False,
) -> tuple[str, bool]:
    """Read the folder, write the page to ``html_path`` (a local file).

    ``gallery`` examples per split are drawn (0: no gallery, no strip of rejected images
    and no duplicate rows); with ``max_examples`` they are chosen among the examples read.
    Duplicate groups among the records read are counted and their first groups drawn, a
    row each; ``near_duplicates`` also finds near duplicates (a small decode per image).

    Returns:
        ``(html_path, charts_drawn)``; charts are missing when matplotlib is not installed.
    """
    page, drawn = report_page(output_dir, max_examples=max_examples, charts=charts,
                              gallery=gallery, near_duplicates=near_duplicates)
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(page)
    return html_path, drawn
