"""What a command that ran a pipeline prints at its end: the summary table of a finished
run, or what became of a job it did not wait for."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from recordbeam.errors import counted

#: Counts whose manifest name would read wrongly as a row (``exif rotated`` counts the
#: images that were NOT rotated).
_ROW_NAMES = {"exif_rotated": "exif orientation not applied"}


def summary_table(result: Any, splits: Sequence[str]) -> str:
    """The end-of-run table for the splits a run wrote: examples, shards, bytes, rejects
    by reason, counts, wall time and speed."""
    from recordbeam.images.checks import human_bytes

    entries = [(name, result.manifest["splits"][name]) for name in splits
               if name in result.manifest["splits"]]
    examples = sum(e["examples"] for _, e in entries)
    rows = [
        ("examples", str(examples)),
        ("shards", str(sum(len(e["shards"]) for _, e in entries))),
        ("bytes", human_bytes(sum(e["bytes"] for _, e in entries))),
    ]
    for name, e in entries:
        rows.append((f"  {name}", f"{counted(e['examples'], 'example')} in "
                                  f"{counted(len(e['shards']), 'shard')}"))
    rows += incremental_rows(result.manifest, [name for name, _ in entries])
    rejects: Counter[str] = Counter()
    warnings: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for _, e in entries:
        rejects.update(e["rejects"]["by_reason"])
        warnings.update(e.get("warnings", {}))
        counts.update(e.get("counts", {}))
    rows.append(("rejects", str(sum(rejects.values()))))
    rows += [(f"  {reason}", str(n)) for reason, n in sorted(rejects.items())]
    rows += [(f"warning {reason}", str(n)) for reason, n in sorted(warnings.items())]
    rows += [(_ROW_NAMES.get(name, name.replace("_", " ")), str(n))
             for name, n in sorted(counts.items()) if name != "images_written"]
    rows += _duplicate_rows(result.manifest.get("duplicates"))
    empty = sum(1 for _, e in entries for s in e["shards"] if not s["examples"])
    if empty:
        rows.append(("warning empty shards", str(empty)))
    rows.append(("wall time", f"{result.wall_seconds:.1f} s"))
    rate = examples / result.wall_seconds if result.wall_seconds else 0.0
    rows.append(("images/s", f"{rate:.0f}"))
    width = max(len(k) for k, _ in rows)
    table = "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
    return table + _missing_folder_note(examples, rejects, counts)


def incremental_rows(manifest: dict[str, Any], splits: Sequence[str]) -> list[tuple[str, str]]:
    """What an incremental run did to each split (added, changed, removed; shards kept,
    rewritten, written), from the last run of the manifest's history; none for other runs."""
    runs = manifest.get("history") or [{}]
    run = runs[-1]
    if not run.get("incremental"):
        return []
    rows = [("version", str(manifest.get("version", "")))]
    for split in splits:
        done = run.get("splits", {}).get(split)
        if done is None:
            continue
        rows.append((f"  {split} inputs", ", ".join(
            f"{done.get(name, 0)} {name}" for name in ("added", "changed", "removed", "unchanged"))))
        rows.append((f"  {split} shards", (
            f"{done.get('shards_kept', 0)} kept, {done.get('shards_rewritten', 0)} rewritten "
            f"({done.get('records_copied', 0)} records copied), "
            f"{done.get('shards_written', 0)} written, {done.get('shards_removed', 0)} removed")))
        if done.get("rebuilt"):
            rows.append((f"  {split} rebuilt", f"every input encoded: {done['rebuilt']}"))
        for lost in done.get("shards_unusable", []):
            rows.append((f"  {split} shard not kept", f"{lost['file']}: {lost['why']}"))
    return rows


def _duplicate_rows(found: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The folder's duplicate groups (exact, near) as summary rows."""
    if not found:
        return []
    rows = [("duplicate groups", _groups(found))]
    if found.get("near") is not None:
        rows.append(("near-duplicate groups", _groups(found["near"])))
    return rows


def _groups(found: dict[str, Any]) -> str:
    """``2 (5 images)``; ``0`` when there is none."""
    if not found["groups"]:
        return "0"
    return f"{found['groups']} ({counted(found['images'], 'image')})"


def duplicate_warnings(manifest: dict[str, Any], output_dir: str) -> list[str]:
    """What the summary says on stderr about duplicates: images in more than one split
    (a model tested on what it trained on), splits not compared, pairs not grouped."""
    from recordbeam import filesystems

    found = manifest.get("duplicates") or {}
    listed = filesystems.join(output_dir, "duplicates.jsonl")
    warnings = []
    across = found.get("across_splits", 0)
    if across:
        shown = "; ".join(", ".join(g["sources"]) for g in found.get("first_across_splits", []))
        more = f" and {across - len(found.get('first_across_splits', []))} more" \
            if across > len(found.get("first_across_splits", [])) else ""
        image = "image is" if across == 1 else "images are"
        warnings.append(
            f"{across} {image} in more than one split ({shown}{more}): a model evaluated on "
            f"images it was trained on scores too high. {listed} lists every copy; "
            "--duplicates drop-across-splits drops a later split's copies")
    if found.get("not_compared"):
        warnings.append(
            f"the split(s) {', '.join(found['not_compared'])} of {output_dir} have no image "
            "hashes (written without duplicate finding, or their hashes/ files are missing): "
            "this run's images were not compared with theirs; rewrite them to compare")
    near = found.get("near") or {}
    if near.get("across_splits"):
        listed_near = filesystems.join(output_dir, "near-duplicates.jsonl")
        spans = "spans" if near["across_splits"] == 1 else "span"
        warnings.append(f"{counted(near['across_splits'], 'near-duplicate group')} {spans} more "
                        f"than one split; see {listed_near}")
    if near.get("not_compared"):
        warnings.append(f"near duplicates of the split(s) {', '.join(near['not_compared'])} "
                        "were not looked for: their hash files hold no perceptual hashes "
                        "(written without --near-duplicates); rewrite them to compare")
    if near.get("pairs_not_grouped"):
        warnings.append(f"{near['pairs_not_grouped']} near-duplicate pairs past the first "
                        f"{near['pairs'] - near['pairs_not_grouped']} were not grouped")
    return warnings


def _missing_folder_note(examples: int, rejects: Counter[str], counts: Counter[str]) -> str:
    """A line of advice when most images are missing and their file_names start with
    the images folder's own name: the names are relative to the folder above it."""
    from recordbeam.sources.coco.join import MISSING_UNDER_FOLDER_NAME

    missing = rejects.get("image:missing", 0)
    prefixed = counts.get(MISSING_UNDER_FOLDER_NAME, 0)
    images = examples + sum(n for key, n in rejects.items() if key.startswith("image:"))
    if not (missing * 2 > images and prefixed * 2 > missing):
        return ""
    return (
        f"\nnote: {missing} of {images} images are missing, and {prefixed} of them have "
        "file_names that start with the name of the --images folder itself (train2017/x.jpg "
        "looked for in train2017/): pass the folder above it as --images (rejects.jsonl "
        "names it)"
    )


def print_summary(result: Any, splits: Sequence[str], output_dir: str) -> None:
    """The summary table and the output folder on stdout; warnings about what was
    written (empty shards) and about the run (:attr:`recordbeam.pipeline.RunResult.warnings`)
    on stderr."""
    from recordbeam.dataset.manifest import empty_shards_warning, mixed_compression_warning

    print(summary_table(result, splits))
    print(f"output: {output_dir}")
    warnings = [empty_shards_warning(split, result.manifest["splits"][split])
                for split in splits if result.manifest["splits"].get(split)]
    warnings.append(mixed_compression_warning(result.manifest))
    warnings += duplicate_warnings(result.manifest, output_dir)
    warnings += result.warnings
    for warning in filter(None, warnings):
        print(f"warning: {warning}", file=sys.stderr)


def _staged(result: Any) -> str:
    """What a dry run says of the files built for the job's workers."""
    if not result.staged:
        return ""
    return f", and what it stages for its workers was built ({', '.join(result.staged)})"


def submitted_text(result: Any, output: str) -> str:
    from recordbeam import filesystems

    if result.dry_run:
        return (f"dry run: the {result.runner} job graph was built and checked{_staged(result)}; "
                f"nothing was submitted and nothing was written to {output}")
    manifest = filesystems.join(output, "manifest.json")
    if result.template_location:
        return (f"wrote the {result.runner} job to {result.template_location}; nothing runs "
                "until a launch from there (a Flex Template launcher launches it by itself), "
                f"and then the job commits its output itself: {manifest} appears, last, when "
                "it has finished")
    job = f"job {result.job_id}" if result.job_id else "the job (the runner gave no id)"
    return (f"submitted {job} to the {result.runner}; not waiting for it (--detach). "
            f"The job commits its output itself: {manifest} appears, last, when it has "
            "finished; follow the job on the runner's own console")
