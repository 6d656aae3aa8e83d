#!/usr/bin/env python
"""YOLOv5's own ``segment/train.py`` and ``segment/val.py`` (pip package ``yolov5`` 7.0.x) running on
``yolo_data.integrations.yolov5_segment``.

Run it in the benchmark environment that has ``yolov5`` (as ``yolov5_train_val.py``)::

    python benchmarks/compat/yolov5_seg_train_val.py [--epochs 1] [--img 160] [--data DIR]

``--data`` defaults to coco128-seg in $YOLO_DATA_BENCH_DATA or ../shared/datasets.  On copies of it, on
the CPU, offline: ``segment/train.py`` and ``segment/val.py`` are copied with
``from yolo_data.integrations.yolov5_segment import create_dataloader`` added after YOLOv5's own imports; yolov5n-seg is
trained from scratch with the patched train.py (and once with YOLOv5's own loader, for comparison), then
its weights are validated with the stock and the patched val.py, whose box and mask metrics must be
identical (augment=False batches are equal: parity_yolov5_seg.py).
"""
import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402
import yolov5_train_val as base  # noqa: E402  (run_script, patched, yolov5_dir, last_metrics)

base.PATCH = {"train.py": "from yolo_data.integrations.yolov5_segment import create_dataloader  # after YOLOv5's imports",
              "val.py": "from yolo_data.integrations.yolov5_segment import create_dataloader  # after YOLOv5's imports"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="a coco128-seg-like folder (default: coco128-seg)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--img", type=int, default=160)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--val-conf", type=float, default=1e-5,
                    help="val.py's --conf-thres (an untrained model has no box above 0.001)")
    args = ap.parse_args(argv)
    common.require("yolov5_seg_train_val.py", "yolov5")
    data = Path(args.data or common.dataset("coco128-seg"))
    v5 = base.yolov5_dir()
    with tempfile.TemporaryDirectory(prefix="yolov5_seg_train_val_") as tmp:
        tmp = Path(tmp)
        scripts = tmp / "scripts"
        scripts.mkdir()
        ours = {n: base.patched(v5 / "segment" / n, scripts / n) for n in ("train.py", "val.py")}
        stock = {n: Path(shutil.copy(v5 / "segment" / n, scripts / f"stock_{n}")) for n in ("train.py", "val.py")}
        yamls = {}
        for lib in ("yolo_data", "yolov5"):
            shutil.copytree(data, tmp / lib / data.name, ignore=shutil.ignore_patterns("*.cache"))
            yamls[lib] = tmp / lib / "data.yaml"
            yamls[lib].write_text(json.dumps({"path": str(tmp / lib / data.name), "train": "images/train2017",
                                              "val": "images/val2017", "names": [str(i) for i in range(80)]}))
        train_args = ["--img", args.img, "--batch", args.batch, "--epochs", args.epochs, "--weights", "",
                      "--cfg", v5 / "models" / "segment" / "yolov5n-seg.yaml",
                      "--hyp", v5 / "data" / "hyps" / "hyp.scratch-low.yaml", "--device", "cpu",
                      "--workers", args.workers, "--noplots", "--exist-ok", "--seed", 0, "--project", tmp / "runs"]
        rows = []
        for lib, script in (("yolo_data", ours["train.py"]), ("yolov5", stock["train.py"])):
            name = f"train_{lib}"
            rc, secs = base.run_script(script, train_args + ["--data", yamls[lib], "--name", name], tmp,
                                       tmp / f"{name}.log")
            rows.append((lib, rc, secs))
            if rc:
                print((tmp / f"{name}.log").read_text()[-3000:], file=sys.stderr)
        print(f"segment/train.py, yolov5n-seg from scratch, {data.name}, {args.epochs} epoch(s), img {args.img}, "
              f"batch {args.batch}, CPU\n\n| loader | exit | seconds |\n|---|---:|---:|")
        for lib, rc, secs in rows:
            print(f"| {lib} | {rc} | {secs:.1f} |")
        weights = tmp / "runs" / "train_yolo_data" / "weights" / "last.pt"
        if not weights.exists():
            print("\nno weights from the yolo_data run: val.py comparison skipped")
            return 1
        val = {}
        for lib, script in (("yolov5", stock["val.py"]), ("yolo_data", ours["val.py"])):
            rc, secs = base.run_script(script, ["--data", yamls[lib], "--weights", weights, "--img", args.img,
                                                "--batch", 32, "--device", "cpu", "--workers", args.workers,
                                                "--project", tmp / "runs", "--name", f"val_{lib}", "--exist-ok",
                                                "--conf-thres", args.val_conf], tmp, tmp / f"val_{lib}.log")
            log = (tmp / f"val_{lib}.log").read_text()
            line = next((ln for ln in log.splitlines() if ln.strip().startswith("all ")), "")
            val[lib] = (rc, line.split(), secs)
            if rc:
                print(log[-3000:], file=sys.stderr)
        print(f"\nsegment/val.py on the yolo_data run's last.pt (img {args.img}, batch 32, --conf-thres "
              f"{args.val_conf:g}):\n\n| loader | exit | seconds | `all` line (images, instances, box P R mAP50 "
              "mAP50-95, mask P R mAP50 mAP50-95) |\n|---|---:|---:|---|")
        for lib, (rc, words, secs) in val.items():
            print(f"| {lib} | {rc} | {secs:.1f} | {' '.join(words)} |")
        same = bool(val["yolov5"][1]) and val["yolov5"][1] == val["yolo_data"][1]
        failed = [lib for lib, rc, _ in rows if rc]
        print(f"\nval metrics identical: {same}; train runs failed: {failed or 'none'}")
        print("\n" + common.footer())
        return 0 if same and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
