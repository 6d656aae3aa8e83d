#!/usr/bin/env python
"""Where a yolo_data item's time goes, and the throughput ceiling that follows on this machine.

    python benchmarks/speed/run.py profile [--data DIR] [--cache none|ram] [--batches 30] [--loader-images 400]

``--data`` is an image folder; by default the generated 2,000-image set (benchmarks/generators/make_synthetic.py) in
$YOLO_DATA_BENCH_SYNTHETIC or yolo_data_bench in the system temp folder, generated there when missing.

Three parts, each for the training loader (augment, hyp.scratch-low, imgsz 640, batch 16) and the
validation loader (rect, pad 0.5, batch 32):

1. In one process, ``__getitems__`` + ``collate_fn`` over fixed batches: ms per item (min and median of
   5 passes).
2. The same under cProfile: per item, the time inside each OpenCV/torch call (and simplejpeg's decode)
   and in everything else (Python), largest first.
3. Through ``create_dataloader`` with 1 and 2 workers (``--loader-images`` images, 400 by default, after a
   warm-up): CPU time (user and system) per image in the
   workers and in the main process, read from /proc, and minor page faults per image.  The ceiling
   for 2 workers on this machine's cores is cores / (CPU ms per image, workers + main).

Page faults matter here: each batch is a fresh shared-memory tensor (as torch's default_collate makes
it), and every 4 KiB page of it faults once when first written.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import REPO  # noqa: E402


def loader_args(mode: str):
    if mode == "train":
        return dict(batch_size=16, augment=True, hyp=str(REPO / "data/hyps/hyp.scratch-low.yaml"), shuffle=True)
    return dict(batch_size=32, augment=False, rect=True, pad=0.5, shuffle=False)


def in_process(data, mode, cache, batches, cache_dir):
    from yolo_data.loading.collate import collate_fn
    from yolo_data.dataset import LoadImagesAndLabels
    a = loader_args(mode)
    ds = LoadImagesAndLabels(str(data), 640, a["batch_size"], augment=a["augment"], hyp=a.get("hyp"), rect=a.get("rect", False),
                     pad=a.get("pad", 0.0), cache_images=cache, cache_dir=cache_dir)
    bs = a["batch_size"]
    if mode == "train":
        rng = np.random.default_rng(0)
        plan = [rng.choice(len(ds), bs, replace=False).tolist() for _ in range(batches)]
    else:
        plan = [list(range(k * bs, min((k + 1) * bs, len(ds)))) for k in range(min(batches, -(-len(ds) // bs)))]
    n = sum(len(b) for b in plan)
    for b in plan[:2]:
        collate_fn(ds.__getitems__(b))
    passes = []
    for _ in range(5):
        t0 = time.perf_counter()
        for b in plan:
            collate_fn(ds.__getitems__(b))
        passes.append((time.perf_counter() - t0) / n * 1e3)
    prof = cProfile.Profile()
    prof.enable()
    for b in plan:
        collate_fn(ds.__getitems__(b))
    prof.disable()
    stats = pstats.Stats(prof).stats
    total = sum(v[2] for v in stats.values())  # tottime over every function = the whole profiled time
    builtin = {}
    for (file, _, name), v in stats.items():
        if file == "~":  # C functions: OpenCV, numpy/torch built-ins
            builtin[name] = builtin.get(name, 0.0) + v[2]
        elif name == "decode_jpeg" and file.endswith("decode.py"):  # simplejpeg (Cython: no entry of its own)
            builtin["simplejpeg decode"] = builtin.get("simplejpeg decode", 0.0) + v[2]
    top = sorted(builtin.items(), key=lambda kv: -kv[1])[:8]
    rest = total - sum(t for _, t in top)
    return (min(passes), statistics.median(passes), [(k, t / n * 1e3) for k, t in top], rest / n * 1e3, total / n * 1e3,
            passes)


def proc_stat(pid):
    return common.proc_stat(pid)[:3]  # utime, stime (ticks), minor faults


def forever(loader):
    """Batches across epochs (a small data set has fewer than the images timed in one epoch)."""
    while True:
        yield from loader


def through_loader(data, mode, cache, workers, cache_dir, images=400):
    from yolo_data import create_dataloader
    a = loader_args(mode)
    loader, _ = create_dataloader(str(data), 640, a["batch_size"], 32, augment=a["augment"], hyp=a.get("hyp"),
                                  rect=a.get("rect", False), pad=a.get("pad", 0.0), workers=workers,
                                  shuffle=a["shuffle"], cache=None if cache == "none" else cache, cache_dir=cache_dir)
    it = forever(loader)
    for _ in range(max(4, 2 * workers)):
        next(it)
    pids = [os.getpid()] + [w.pid for w in loader._iterator._workers]  # persistent workers
    before = [proc_stat(p) for p in pids]
    t0, n = time.perf_counter(), 0
    while n < images:
        n += len(next(it)[0])
    seconds = time.perf_counter() - t0
    after = [proc_stat(p) for p in pids]
    tick = os.sysconf("SC_CLK_TCK")
    d = [[(b[i] - a[i]) for i in range(3)] for a, b in zip(before, after)]
    main = d[0]
    workers_sum = [sum(x[i] for x in d[1:]) for i in range(3)]
    it.close()
    common.shutdown(loader)
    del it, loader
    ms = lambda ticks: ticks / tick / n * 1e3  # noqa: E731
    return dict(img_s=n / seconds, main_user=ms(main[0]), main_sys=ms(main[1]), w_user=ms(workers_sum[0]),
                w_sys=ms(workers_sum[1]), w_faults=workers_sum[2] / n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="image folder (default: the synthetic 2,000)")
    ap.add_argument("--cache", choices=["none", "ram"], default="none")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--loader-images", type=int, default=400, help="images timed through create_dataloader")
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    args.data = common.synthetic_images(args.data)
    cv2.setNumThreads(0)  # as in DataLoader workers
    import torch
    torch.set_num_threads(1)
    cores = len(os.sched_getaffinity(0))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("train", "val"):
            cache = False if args.cache == "none" else args.cache
            best, med, top, rest, profiled, passes = in_process(args.data, mode, cache, args.batches, tmp)
            results[mode] = {"ms_per_item_passes": passes, "ms_per_item_min": best, "ms_per_item_median": med,
                             "profiled_ms_per_item": profiled, "profile_ms_per_item": dict(top),
                             "profile_rest_ms_per_item": rest, "through_loader": []}
            print(f"### {mode} (image cache {args.cache}), {args.data}\n")
            print(f"One process, `__getitems__` + `collate_fn`: **{best:.2f} ms per item** (median {med:.2f}).\n")
            print(f"Under cProfile ({profiled:.2f} ms per item with the profiler's overhead):\n")
            print("| call | ms per item |\n|---|---:|")
            for name, t in top:
                print(f"| `{name}` | {t:.2f} |")
            print(f"| everything else (Python, numpy) | {rest:.2f} |\n")
            print(f"Through `create_dataloader` (CPU time per image read from /proc; {args.loader_images} images):\n")
            print("| workers | img/s | workers user ms/img | workers sys ms/img | main ms/img | worker page faults/img | "
                  f"ceiling on {cores} cores, img/s |\n|---:|---:|---:|---:|---:|---:|---:|")
            for w in (1, 2):
                r = through_loader(args.data, mode, args.cache, w, tmp, args.loader_images)
                per_img = r["w_user"] + r["w_sys"] + r["main_user"] + r["main_sys"]
                results[mode]["through_loader"].append({"workers": w, **r,
                                                        "ceiling_img_s": min(w, cores) * 1e3 / per_img})
                print(f"| {w} | {r['img_s']:.1f} | {r['w_user']:.2f} | {r['w_sys']:.2f} | "
                      f"{r['main_user'] + r['main_sys']:.2f} | {r['w_faults']:.0f} | "
                      f"{min(w, cores) * 1e3 / per_img:.0f} |")
            print()
    print(common.footer())
    common.write_result("profile", results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
