#!/usr/bin/env python
"""Time to the first batch when a training script does other work (builds its model) between building
the loader and its first ``iter``: yolo_data's loader starts its workers, and the first pass, when it is
built (as YOLOv5's InfiniteDataLoader does); the comparison is the same loader with that early start
turned off (workers forked on the first ``iter``, torch's default).  Alternating, medians.

    python benchmarks/speed/run.py first-batch [--data DATASETS/coco128/images/train2017]
        [--setup-s 2] [--repeats 3] [--workers 2]

The data folder (default: coco128's train2017 in $YOLO_DATA_BENCH_DATA or ../shared/datasets) is copied
with its labels to a temporary folder first (the label cache is written there).
"""
import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from yolo_data import create_dataloader  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="image folder (copied to a temporary folder; default: "
                    "coco128/images/train2017 in $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    ap.add_argument("--setup-s", type=float, default=2.0, help="seconds the script spends before its first iter")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch-size", type=int, default=32)
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    args.data = args.data or str(common.dataset("coco128") / "images" / "train2017")
    src = Path(args.data)
    if not src.is_dir():
        print(f"{src} does not exist; pass --data", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="yolo_data_first_batch_") as tmp:
        root = Path(tmp) / "ds"
        shutil.copytree(src.parent.parent, root)  # images/<split> and labels/<split>
        data = str(root / src.relative_to(src.parent.parent))
        res = {"early start (yolo_data)": [], "start on first iter": []}
        for _ in range(args.repeats):
            for mode in res:
                loader, _ = create_dataloader(data, args.imgsz, args.batch_size, 32, rect=True, pad=0.5,
                                              workers=args.workers, early_start=mode.startswith("early"))
                time.sleep(args.setup_s)
                t = time.perf_counter()
                next(iter(loader))
                res[mode].append(time.perf_counter() - t)
                del loader
                gc.collect()
    print(f"CPU: {common.cpu_model()}; {args.data}, val loader (rect, pad 0.5, batch {args.batch_size}, "
          f"imgsz {args.imgsz}), {args.workers} workers, {args.setup_s:g} s of setup before the first iter\n")
    print("| loader | first batch s (median) | runs |\n|---|---:|---|")
    for mode, v in res.items():
        print(f"| {mode} | {statistics.median(v):.3f} | {', '.join(f'{x:.3f}' for x in v)} |")
    print("\n" + common.footer())
    medians = {k: statistics.median(v) for k, v in res.items()}
    common.write_result("first-batch", {"first_batch_s": res, "median_s": medians}, args,
                        datasets=[Path(args.data).parents[1].name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
