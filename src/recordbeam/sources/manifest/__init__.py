"""CSV and JSON Lines manifests: one row per example (or per step of a sequence). The
reader is :mod:`recordbeam.sources.manifest.reader`."""

from recordbeam.options import Flag, Option, Path, Text, WholeNumber
from recordbeam.sources.format import SAMPLE_IMAGE, Format, input_option, prepared_in, public_in

FORMAT = Format(
    name="manifest",
    summary="CSV or JSON Lines manifest: one row per example",
    options=(
        input_option("FILE.csv or FILE.jsonl; --split also takes fractions by hash of the "
                     "image path, e.g. --split train=0.8,val=0.1,test=0.1", metavar="FILE",
                     aliases=("--manifest",)),
        Option("schema", 'JSON {"column": "int64|float|bytes|image|int64_list|float_list|'
               'bytes_list"} (default: inferred from the first --schema-sample-rows rows)',
               Path(), metavar="FILE"),
        Option("schema_sample_rows", "rows the launcher reads to infer the types and the split "
               "names; later rows that disagree are rejected (default: 10000; 0: every row)",
               WholeNumber(0, "0 (every row) or a positive count"), default=10_000, metavar="N"),
        Option("splits", "comma-separated values the --split-column may hold (default: those "
               "in the first --schema-sample-rows rows)", Text(), metavar="NAMES"),
        Option("csv_multiline", "quoted CSV fields hold line breaks: one worker reads the "
               "manifest (default: cut into byte ranges read in parallel, unless the first "
               "rows show such fields)", Flag(), default=False),
        Option("image_columns", "comma-separated columns holding image paths (default: from "
               "the schema)", Text(), metavar="COLUMNS"),
        Option("split_column", "column holding each row's split name (default: none, --split "
               "names it)", Text(), metavar="COLUMN"),
        Option("allow_outside_root", "also read image paths with '..' or absolute local paths "
               "(default: refused)", Flag(), default=False),
        Option("group_by", "write one SequenceExample per value of this column, rows become "
               "steps (default: one Example per row)", Text(), metavar="COLUMN"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadTable", "TableOptions", "TableEncoder"),
    example=("--input", "data.csv"),
    sample={"a.jpg": SAMPLE_IMAGE, "b.jpg": SAMPLE_IMAGE,
            "data.csv": "image,label\na.jpg,1\nb.jpg,1\n"},
    instead={
        "--root": "convert manifest takes the CSV or JSONL file as --input",
        "--images": "the manifest's rows name the images, relative to the manifest's folder",
    },
)
