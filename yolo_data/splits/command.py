"""``yolo-data split DATA --val 0.1 --group-by WAYS --out DIR``: the command's arguments and the summary it prints."""
from __future__ import annotations

import argparse
import logging
import sys
from typing import List

from ..report.sequence import DEFAULT_FRAMES
from ..storage import Storage, StorageOptions, using
from .groups import WAYS, GroupBy
from .plan import SplitOptions, split_dataset
from .write import write_split

_SHOWN_CLASSES = 12  # classes listed in the table; the rest are in split.json


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def format_summary(figures: dict) -> str:
    """The summary as lines of text: the groups, each split's share of the images against the asked one, the
    classes that miss most, and the classes that cannot be split or miss by more than the tolerance."""
    f = figures
    left = f" ({f['left_out']:,} left out)" if f["left_out"] else ""
    lines = [f"{f['images']:,} images{left} in {f['groups']:,} groups (largest {f['largest_group']:,} images) by "
             f"{','.join(f['group_by'])}"]
    lines += [f"  {n}" for n in f["notes"]]
    if f["left_out"]:
        lines.append(f"  {f['left_out']:,} frames at the cuts of long runs left out of every split (left_out.txt)")
    tol = f["tolerance"]
    lines.append(f"\n{'split':8} {'images':>9} {'share':>7} {'asked':>7}")
    for name, s in f["splits"].items():
        flag = "  off by more than the tolerance" if abs(s["share"] - s["asked"]) > tol else ""
        lines.append(f"{name:8} {s['images']:>9,} {_pct(s['share']):>7} {_pct(s['asked']):>7}{flag}")
    names = list(f["splits"])
    worst = sorted((c for c in f["classes"] if c["objects"]), key=lambda c: -c["miss"])[:_SHOWN_CLASSES]
    if worst:
        lines.append(f"\nclasses missing their shares most (objects per split; all in split.json):")
        lines.append(f"{'class':20} {'objects':>8} {'groups':>7} " + " ".join(f"{n:>7}" for n in names))
        for c in worst:
            lines.append(f"{c['name'][:20]:20} {c['objects']:>8,} {c['groups']:>7,} "
                         + " ".join(f"{_pct(c['shares'][n]):>7}" for n in names))
    if f["cannot_split"]:
        lines.append(f"cannot be split (in fewer groups than splits): {', '.join(f['cannot_split'])}")
    if f["off_target"]:
        lines.append(f"off their shares by more than {_pct(tol)}: {', '.join(f['off_target'])}")
    lines.append(f"groups that straddle splits: {f['straddling_groups']}")
    return "\n".join(lines)


def split_main(argv=None) -> int:
    """``yolo-data split``: write new leak-free splits of DATA into --out; exit 2 when the data cannot be read or
    split as asked."""
    ap = argparse.ArgumentParser(
        prog="yolo-data split",
        description="Split a dataset's images into train/val(/test) lists with every group of related images on one "
                    "side: near-identical pictures, a recording's folder, runs of neighbouring frames, or what a "
                    "pattern finds in the paths; each class's share as close to the asked one as the groups allow. "
                    "Writes the lists, a dataset yaml and a summary into --out; the dataset is never written to.")
    ap.add_argument("data", help="dataset yaml (all its splits are pooled), image folder, .txt list, COCO .json, "
                                 "VOC, LabelMe, Parquet or NDJSON; local or s3://")
    ap.add_argument("--val", type=float, required=True, help="share of the images for val (e.g. 0.1)")
    ap.add_argument("--test", type=float, default=0.0, help="share of the images for test (default 0: no test split)")
    ap.add_argument("--group-by", required=True, metavar="WAYS",
                    help=f"how images are grouped, one or more joined by commas: {', '.join(WAYS)} (similar: the "
                         "report's groups of one picture, reads every image; folder: the image's folder, split "
                         "folders left out; sequence: runs of neighbouring frames from numbered file names; "
                         "regex:PATTERN: the text PATTERN finds in the path, its first group if it has one)")
    ap.add_argument("--frames", type=int, default=DEFAULT_FRAMES, metavar="K",
                    help=f"sequence: frames at most K apart are neighbours (default {DEFAULT_FRAMES})")
    ap.add_argument("--chunk", type=int, default=None, metavar="N",
                    help="sequence: cut runs longer than N frames into pieces of N, leaving out the K frames after "
                         "each cut (for one long video; default: runs stay whole)")
    ap.add_argument("--seed", type=int, default=0, help="the order of equal-sized groups (default 0)")
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="name splits and classes whose share misses the asked one by more (default 0.02)")
    ap.add_argument("--out", required=True, metavar="DIR", help="local folder for the lists, data.yaml and split.json")
    ap.add_argument("--task", choices=("detect", "segment", "pose", "obb"), default=None,
                    help="how label rows are read (default: pose where the yaml has kpt_shape, else detect)")
    ap.add_argument("--workers", type=int, default=None, help="threads reading images, processes scanning labels")
    ap.add_argument("--cache-dir", default=None, help="read and write label caches in this folder")
    ap.add_argument("--endpoint-url", default=None, metavar="URL", help="the S3-compatible server of s3:// paths")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    try:
        by = GroupBy.parse(args.group_by, args.frames, args.chunk)
        if not 0 <= args.tolerance < 1:
            raise ValueError(f"--tolerance must be a share in [0, 1), got {args.tolerance}")
        options = SplitOptions(val=args.val, test=args.test, group_by=by, seed=args.seed, tolerance=args.tolerance,
                               task=args.task, workers=args.workers, cache_dir=args.cache_dir)
        with using(Storage(StorageOptions(endpoint_url=args.endpoint_url))):
            plan = split_dataset(args.data, options)
        written = write_split(plan, args.out)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_summary(plan.figures))
    lists: List[str] = [str(written[k]) for k in plan.names]
    print(f"wrote {', '.join(lists)}\n  and {written['yaml']} (train with it), {written['summary']}")
    return 0
