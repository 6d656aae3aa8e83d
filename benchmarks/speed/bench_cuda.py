#!/usr/bin/env python
"""End-to-end throughput into CUDA tensors: loader -> pinned memory -> non-blocking copy to the GPU.

    python benchmarks/speed/run.py cuda [--data DIR] [--workers 8] [--images 1280] [--repeats 3]
    python benchmarks/speed/run.py cuda --device cpu      # a dry run of the same loop without a GPU

``--data`` is an image folder; by default the generated 2,000-image set (benchmarks/generators/make_synthetic.py) in
$YOLO_DATA_BENCH_SYNTHETIC or yolo_data_bench in the system temp folder, generated there when missing.

For the training loader (augment, hyp.scratch-low, imgsz 640, batch 16) and the validation loader
(rect, pad 0.5, batch 32), with ``pin_memory`` on (create_dataloader's default where CUDA is
available) and off: each batch's images go to the device with ``non_blocking=True`` and become
float in [0, 1] there, as a training step's first line does; targets go too.  img/s over ``--images``
images after a warm-up, the device synchronised before the clock stops; median (min-max) of
``--repeats`` fresh loaders.  Without a CUDA device (and without ``--device cpu``) it says so and
exits 0: nothing in yolo_data needs a GPU.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import REPO  # noqa: E402

MODES = {
    "train": dict(batch_size=16, augment=True, hyp=str(REPO / "data/hyps/hyp.scratch-low.yaml"), shuffle=True),
    "val": dict(batch_size=32, augment=False, rect=True, pad=0.5, shuffle=False),
}


def measure(data, mode, device, pin, workers, images, cache_dir) -> float:
    from yolo_data import create_dataloader
    a = MODES[mode]
    loader, _ = create_dataloader(str(data), 640, a["batch_size"], 32, augment=a["augment"], hyp=a.get("hyp"),
                                  rect=a.get("rect", False), pad=a.get("pad", 0.0), workers=workers,
                                  shuffle=a["shuffle"], cache_dir=cache_dir)
    loader.pin_memory = pin and device.type == "cuda"  # create_dataloader pins whenever CUDA is there

    def batches(dl):
        while True:
            yield from dl

    it = batches(loader)
    n, started = 0, None
    for k, (imgs, targets, _, _) in enumerate(it):
        x = imgs.to(device, non_blocking=True).float() / 255  # what a training step starts with
        t = targets.to(device, non_blocking=True)
        del x, t
        if k == max(2, workers):  # warm-up done: workers started, first batches out
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started, n = time.perf_counter(), 0
        elif started is not None:
            n += len(imgs)
            if n >= images:
                break
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    it.close()
    common.shutdown(loader)  # persistent workers: stop them before the next loader starts
    return n / seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="image folder (default: the generated 2,000-image set)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--images", type=int, default=1280)
    ap.add_argument("--repeats", type=int, default=3)
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing measured (use --device cpu for a dry run of the loop)")
        return 0
    args.data = common.synthetic_images(args.data)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    print(f"### Into {name}: loader -> {'pinned memory -> ' if device.type == 'cuda' else ''}"
          f"non-blocking copy, {args.workers} workers, {args.data}\n")
    print("| loader | pin_memory | img/s median (min–max) |\n|---|---|---:|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            for pin in ((True, False) if device.type == "cuda" else (False,)):
                runs = [measure(args.data, mode, device, pin, args.workers, args.images, tmp)
                        for _ in range(args.repeats)]
                print(f"| {mode} | {'on' if pin else 'off'} | {common.fmt_range(runs, 1, always=True)} |")
                rows.append({"loader": mode, "pin_memory": pin, "img_per_s": runs,
                             "median_img_per_s": common.med(runs)})
    print("\n" + common.footer())
    common.write_result("cuda", {"device": name, "rows": rows}, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
