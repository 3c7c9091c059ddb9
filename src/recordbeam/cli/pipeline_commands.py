"""The commands that run a pipeline: ``convert <format>`` (one per declared format),
``reshard`` and ``demo``. Each checks its inputs before Beam starts, builds the library's
options from the arguments, runs, and prints what the run did."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recordbeam.cli.commands import cmd_inspect
from recordbeam.cli.record_files import check_listed_exist, expand_paths, record_files
from recordbeam.cli.summary import print_summary, submitted_text
from recordbeam.cli.verify import check_first_records
from recordbeam.errors import EXIT_OK

if TYPE_CHECKING:
    from recordbeam.sources.format import Format


def cmd_reshard(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import run
    from recordbeam.sources.reshard import ReshardOptions, check_not_in_place, input_splits, reshard
    from recordbeam.write.planning import ShardOptions, parse_size

    # An output folder means its shards, as for inspect and verify; every input is checked
    # to be there and to start as a TFRecord file before the job starts.
    files = record_files([args.inputs])
    check_listed_exist(files)
    check_first_records(files, "reshard")
    inputs = [file.path for file in files]
    check_not_in_place(inputs, args.output)
    splits = sorted(set(input_splits(inputs, args.split).values()))
    shards = ShardOptions(num_shards=args.shards, shard_size=parse_size(args.shard_size),
                          compression=args.compression, index=args.index)
    options = ReshardOptions(tuple(inputs), args.split)
    _warn_if_the_local_runner_is_beams(args.beam_options)
    result = run(lambda p: reshard(p, args.output, options, shards), args.output,
                 beam_args=beam_args, overwrite=args.overwrite, show_progress=not args.quiet,
                 break_lock=args.break_lock, command="reshard", inputs=[args.inputs])
    return _report_run(result, args, splits)


# --- convert --------------------------------------------------------------------------


def cmd_convert(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """``convert <format>`` of a format declared in its own package (see
    :mod:`recordbeam.sources.format`)."""
    from recordbeam import converter as convert
    from recordbeam.options import conversion_options

    fmt = convert.find_format(args.kind)
    values = {option.name: getattr(args, option.name)
              for option in (*fmt.options, *conversion_options())}
    return _run_declared(fmt, values, args)


def _run_declared(fmt: Format, values: dict[str, Any], args: argparse.Namespace) -> int:
    """A declared format's checks and run (:mod:`recordbeam.converter`), and what it did."""
    from recordbeam import converter as convert

    conversion = convert.prepare(fmt, values, args.split_given)
    _warn_if_the_local_runner_is_beams(args.beam_options)
    result = convert.execute(fmt, conversion, values, args.beam_options)
    if isinstance(result, convert.UpToDate):
        print(f"{args.output} is up to date (same inputs, options and recordbeam version); "
              "nothing to do")
        return EXIT_OK
    return _report_run(result, args, list(conversion.splits))


def _warn_if_the_local_runner_is_beams(options: Any) -> None:
    """Before a run: a local run on this Beam is Beam's plain FnApiRunner, which holds its
    shuffles in memory. The runner logs it too, but a run's log is deleted on success."""
    from recordbeam.local.runner import plain_runner_notice, runs_on_local_runner

    notice = plain_runner_notice() if runs_on_local_runner(options) else None
    if notice is not None:
        print(f"warning: {notice}", file=sys.stderr)


def _report_run(result: Any, args: argparse.Namespace, splits: Sequence[str]) -> int:
    """Print what a run did: the summary of a finished run, or what became of a job this
    command did not wait for (``--detach``, a Dataflow ``--dry_run``)."""
    from recordbeam.pipeline import SubmittedRun

    if isinstance(result, SubmittedRun):
        print(submitted_text(result, args.output))
        return EXIT_OK
    print_summary(result, splits, args.output)
    exif = sum(result.manifest["splits"].get(s, {}).get("counts", {}).get("exif_rotated", 0)
               for s in splits)
    if exif:
        carry = "image carries" if exif == 1 else "images carry"
        print(f"warning: {exif} {carry} an EXIF orientation other than 1; TensorFlow's "
              "decoders ignore it, so they are written and read unrotated (pass --apply-exif "
              "to rotate their pixels).", file=sys.stderr)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """A format's conversion of a sample it reads: COCO's generated with some broken files
    (``--num-images``), another format's the one it declares (``Format.sample``). The
    options ``demo`` has are the user's, the others their defaults."""
    from recordbeam import converter as convert
    from recordbeam import filesystems
    from recordbeam.errors import UsageError
    from recordbeam.options import conversion_options
    from recordbeam.sources.format import lay_out_sample
    from recordbeam.testing.samples import make_coco_sample

    fmt = convert.find_format(args.format)
    if fmt.name != "coco" and args.num_images is not None:
        raise UsageError(f"--num-images sizes the generated COCO sample; demo --format "
                         f"{fmt.name} converts the two pictures {fmt.name} declares: drop it")
    values = {option.name: getattr(args, option.name, option.default)
              for option in (*fmt.options, *conversion_options())}
    with tempfile.TemporaryDirectory(prefix="recordbeam-demo-") as root:
        # Not where: the folder is deleted when the command ends.
        if fmt.name == "coco":
            sample = make_coco_sample(root, num_images=args.num_images or 24, seed=0)
            print(f"generated a COCO sample of {sample.num_images} images, some deliberately "
                  "broken")
            values.update(images=sample.images_dir, annotations=sample.annotations)
        else:
            values.update(lay_out_sample(fmt, root))
            print(f"laid out a sample of {fmt.name} ({fmt.summary}):")
            print("".join(f"  {name}\n" for name in sorted(fmt.sample)), end="")
            print(f"(yours: recordbeam convert {fmt.name} {' '.join(fmt.example)} "
                  "--output OUT)")
        code = _run_declared(fmt, values, args)
    if code == EXIT_OK:
        print("\nfirst example, as `recordbeam inspect` shows it:")
        first = filesystems.join(filesystems.literal(args.output), "*-00000-of-")
        shards = sorted(expand_paths([first + "*.tfrecord*"]))
        cmd_inspect(argparse.Namespace(paths=shards[:1], n=1, json=False, kind="auto"))
    return code

