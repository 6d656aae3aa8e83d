"""Ultralytics' own trainer and validator on yolo_data, in the benchmark environment.

    python benchmarks/compat/ultralytics_plugin.py [--data DIR] [--imgsz 256]     # in the benchmark environment

``--data`` is a YOLO-format dataset folder with its yaml (default: bccd in $YOLO_DATA_BENCH_DATA or
../shared/datasets).  Ultralytics' settings go to a temporary folder, offline.

(a) trains yolo11n.yaml from scratch (no weights are downloaded) with ``YoloDataTrainer`` on a temp copy
    of a YOLO-format dataset, with workers 0 and 2 (mosaic, then close_mosaic for the last epochs);
(b) validates the workers-2 run's last.pt with Ultralytics' own DetectionValidator and with
    ``YoloDataValidator`` (same weights, split and settings), prints both metrics and whether they
    are identical, and compares the validation inputs image by image (pixels, boxes, shapes);
(c) DDP with 2 CPU processes: what Ultralytics does with a CPU device, then the trainer under
    ``torchrun --nproc_per_node 2`` (gloo).

Ultralytics is AGPL-3.0 and installed only in the benchmark environment; this script imports it, yolo_data
imports it only in yolo_data.integrations.ultralytics.
"""
from __future__ import annotations

import argparse
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
METRICS = ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)")


def copy_dataset(src: Path, tmp: Path) -> Path:
    """A copy of ``src`` in ``tmp`` (never write into the shared dataset) and a yaml with an absolute
    path (Ultralytics resolves a relative ``path:`` against its datasets folder, not the yaml)."""
    import yaml
    dst = tmp / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.cache"))
    spec = yaml.safe_load(next(src.glob("*.yaml")).read_text())
    spec["path"] = str(dst)
    out = dst / "abs.yaml"
    out.write_text(yaml.safe_dump(spec))
    return out


def train(data: Path, tmp: Path, workers: int, a, epochs: int, name: str, val: bool = True) -> dict:
    from ultralytics import YOLO
    from yolo_data.integrations.ultralytics import YoloDataTrainer
    t = time.perf_counter()
    with common.library_output(a.verbose):
        model = YOLO("yolo11n.yaml")
        model.train(data=str(data), trainer=YoloDataTrainer, epochs=epochs, close_mosaic=a.close_mosaic,
                    imgsz=a.imgsz, batch=a.batch, workers=workers, device="cpu", plots=False, amp=False, val=val,
                    seed=0, project=str(tmp / "runs"), name=name, exist_ok=True, verbose=False)
    seconds = time.perf_counter() - t
    run = tmp / "runs" / name
    import csv
    with open(run / "results.csv") as f:
        rows = list(csv.DictReader(f))
    return {"seconds": seconds, "weights": run / "weights" / "last.pt", "rows": rows}


def validate(weights: Path, data: Path, validator, a):
    from ultralytics import YOLO
    t = time.perf_counter()
    with common.library_output(a.verbose):
        m = YOLO(str(weights)).val(data=str(data), validator=validator, imgsz=a.imgsz, batch=a.batch, rect=True,
                                   device="cpu", plots=False, verbose=False, project=str(weights.parents[2]),
                                   name="val", exist_ok=True)
    return {k: float(m.results_dict[k]) for k in METRICS}, time.perf_counter() - t


def compare_inputs(data: Path, imgsz: int, batch: int, verbose: bool = False) -> str:
    """Ultralytics' validation loader and the plug-in's on ``data``'s val split, item by item (matched by
    file), as one line: the images' bands and dtype, then how many differ in pixels, classes, ori_shape
    and ratio_pad, and the largest box difference (normalised xywh)."""
    import numpy as np
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset
    from yolo_data.integrations.ultralytics_args import loader_settings
    from yolo_data.integrations.ultralytics_loader import create_loader
    with common.library_output(verbose):
        cfg = get_cfg(overrides={"imgsz": imgsz, "rect": True, "batch": batch})
        spec = check_det_dataset(str(data))
        theirs = build_dataloader(build_yolo_dataset(cfg, spec["val"], batch, spec, mode="val", stride=32),
                                  batch, 0, shuffle=False)
        ours = create_loader(spec["val"], loader_settings(cfg, "val", batch, 32, workers=0, data=spec))

    def items(loader):
        out = {}
        for b in loader:
            for i, f in enumerate(b["im_file"]):
                k = b["batch_idx"] == i
                out[f] = (b["img"][i].numpy(), b["cls"][k].numpy(), b["bboxes"][k].numpy(), tuple(b["ori_shape"][i]),
                          b["ratio_pad"][i])
        return out

    t, o = items(theirs), items(ours)
    ours.close()
    if set(t) != set(o):
        return f"different files ({len(set(t) ^ set(o))} differ)"
    bands = sorted({int(v[0].shape[0]) for v in list(t.values()) + list(o.values())})
    dtypes = sorted({str(v[0].dtype) for v in list(t.values()) + list(o.values())})
    px = sum(not np.array_equal(t[f][0], o[f][0]) for f in t)
    cls = sum(not np.array_equal(t[f][1], o[f][1]) for f in t)
    box = max(float(np.abs(t[f][2] - o[f][2]).max(initial=0)) for f in t)
    shp = sum(t[f][3] != o[f][3] for f in t)
    rp = sum(not (np.allclose(t[f][4][0], o[f][4][0], rtol=0, atol=1e-12) and tuple(t[f][4][1]) == tuple(o[f][4][1]))
             for f in t)
    return (f"{len(t)} images of {'/'.join(map(str, bands))} bands {'/'.join(dtypes)}: pixels differ in {px}, "
            f"classes in {cls}, ori_shape in {shp}, ratio_pad in {rp}; largest box difference {box:.2e}")


def ddp_probe() -> str:
    """What Ultralytics' trainer does with device='cpu' (is there a DDP path at all?)."""
    from ultralytics.models.yolo.detect import DetectionTrainer
    import inspect
    src = inspect.getsource(DetectionTrainer.__mro__[1].__init__)
    cpu_zero = "world_size = 0" in src
    return ("Ultralytics' BaseTrainer sets world_size = 0 for a CPU device (no DDP subprocesses, no process group)"
            if cpu_zero else "Ultralytics' BaseTrainer has a DDP path for CPU devices (unexpected)")


def torchrun(data: Path, tmp: Path, a, mode: str, port: int) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           str(HERE / "ultralytics_ddp_cpu.py"), "--data", str(data), "--imgsz", str(a.imgsz), "--batch",
           str(a.batch), "--epochs", "2", "--workers", "1", "--project", str(tmp / "runs"), "--mode", mode]
    t = time.perf_counter()
    try:
        # run_tree: on timeout torchrun's ranks (sessions of their own) and their workers are killed too
        p = common.run_tree(cmd, a.ddp_timeout, capture_output=True, text=True)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", common.as_text(e.stdout) + common.as_text(e.stderr)
    lines = sorted(ln for ln in out.splitlines() if ln.startswith("DDP rank"))
    return f"exit {rc} after {time.perf_counter() - t:.1f} s\n" + "\n".join("    " + ln for ln in lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None,
                   help="YOLO dataset folder with a yaml (default: bccd in $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    p.add_argument("--imgsz", type=int, default=160)
    p.add_argument("--epochs", type=int, default=3, help="of the workers 0 / 2 runs")
    p.add_argument("--val-epochs", type=int, default=25, help="of the run whose weights are validated")
    p.add_argument("--close-mosaic", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--no-ddp", action="store_true")
    p.add_argument("--ddp-timeout", type=int, default=300)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    common.require("ultralytics_plugin.py", "ultralytics")
    a.data = a.data or common.dataset("bccd")
    tmp = Path(tempfile.mkdtemp(prefix="ultra_plugin_"))
    common.isolate_environment(tmp, "ultralytics_plugin")
    os.chdir(tmp)  # Ultralytics writes yolo11n.yaml look-ups and runs relative to the working folder
    data = copy_dataset(a.data, tmp)
    import torch
    import ultralytics
    print(f"ultralytics {ultralytics.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"data {a.data.name} (temp copy), yolo11n.yaml from scratch, imgsz {a.imgsz}, batch {a.batch}, "
          f"{a.epochs} epochs, close_mosaic {a.close_mosaic}")
    t0 = time.perf_counter()

    print("\n(a) YoloDataTrainer")
    runs = {}
    for workers in (0, 2):
        runs[workers] = r = train(data, tmp, workers, a, a.epochs, f"workers{workers}")
        last = r["rows"][-1]
        print(f"  workers {workers}: {r['seconds']:.1f} s for {a.epochs} epochs (incl. per-epoch val); last epoch "
              f"box/cls/dfl loss {float(last['train/box_loss']):.4f}/{float(last['train/cls_loss']):.4f}/"
              f"{float(last['train/dfl_loss']):.4f}, val mAP50 {float(last['metrics/mAP50(B)']):.4f}")
    keys = [k for k in runs[0]["rows"][0] if k.startswith("train/")]
    same = all(r0[k] == r2[k] for r0, r2 in zip(runs[0]["rows"], runs[2]["rows"]) for k in keys)
    print(f"  train losses of every epoch identical with workers 0 and 2: {same}")

    # from scratch, a few epochs give mAP 0: train longer (no per-epoch val) so the comparison has numbers
    long = train(data, tmp, 2, a, a.val_epochs, "long", val=False)
    print(f"\n(b) weights of a {a.val_epochs}-epoch run (workers 2, no per-epoch val: {long['seconds']:.1f} s), "
          f"rect val, conf 0.001, iou 0.7")
    from ultralytics.models.yolo.detect import DetectionValidator
    from yolo_data.integrations.ultralytics import YoloDataValidator
    theirs, t1 = validate(long["weights"], data, DetectionValidator, a)
    ours, t2 = validate(long["weights"], data, YoloDataValidator, a)
    print(f"  {'':22s}" + "".join(f"{k.split('/')[1]:>22s}" for k in METRICS) + f"{'seconds':>10s}")
    print(f"  {'DetectionValidator':22s}" + "".join(f"{theirs[k]:22.6f}" for k in METRICS) + f"{t1:10.1f}")
    print(f"  {'YoloDataValidator':22s}" + "".join(f"{ours[k]:22.6f}" for k in METRICS) + f"{t2:10.1f}")
    print(f"  identical: {theirs == ours}")
    print(f"  inputs: {compare_inputs(data, a.imgsz, a.batch, a.verbose)}")

    print("\n(c) DDP with 2 CPU processes")
    print(f"  {ddp_probe()}")
    if not a.no_ddp:
        for port, mode in ((29571, "plain"), (29572, "gloo")):
            print(f"  torchrun --nproc_per_node 2 ultralytics_ddp_cpu.py --mode {mode} (2 epochs, global batch "
                  f"{a.batch}, workers 1 per rank): {torchrun(data, tmp, a, mode, port)}")
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    print("\n" + common.footer())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
