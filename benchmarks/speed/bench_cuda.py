#!/usr/bin/env python
"""What a GPU training loader delivers: img/s into CUDA tensors, the CPU path against the device path.

    python benchmarks/speed/run.py cuda --quick     # the prepared run: under 8 minutes on a 16-core H100 node
    python benchmarks/speed/run.py cuda             # the full run: workers 1,2,4,8,16, 3 repeats
    python benchmarks/speed/run.py cuda --device cpu --data data/sample/images/train --workers 0,1 --batch-size 8 \
        --images 64 --repeats 1 --decode-images 64     # a dry run of the same code without a GPU, seconds

``--quick`` is workers 1,4,16, 2 repeats, 1,280 images a window and 1,280 decoded for the ceilings: about
3 minutes of measuring at 10 ms of CPU per mosaic image (BENCHMARKS.md), plus under a minute to generate
the image set on a bare machine; an option typed after it wins.  ``--data`` is an image folder or
data.yaml; by default the generated set of ``--synthetic-n`` 6,400 images (100 batches of 64: a window
stays inside the first epoch, where persistent workers never drain; make_synthetic.py, 640 px JPEGs of
about 145 KB, one process per core) in $YOLO_DATA_BENCH_SYNTHETIC or yolo_data_bench in the system temp
folder, generated there when missing.

The training loader (``build_loader`` with ``Settings.training``: mosaic, hyp.scratch-low, imgsz 640,
batch ``--batch-size`` 64), for each of ``--workers`` (capped at os.cpu_count(); build_loader may cap
further, and the row names the count it used) and two paths:

* **cpu**: the loader as it is (``device`` unset): workers decode and augment, batches come as uint8
  (B, 3, H, W) CPU tensors in pinned memory (build_loader pins where CUDA is available) and go to the
  device with ``non_blocking=True``;
* **device**: the same loader built with ``device=--device`` (docs/device.md): the workers read the
  encoded bytes and make the labels, the training process decodes and augments on that device and hands
  over uint8 (B, 3, H, W) tensors already there; ``.to(device, non_blocking=True)`` is then no copy.

Either way each batch then becomes float in [0, 1] on the device and its targets go there too, as a
training step's first line does.  Per row: img/s over ``--images`` images (at least 3 batches a worker)
after a warm-up (as many batches as workers, at least 2), the device synchronised before the clock starts
and stops; median (min–max) of ``--repeats`` fresh loaders.  A note under the table names the rows whose
window crossed an epoch's end (the pipeline drains there, which a training epoch of a real dataset does
once in thousands of batches).  **CPU ms/img**: user + system CPU time over the same window of
the whole process tree (this process with all its threads, and every live descendant: the DataLoader
workers, persistent through the window), read from /proc/<pid>/stat before and after it, divided by the
window's images; **of it, workers**: the DataLoader workers' part of it (the rest is the training
process, where the device stage runs).  **GPU peak**: torch.cuda.max_memory_allocated after reset_peak_memory_stats at the
loader's construction (what torch's allocator holds: batches, their float copies, the device stage's
buffers), '-' on CPU.  **× cpu**: the device path's median over the cpu path's with the same workers.

Two decode ceilings on the same JPEG files, ``--batch-size`` a call: NVIDIA DALI's mixed decoder
(``fn.readers.file`` + ``fn.decoders.image(device='mixed')``, nvJPEG with its own CPU threads) where
``nvidia.dali`` imports, and torchvision's batched ``decode_jpeg(list, device=...)`` (nvJPEG on CUDA, one
image after another on CPU); files read from the (warm) page cache inside the window, decode only: no
mosaic, no resize.  The targets line under the table judges the device path on one H100-class GPU with 16
cores: >= 3,000 img/s with mosaic, >= 2x the cpu path (best worker count against best), <= 1/3 of the cpu
path's CPU time per image (at the device path's best worker count); judged only on CUDA.  Without a CUDA
device (and without ``--device cpu``) it says so and exits 0: nothing in yolo_data needs a GPU.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

PATHS = ("cpu", "device")
JPEG = (".jpg", ".jpeg")
TARGET_IMG_S, TARGET_SPEEDUP, TARGET_CPU_SHARE = 3000.0, 2.0, 1 / 3
DEFAULTS = {"workers": "1,2,4,8,16", "images": 1920, "repeats": 3, "decode_images": 1920}
QUICK = {"workers": "1,4,16", "images": 1280, "repeats": 2, "decode_images": 1280}


@dataclass
class Run:
    """One measurement: img/s, CPU ms per image of the process tree (None: no /proc), GPU peak in MiB
    (None: not on CUDA), the workers the loader used."""
    img_s: float
    cpu_ms: Optional[float]
    gpu_mib: Optional[float]
    workers: int = 0
    crossed_epoch: bool = False
    workers_ms: Optional[float] = None  # the DataLoader workers' part of cpu_ms


class Window:
    """The measured window: wall time, CPU time of the process tree, the device synchronised at both ends."""

    def __init__(self, device: torch.device):
        self.device = device
        self.proc = os.path.exists("/proc/self/stat")

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        self.sync()
        self.cpu0 = common.tree_cpu_seconds() if self.proc else {}
        self.t0 = time.perf_counter()

    def stop(self, images: int, gpu_mib: Optional[float] = None, workers: int = 0) -> Run:
        self.sync()
        seconds = time.perf_counter() - self.t0
        cpu1 = common.tree_cpu_seconds() if self.proc else {}
        # a pid that appeared inside the window counts from 0; none vanishes (persistent workers)
        cpu = sum(t - self.cpu0.get(pid, 0.0) for pid, t in cpu1.items()) if self.proc else None
        main = cpu1.get(os.getpid(), 0.0) - self.cpu0.get(os.getpid(), 0.0) if self.proc else None
        return Run(images / seconds, None if cpu is None else cpu / images * 1e3, gpu_mib, workers,
                   workers_ms=None if cpu is None else (cpu - main) / images * 1e3)


def reset_gpu_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def gpu_peak_mib(device: torch.device) -> Optional[float]:
    return torch.cuda.max_memory_allocated(device) / 2 ** 20 if device.type == "cuda" else None


def build(data: Path, path: str, device: torch.device, workers: int, batch: int, cache_dir: str):
    """The training loader of ``data``: the cpu path (device unset) or the device path (device set)."""
    from yolo_data import Settings
    from yolo_data.build import build_loader
    settings = Settings.training(img_size=640, batch_size=batch, workers=workers, hyp=str(common.HYP_FILE),
                                 cache_dir=cache_dir, device=str(device) if path == "device" else None)
    return build_loader(str(data), settings)


def epochs(loader):
    """Batches as a training loop takes them: one ``for batch in loader`` pass per epoch, forever."""
    while True:
        got = False
        for batch in loader:
            got = True
            yield batch
        if not got:
            raise RuntimeError("loader yielded no batch")


def step_input(batch, device: torch.device) -> int:
    """A training step's first line: images float in [0, 1] on ``device``, targets there too.  Returns
    the batch's image count.  A tensor already on ``device`` is not copied again."""
    imgs, targets = (batch["img"], batch.get("cls")) if isinstance(batch, dict) else (batch[0], batch[1])
    x = imgs.to(device, non_blocking=True).float() / 255
    if isinstance(targets, torch.Tensor):
        targets = targets.to(device, non_blocking=True)
    del x, targets
    return int(imgs.shape[0])


def measure(data: Path, path: str, device: torch.device, workers: int, batch: int, images: int,
            cache_dir: str) -> Run:
    """One fresh loader's img/s, CPU ms per image and GPU peak over ``images`` images after its warm-up."""
    reset_gpu_peak(device)
    loader = build(data, path, device, workers, batch, cache_dir)
    used = getattr(loader, "num_workers", workers)
    it = epochs(loader)
    window = Window(device)
    try:
        # with W workers the first W batches come together: the window starts in the steady state
        warmup = max(2, used)
        for _ in range(warmup):
            step_input(next(it), device)
        window.start()
        n = taken = 0
        while n < max(images, 3 * max(used, 1) * batch):  # a few rounds of every worker's batches
            n += step_input(next(it), device)
            taken += 1
        run = window.stop(n, gpu_peak_mib(device), used)
        run.crossed_epoch = warmup + taken > len(loader)
        return run
    finally:
        it.close()
        common.shutdown(loader)  # persistent workers: stop them before the next loader starts
        del it, loader
        gc.collect()
        if common.wait_for_children():
            common.log(f"warning: leftover worker processes after {path} workers={workers}; terminated")


def jpeg_files(data: Path, cache_dir: str) -> List[str]:
    """The JPEG files the loader reads (its dataset's ``im_files``), in order."""
    from yolo_data import Settings
    from yolo_data.build import build_loader
    loader = build_loader(str(data), Settings.training(img_size=640, workers=0, cache_dir=cache_dir))
    return [str(f) for f in loader.dataset.im_files if str(f).lower().endswith(JPEG)]


def torchvision_decode(files: Sequence[str], device: torch.device, batch: int, images: int) -> Run:
    """torchvision's batched decode_jpeg of ``images`` of ``files`` (cycled), ``batch`` a call, read
    inside the window."""
    from torchvision.io import ImageReadMode, decode_jpeg

    def one_batch(names):
        raw = [torch.from_numpy(np.fromfile(f, dtype=np.uint8)) for f in names]
        with warnings.catch_warnings():  # decode_jpeg is deprecated in favour of TorchCodec: the ceiling stays
            warnings.simplefilter("ignore")
            out = decode_jpeg(raw, mode=ImageReadMode.RGB, device=device)
        return len(out)

    names = itertools.cycle(files)
    one_batch([next(names) for _ in range(batch)])  # warm-up: nvJPEG's handles and buffers
    reset_gpu_peak(device)
    window = Window(device)
    window.start()
    n = 0
    while n < images:
        n += one_batch([next(names) for _ in range(batch)])
    return window.stop(n, gpu_peak_mib(device))


def dali_decode(files: Sequence[str], device: torch.device, batch: int, images: int):
    """DALI's mixed decoder (nvJPEG; its reader reads the files) over ``images`` of ``files``: a Run, or a
    line saying why there is none (not installed, no CUDA device, or DALI's error)."""
    try:
        from nvidia.dali import fn, pipeline_def, types
    except ImportError:
        return "DALI not installed"
    if device.type != "cuda":
        return "DALI installed; its mixed decoder needs a CUDA device"
    try:
        @pipeline_def(batch_size=batch, num_threads=min(8, common.usable_cores()), device_id=device.index or 0,
                      prefetch_queue_depth=2)
        def decode():
            jpegs, _ = fn.readers.file(files=list(files), random_shuffle=False)
            return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)

        pipe = decode()
        pipe.build()
        for _ in range(2):  # warm-up: nvJPEG's handles and buffers, the prefetch queue filled
            pipe.run()
        window = Window(device)  # cudaDeviceSynchronize at both ends: DALI's stream too
        window.start()
        n = 0
        while n < images:
            n += len(pipe.run()[0])
        run = window.stop(n)  # GPU peak: DALI's own allocator, which torch does not see
        del pipe
        return run
    except Exception as e:  # a ceiling row never stops the benchmark
        return f"DALI failed: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def cell(runs: Sequence[Run], attr: str, digits: int = 1) -> str:
    vals = [getattr(r, attr) for r in runs if getattr(r, attr) is not None]
    return common.fmt_range(vals, digits, always=attr == "img_s") if vals else "-"


def median(runs: Sequence[Run], attr: str) -> Optional[float]:
    return common.med(getattr(r, attr) for r in runs)


def targets_line(rows: List[Dict], device: torch.device) -> str:
    """The targets, each marked met / not met from the medians where ``device`` is CUDA."""
    head = ("**Targets** (one H100-class GPU, 16 cores): >= 3,000 img/s with mosaic, >= 2x the cpu path "
            "(best worker count against best), <= 1/3 of its CPU time per image (at the device path's best "
            "worker count)")
    best = {p: max((r for r in rows if r["path"] == p), key=lambda r: r["median_img_s"], default=None)
            for p in PATHS}
    if device.type != "cuda" or None in best.values():
        return head + ": not judged (" + ("no CUDA device: a dry run" if device.type != "cuda" else "no rows") + ")."
    dev, cpu = best["device"], best["cpu"]
    same = next((r for r in rows if r["path"] == "cpu" and r["workers"] == dev["workers"]), None)
    share = None if same is None or not same["median_cpu_ms"] or dev["median_cpu_ms"] is None \
        else dev["median_cpu_ms"] / same["median_cpu_ms"]

    def mark(ok):
        return "**met**" if ok else "**not met**"
    rate, speedup = dev["median_img_s"], dev["median_img_s"] / cpu["median_img_s"]
    parts = [f"{rate:,.0f} img/s ({dev['workers']} workers): {mark(rate >= TARGET_IMG_S)}",
             f"{speedup:.2f}x ({cpu['workers']} workers on the cpu path): {mark(speedup >= TARGET_SPEEDUP)}",
             "CPU time per image: not measured" if share is None else
             f"{share:.2f} of the cpu path's CPU time per image: {mark(share <= TARGET_CPU_SHARE)}"]
    return head + ": " + "; ".join(parts) + "."


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="image folder or data.yaml (default: the generated "
                    "set of --synthetic-n images)")
    ap.add_argument("--synthetic-n", type=int, default=6400, help="images of the generated set (default 6400)")
    ap.add_argument("--device", default="cuda:0", help="where batches go, and the device path's device")
    ap.add_argument("--workers", help=f"worker counts, comma-separated (default {DEFAULTS['workers']}; capped at "
                    "os.cpu_count())")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--images", type=int, help=f"images a measured window (default {DEFAULTS['images']})")
    ap.add_argument("--repeats", type=int, help=f"fresh loaders per row (default {DEFAULTS['repeats']})")
    ap.add_argument("--decode-images", type=int, help=f"images decoded per ceiling (default "
                    f"{DEFAULTS['decode_images']})")
    ap.add_argument("--quick", action="store_true", help=f"the prepared run, under 8 minutes on a 16-core H100 "
                    f"node: {', '.join(f'{k} {v}' for k, v in QUICK.items())}")
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:  # typed options win over the preset
            setattr(args, key, value)
    try:
        asked = [int(w) for w in str(args.workers).split(",") if w.strip()]
    except ValueError:
        ap.error(f"--workers: comma-separated whole numbers, got {args.workers!r}")
    if not asked or min(asked) < 0:
        ap.error(f"--workers: at least one count, none negative, got {args.workers!r}")
    args.worker_counts = list(dict.fromkeys(min(w, os.cpu_count() or 1) for w in asked))
    return args


def loader_rows(args, device: torch.device, cache_dir: str) -> List[Dict]:
    """Print and return one row per path and worker count; the device path's row carries × cpu."""
    rows = []
    for workers in args.worker_counts:
        for path in PATHS:
            runs = [measure(args.data, path, device, workers, args.batch_size, args.images, cache_dir)
                    for _ in range(args.repeats)]
            used = runs[0].workers
            row = {"path": path, "workers_asked": workers, "workers": used, "img_s": [r.img_s for r in runs],
                   "cpu_ms_per_img": [r.cpu_ms for r in runs], "gpu_peak_mib": [r.gpu_mib for r in runs],
                   "median_img_s": median(runs, "img_s"), "median_cpu_ms": median(runs, "cpu_ms"),
                   "median_gpu_mib": median(runs, "gpu_mib"), "crossed_epoch": any(r.crossed_epoch for r in runs),
                   "workers_cpu_ms_per_img": [r.workers_ms for r in runs], "median_workers_cpu_ms": median(runs, "workers_ms")}
            base = next((r for r in rows if r["path"] == "cpu" and r["workers_asked"] == workers), None)
            row["x_cpu"] = row["median_img_s"] / base["median_img_s"] if path == "device" else 1.0
            rows.append(row)
            label = f"{path}, {used} workers" + (f" (asked {workers})" if used != workers else "")
            ratio = f"{row['x_cpu']:.2f}×" if path == "device" else "base"
            print(f"| {label} | {cell(runs, 'img_s')} | {cell(runs, 'cpu_ms', 2)} | {cell(runs, 'workers_ms', 2)} "
                  f"| {cell(runs, 'gpu_mib', 0)} | {ratio} |", flush=True)
    return rows


def ceiling_rows(args, device: torch.device, cache_dir: str) -> Dict[str, object]:
    """Print and return the two decode ceilings (DALI, torchvision) on the loader's JPEG files."""
    files = jpeg_files(args.data, cache_dir)
    out = {}
    for name, fn in (("DALI mixed decoder", dali_decode), ("torchvision decode_jpeg", torchvision_decode)):
        label = f"decode ceiling: {name}, batch {args.batch_size}"
        runs, note = [], None
        if not files:
            note = "no JPEG files"
        for _ in range(args.repeats if files else 0):
            got = fn(files, device, args.batch_size, args.decode_images)
            if isinstance(got, str):
                note = got
                break
            runs.append(got)
        if note:
            print(f"| {label} | {note} | - | - | - |")
        else:
            print(f"| {label} | {cell(runs, 'img_s')} | {cell(runs, 'cpu_ms', 2)} | - | {cell(runs, 'gpu_mib', 0)} | - |")
        out[name] = {"note": note, "img_s": [r.img_s for r in runs], "cpu_ms_per_img": [r.cpu_ms for r in runs],
                     "gpu_peak_mib": [r.gpu_mib for r in runs], "median_img_s": median(runs, "img_s")}
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing measured (use --device cpu for a dry run of the loop)")
        return 0
    if args.data is None:
        args.data = common.synthetic_set(args.synthetic_n, workers=common.usable_cores()).parent / "images" / "train"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    print(f"### Training loader into {name}: mosaic at 640, hyp.scratch-low, batch {args.batch_size}, the cpu "
          f"path against the device path, {args.images} images a window, {args.repeats} repeats, {args.data}\n")
    print("| path, workers | img/s median (min–max) | CPU ms/img (process tree) | of it, workers | GPU peak MiB | × cpu |\n"
          "|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        rows = loader_rows(args, device, tmp)
        ceilings = ceiling_rows(args, device, tmp)
    line = targets_line(rows, device)
    crossed = [f"{r['path']}, {r['workers']} workers" for r in rows if r["crossed_epoch"]]
    if crossed:
        print(f"\nNote: the window crossed an epoch's end, where the pipeline drains, in {'; '.join(crossed)}: "
              "more images (--data, --synthetic-n) keep it inside one epoch.")
    print(f"\n{line}\n\n{common.footer()}")
    common.write_result("cuda", {"device": name, "rows": rows, "ceilings": ceilings, "targets": line}, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
