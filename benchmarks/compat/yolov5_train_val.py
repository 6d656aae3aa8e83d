#!/usr/bin/env python
"""YOLOv5's own ``train.py`` and ``val.py`` (pip package ``yolov5`` 7.0.x) running on yolo_data.

Installs nothing: run it in the separate benchmark environment that has ``yolov5`` (BENCHMARKS.md, Setup;
yolo_data comes from this checkout through ``sys.path``, never as a dependency of YOLOv5 or the other way
round):

    python benchmarks/compat/yolov5_train_val.py [--epochs 1] [--img 320] [--data DIR]

``--data`` defaults to coco128 in $YOLO_DATA_BENCH_DATA or ../shared/datasets.

What it does, on a copy of coco128, on the CPU, network blocked in every run:
1. copies ``train.py`` and ``val.py`` from the installed package and adds, after YOLOv5's own imports
   (an earlier import would be overridden by them; see the README),
   ``from yolo_data import create_dataloader, torch_distributed_zero_first`` (train.py) and
   ``from yolo_data import create_dataloader`` (val.py);
2. trains yolov5n from scratch for ``--epochs`` with the default flags and with ``--image-weights``,
   ``--rect``, ``--cache ram`` and ``--quad`` (and once with YOLOv5's own loader, for the time);
3. validates the weights of the default run with YOLOv5's ``val.py`` and with the patched one, and
   asserts that the metrics are identical.
Each loader gets its own copy of the dataset (both libraries write caches beside the labels).
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import REPO as ROOT, ensure_pkg_resources  # noqa: E402

# Runs one copied YOLOv5 script in a fresh interpreter: offline, settings in the temp folder.
RUNNER = """
import runpy, sys
sys.path[:0] = [{here!r}, {root!r}]
from pathlib import Path
import common
common.isolate_environment(Path({tmp!r}), "yolov5 " + {script!r})
common.ensure_pkg_resources()
common.provide_fonts()
common.numpy_compat()
sys.argv = [{script!r}] + {args!r}
runpy.run_path({script!r}, run_name="__main__")
"""

PATCH = {"train.py": "from yolo_data import create_dataloader, torch_distributed_zero_first  # after YOLOv5's imports",
         "val.py": "from yolo_data import create_dataloader  # after YOLOv5's imports"}


def yolov5_dir() -> Path:
    ensure_pkg_resources()
    import yolov5
    return Path(yolov5.__file__).parent


def patched(src: Path, dst: Path) -> Path:
    """``src`` with the yolo_data import inserted after YOLOv5's last top-level import."""
    lines = src.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith(("from ", "import ")))
    while lines[last].rstrip().endswith(("(", ",")) or (lines[last].startswith("from") and "(" in lines[last]
                                                         and ")" not in lines[last]):
        last += 1  # to the end of a parenthesised import
        if lines[last].strip().endswith(")"):
            break
    lines.insert(last + 1, PATCH[src.name])
    dst.write_text("\n".join(lines) + "\n")
    return dst


def run_script(script: Path, args, tmp: Path, log: Path) -> (int, float):
    code = RUNNER.format(here=str(HERE.parent), root=str(ROOT), tmp=str(tmp), script=str(script), args=list(map(str, args)))
    # YOLOv5 7.0 loads its own checkpoints with torch.load, which torch >= 2.6 restricts to weights only;
    # these are weights this run trained in its temp folder, so the old default is safe, for this child only
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    t = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.call([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, cwd=str(script.parent),
                             env=env)
    return rc, time.perf_counter() - t


def last_metrics(run_dir: Path) -> dict:
    rows = list(csv.DictReader(open(run_dir / "results.csv")))
    row = {k.strip(): v.strip() for k, v in rows[-1].items()}
    return {k.split("/")[-1]: float(row[k]) for k in row if k.startswith("metrics/")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="a coco128-like folder (images/train2017, labels/train2017; "
                    "default: coco128 in $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--img", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--val-conf", type=float, default=1e-5,
                    help="val.py's --conf-thres: an untrained model has no box above val.py's 0.001, and "
                         "comparing no boxes would prove nothing")
    ap.add_argument("--flags", nargs="*", default=["", "--image-weights", "--rect", "--cache ram", "--quad"])
    args = ap.parse_args(argv)
    common.require("yolov5_train_val.py", "yolov5")
    args.data = args.data or str(common.dataset("coco128"))
    v5 = yolov5_dir()
    with tempfile.TemporaryDirectory(prefix="yolov5_train_val_") as tmp:
        tmp = Path(tmp)
        scripts = tmp / "scripts"
        scripts.mkdir()
        ours = {name: patched(v5 / name, scripts / name) for name in ("train.py", "val.py")}
        stock = {name: shutil.copy(v5 / name, scripts / f"stock_{name}") for name in ("train.py", "val.py")}
        yamls = {}
        for lib in ("yolo_data", "yolov5"):
            shutil.copytree(args.data, tmp / lib / "coco128")
            yamls[lib] = tmp / lib / "coco128.yaml"
            yamls[lib].write_text(json.dumps({"path": str(tmp / lib / "coco128"), "train": "images/train2017",
                                              "val": "images/train2017", "names": [str(i) for i in range(80)]}))
        base = ["--img", args.img, "--batch", args.batch, "--epochs", args.epochs, "--weights", "",
                  "--cfg", v5 / "models" / "yolov5n.yaml", "--hyp", v5 / "data" / "hyps" / "hyp.scratch-low.yaml",
                  "--device", "cpu", "--workers", args.workers, "--noplots", "--exist-ok", "--seed", 0,
                  "--project", tmp / "runs"]
        rows, failed = [], []
        runs = [("yolo_data", f, ours["train.py"]) for f in args.flags] + [("yolov5", "", Path(stock["train.py"]))]
        for lib, flags, script in runs:
            name = f"{lib}{flags.replace(' ', '').replace('--', '_') or '_default'}"
            rc, secs = run_script(script, base + ["--data", yamls[lib], "--name", name] + flags.split(),
                                  tmp, tmp / f"{name}.log")
            metrics = last_metrics(tmp / "runs" / name) if rc == 0 else {}
            rows.append((lib, flags or "(default)", rc, secs, metrics))
            if rc:
                failed.append(name)
                print((tmp / f"{name}.log").read_text()[-3000:], file=sys.stderr)
        print(f"train.py, yolov5n from scratch, coco128, {args.epochs} epoch(s), img {args.img}, batch "
              f"{args.batch}, {args.workers} workers, CPU\n")
        print("| loader | flags | exit | seconds | P | R | mAP50 | mAP50-95 |\n|---|---|---:|---:|---:|---:|---:|---:|")
        for lib, flags, rc, secs, m in rows:
            vals = [m.get(k, float("nan")) for k in ("precision", "recall", "mAP_0.5", "mAP_0.5:0.95")]
            print(f"| {lib} | {flags} | {rc} | {secs:.1f} | " + " | ".join(f"{v:.5f}" for v in vals) + " |")
        weights = tmp / "runs" / "yolo_data_default" / "weights" / "last.pt"
        if not weights.exists():
            print("\nno weights from the default run: val.py comparison skipped", file=sys.stderr)
            return 1
        val = {}
        for lib, script in (("yolov5", Path(stock["val.py"])), ("yolo_data", ours["val.py"])):
            out = tmp / "runs" / f"val_{lib}"
            rc, secs = run_script(script, ["--data", yamls[lib], "--weights", weights, "--img", args.img,
                                           "--batch", 32, "--device", "cpu", "--workers", args.workers,
                                           "--project", tmp / "runs", "--name", f"val_{lib}", "--exist-ok",
                                           "--save-txt", "--save-conf", "--conf-thres", args.val_conf],
                                  tmp, tmp / f"val_{lib}.log")
            log = (tmp / f"val_{lib}.log").read_text()
            line = next((ln for ln in log.splitlines() if ln.strip().startswith("all ")), "")
            labels = sorted((out / "labels").glob("*.txt"))
            val[lib] = (rc, line.split(), secs, {p.name: p.read_text() for p in labels})
            if rc:
                print(log[-3000:], file=sys.stderr)
        print(f"\nval.py on the default run's last.pt (img {args.img}, batch 32, rect as val.py does, "
              f"--conf-thres {args.val_conf:g}):\n")
        print("| loader | exit | seconds | `all` line (images, instances, P, R, mAP50, mAP50-95) |\n|---|---:|---:|---|")
        for lib, (rc, words, secs, _) in val.items():
            print(f"| {lib} | {rc} | {secs:.1f} | {' '.join(words)} |")
        same = val["yolov5"][1] == val["yolo_data"][1] and val["yolov5"][1]
        same_boxes = val["yolov5"][3] == val["yolo_data"][3] and val["yolov5"][3]
        boxes = sum(len(t.splitlines()) for t in val["yolov5"][3].values())
        print(f"\nmetrics identical: {bool(same)}; saved boxes identical ({len(val['yolov5'][3])} label files, "
              f"{boxes:,} boxes): "
              f"{bool(same_boxes)}; train runs failed: {failed or 'none'}")
        # YOLOv5's NMS stops at a wall-clock limit (0.5 s + 0.05 s per image of the batch) and keeps only
        # the images it reached: on a slow or busy host which boxes survive then depends on timing
        limited = {lib: (tmp / f"val_{lib}.log").read_text().count("NMS time limit") for lib in val}
        if any(limited.values()):
            print("YOLOv5's NMS hit its time limit (" + ", ".join(f"{k}: {v} batches" for k, v in limited.items())
                  + "): the boxes kept depend on timing, so a difference says nothing about the loaders; "
                  "rerun on a quieter host or with a higher --val-conf")
        print("\n" + common.footer())
        return 0 if same and same_boxes and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
