"""Training-loader throughput: yolo_data against YOLOv5 7.0 and Ultralytics 8.x, same data, same settings.

    python benchmarks/speed/run.py train                 # full run (about 10-15 min, 2 cores; benchmark environment)
    python benchmarks/speed/run.py train --task segment  # segmentation loaders, coco128-seg
    python benchmarks/speed/run.py train --task segment --datasets coco128-seg synthetic --synthetic-objects 20 60
    python benchmarks/speed/run.py train --quick         # coco128, tiny
    python benchmarks/speed/run.py train --datasets coco128 --workers 2 --images 160 --repeats 5
    python benchmarks/speed/run.py train --libraries yolo_data yolo_data_4dec   # any environment with yolo_data
    python benchmarks/speed/run.py train --data OUT/highres.yaml                # any dataset yaml (its train split)

The peers are imported only when named in ``--libraries`` (default: all but yolo_data_cv2, which is yolo_data
with simplejpeg switched off), and a missing one stops
the run with one line before anything is measured.

``--task`` picks the loaders (default detect):

* detect: ``yolo_data.create_dataloader``, YOLOv5's ``utils.dataloaders.create_dataloader``, Ultralytics'
  ``build_yolo_dataset`` with task='detect';
* segment: ``yolo_data.integrations.yolov5_segment.create_dataloader`` and YOLOv5's ``utils.segment.dataloaders.create_dataloader``
  (batches ``(imgs, targets, paths, shapes, masks)``) with overlap_mask=True and mask_downsample_ratio=4,
  Ultralytics' ``build_yolo_dataset`` with task='segment', overlap_mask=True, mask_ratio=4 (as its
  SegmentationTrainer / SegmentationValidator build theirs; batches carry 'masks').  Default dataset
  coco128-seg; ``--datasets synthetic`` is then the generated set with polygon labels (the outlines of the
  drawn shapes), ``--synthetic-objects MIN MAX`` objects per image (e.g. 20 60 for dense scenes).

Everything else is the same for both tasks.  What is measured, per dataset x workers x library:

* the training loader as each library's own ``create_dataloader`` / ``build_dataloader`` makes it:
  augment=True with hyp.scratch-low (mosaic 1.0, mixup 0, copy-paste 0, HSV, translate 0.1, scale 0.5,
  fliplr 0.5), imgsz 640, batch 16, shuffle, no image cache, rect False;
* one measurement = a fresh dataset + loader (built from the label cache, which a priming pass wrote
  first), ``--warmup`` batches consumed and not timed (worker start-up, first reads), then
  ``--images`` images consumed and timed: img/s = images / seconds.  Batches are taken the way a
  training loop takes them: ``for batch in loader`` again and again, one pass per epoch (YOLOv5's and
  Ultralytics' InfiniteDataLoader, yolo_data's persistent-worker DataLoader, no set_epoch calls);
* afterwards the loader's workers are shut down and joined (and the script checks that no child
  process is left) before the next measurement starts;
* libraries alternate within each repeat round, and the order rotates between rounds
  (round 1: yolo_data, yolov5, ultralytics; round 2: yolov5, ultralytics, yolo_data; ...), so drift
  and background load hit all three alike.  Reported: median, min and max over ``--repeats`` rounds,
  and the ratio of medians yolo_data / peer;
* also the validation-style loader (augment=False, rect=True, pad=0.5, batch 32, ``--val-workers``
  workers, no shuffle; for Ultralytics its 'val' mode dataset with rect=True), on the same (train)
  images, measured the same way;
* decodes per image: ``cv2.imread`` / ``cv2.imdecode`` (and ``simplejpeg.decode_jpeg``, which yolo_data
  uses for JPEGs where it is installed) calls during the timed window (counted in a
  shared counter, workers included) divided by the images timed.  Approximate (prefetching shifts the
  window by a few batches), but it shows whether a library re-decodes the 3 extra mosaic tiles.
  Ultralytics keeps recently loaded images in a per-worker RAM buffer and draws mosaic partners from it.
* first batch: seconds from starting to build the dataset + loader until the first batch arrives
  (label-cache load, worker start-up, first items);
* CPU time per image: user + system time of the main process and its workers (/proc) during the
  timed window, divided by the images.  Time the VM is not scheduled lowers img/s but not this, so
  on a shared host it is the steadier comparison (CPU-bound loaders: ratios agree with img/s).

Datasets: coco128 (segment: coco128-seg; under ``--root`` or $YOLO_DATA_BENCH_DATA, default
../shared/datasets; only read) and a generated COCO-like set of ``--synthetic-n`` images
(benchmarks/generators/make_synthetic.py; reused from ``--synthetic-root`` or $YOLO_DATA_BENCH_SYNTHETIC, default
yolo_data_bench in the system temp folder, when a complete one with the same settings is there, generated
otherwise), or any dataset yaml given
with ``--data`` (its ``train`` split, one folder).  Each library gets its own
copy of each dataset inside a temporary folder (all three write a label cache beside the labels):
labels and yaml are copied; images are hard links for the generated set and ``--data`` sets, and real
copies for the datasets folder's (YOLOv5 rewrites a damaged JPEG in place, and a link would let it write
into the shared folder).  The
copies' pages are read once before measuring, so every library starts with a warm page cache.

Isolation: YOLOv5/Ultralytics settings, matplotlib and yolo_data caches go to the temporary folder,
YOLO_OFFLINE=1, and outgoing network connections are refused.  The temporary folder is deleted at the
end.  Note that importing yolov5 / ultralytics calls ``cv2.setNumThreads(0)`` for the whole process,
so all three libraries run with OpenCV single-threaded here (the machine line says so).

Output: a paste-ready markdown report on stdout; progress on stderr.
"""
from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402
from common import (HYP_FILE, ensure_pkg_resources, isolate_environment, library_output, log,  # noqa: E402
                    shutdown, wait_for_children, warm_page_cache)

IMAGE_CACHE = {"mode": False}  # set from --cache: every library gets the same image-cache setting
# 4dec: batch_partners=False; cv2: every image decoded by OpenCV (decode.use_simplejpeg(False))
LIBS = ("yolo_data", "yolo_data_4dec", "yolo_data_cv2", "yolov5", "ultralytics")
STRIDE = 32
IMGSZ = 640
TRAIN_BATCH = 16
VAL_BATCH = 32
TASKS = ("detect", "segment")
TASK_WORDS = {"detect": "detection", "segment": "segmentation"}
LOADER_WORDS = {"detect": "yolo_data.create_dataloader, YOLOv5 utils.dataloaders.create_dataloader, Ultralytics "
                          "build_yolo_dataset task='detect'",
                "segment": "yolo_data.integrations.yolov5_segment.create_dataloader, YOLOv5 utils.segment.dataloaders.create_dataloader, "
                           "Ultralytics build_yolo_dataset task='segment'"}
MASK_RATIO = 4  # segment: masks at 1/4 of the image side, overlap_mask=True (YOLOv5-seg's and Ultralytics' defaults)
AUG_KEYS = ("hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale", "shear", "perspective", "flipud",
            "fliplr", "mosaic", "mixup", "copy_paste")

PEERS = {"yolov5": "yolov5", "ultralytics": "ultralytics"}  # library -> module it needs


# -- environment: keep the libraries offline and inside the temp folder ----------------------------
@dataclass
class Libs:
    yd_create: Callable
    v5_create: Callable
    ul_build_dataset: Callable
    ul_build_loader: Callable
    ul_get_cfg: Callable
    ul_default_cfg: object
    versions: Dict[str, str]
    task: str = "detect"  # which loaders yd_create / v5_create are, and what build_loader asks for


def import_libraries(only=None, task: str = "detect") -> Libs:
    """Import the libraries (all of them, or only those named in ``only``: e.g. a process that measures
    one library's memory must not carry the others' imports), with the ``task``'s create_dataloader of
    yolo_data and YOLOv5.  Callables of libraries left out are None."""
    if task not in TASKS:
        raise ValueError(f"task {task!r}: one of {TASKS}")
    want = set(LIBS if only is None else only)
    common.require("bench_train.py", *(PEERS[lib] for lib in sorted(want & set(PEERS))))
    import cv2
    real_imread = cv2.imread
    sys.dont_write_bytecode = True  # leave no __pycache__ in the checkout
    v5_create = ul_build_dataset = ul_build_loader = ul_get_cfg = ul_default_cfg = yd_create = None
    versions = {}
    if "yolov5" in want:
        ensure_pkg_resources()
        import yolov5
        if task == "segment":
            from yolov5.utils.segment.dataloaders import create_dataloader as v5_create
        else:
            from yolov5.utils.dataloaders import create_dataloader as v5_create
        logging.getLogger("yolov5").setLevel(logging.ERROR)
    if "ultralytics" in want:
        import ultralytics
        from ultralytics.cfg import DEFAULT_CFG as ul_default_cfg, get_cfg as ul_get_cfg
        from ultralytics.data.build import build_dataloader as ul_build_loader, build_yolo_dataset as ul_build_dataset
        logging.getLogger("ultralytics").setLevel(logging.ERROR)
    if want & {"yolo_data", "yolo_data_4dec", "yolo_data_cv2"}:
        import yolo_data
        if task == "segment":
            from yolo_data.integrations.yolov5_segment import create_dataloader as yd_create
        else:
            from yolo_data import create_dataloader as yd_create
        # yolo_data's warnings stay visible (on the real stderr), the others' notices go to LIBRARY_LOG
        handler = logging.StreamHandler(sys.__stderr__)
        handler.setFormatter(logging.Formatter("yolo_data %(levelname)s: %(message)s"))
        handler.setLevel(logging.WARNING)
        ylog = logging.getLogger("yolo_data")
        ylog.addHandler(handler)
        ylog.propagate = False
        versions["yolo_data"] = getattr(yolo_data, "__version__", "?") + " (this checkout)"
    if cv2.imread is not real_imread:
        log("warning: an import replaced cv2.imread; all libraries now use the replacement")
    if "yolov5" in want:
        versions["yolov5"] = getattr(yolov5, "__version__", "?")
    if "ultralytics" in want:
        versions["ultralytics"] = ultralytics.__version__
    return Libs(yd_create, v5_create, ul_build_dataset, ul_build_loader, ul_get_cfg, ul_default_cfg, versions, task)


# -- decode counter ------------------------------------------------------------------------------------
class DecodeCounter:
    """Counts cv2.imread/cv2.imdecode calls (and their multi-page forms, for TIFF bands), and simplejpeg.decode_jpeg calls where simplejpeg is installed
    (yolo_data decodes JPEGs with it then), in this process and in forked DataLoader workers (the
    patched functions and the shared counter are inherited at fork)."""

    def __init__(self):
        import cv2
        self.value = multiprocessing.get_context("fork").Value("q", 0)
        self.originals = [(cv2, name, getattr(cv2, name)) for name in ("imread", "imdecode", "imreadmulti", "imdecodemulti")]
        try:
            import simplejpeg
            self.originals.append((simplejpeg, "decode_jpeg", simplejpeg.decode_jpeg))
        except ImportError:
            pass
        counter = self.value

        def counting(fn):
            def wrapper(*args, **kwargs):
                with counter.get_lock():
                    counter.value += 1
                return fn(*args, **kwargs)
            return wrapper

        for module, name, fn in self.originals:
            setattr(module, name, counting(fn))

    def reset(self) -> None:
        with self.value.get_lock():
            self.value.value = 0

    def get(self) -> int:
        return int(self.value.value)

    def uninstall(self) -> None:
        for module, name, fn in self.originals:
            setattr(module, name, fn)


class NoCounter:
    def reset(self): pass
    def get(self): return -1
    def uninstall(self): pass


# -- datasets -----------------------------------------------------------------------------------------
@dataclass
class DatasetCopy:
    name: str
    images: Path  # the train image folder of this copy
    names: Dict[int, str]
    n_images: int
    channels: int = 3


@dataclass
class Source:
    name: str
    yaml: Path
    images: Path  # train image folder
    labels: Path
    names: Dict[int, str]
    link: bool  # hard-link the images (else copy them)
    note: str = ""
    channels: int = 3  # the yaml's ``channels``


def source_from_yaml(name: str, yaml_path: Path, link: bool) -> Source:
    import yaml
    spec = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    root = (yaml_path.parent / (spec.get("path") or ".")).resolve()
    train = spec["train"]
    if not isinstance(train, str):
        raise ValueError(f"{yaml_path}: 'train' must be one folder for this benchmark")
    images = (root / train).resolve()
    parts = list(images.parts)
    k = len(parts) - 1 - parts[::-1].index("images")  # YOLOv5's rule: the last /images/ -> /labels/
    labels = Path(*parts[:k], "labels", *parts[k + 1:])
    names = spec["names"]
    names = dict(enumerate(names)) if isinstance(names, list) else {int(k): v for k, v in names.items()}
    return Source(name, yaml_path, images, labels, names, link, channels=int(spec.get("channels") or 3))


def with_channels(sources: List[Source], channels, out: Path) -> List[Source]:
    """Each source followed by its copies of ``channels`` bands (1: grayscale JPEGs, N > 1: N-page TIFFs;
    benchmarks/generators/make_channels.py, written under ``out``), same images and labels."""
    import make_channels
    result = []
    for src in sources:
        result.append(src)
        log(f"writing the {', '.join(map(str, channels))}-channel copies of {src.name} ...")
        copies = make_channels.channel_copies(src.images.parents[1], out / src.name, [n for n in channels if n != 3])
        for n, yaml_path in copies.items():
            result.append(source_from_yaml(f"{src.name}-{'gray' if n == 1 else f'{n}band'}", yaml_path, link=True))
    return result


def resolve_sources(datasets, root, synthetic_n: int, synthetic_root=None, yamls=(), task: str = "detect",
                    synthetic_objects=None) -> List[Source]:
    """``root``: the datasets folder (None: $YOLO_DATA_BENCH_DATA or ../shared/datasets); ``yamls``: more
    dataset yamls, each named by its file's stem (by its folder's name where two stems are the same).
    'synthetic' is the generated set: polygon labels for the segment task, ``synthetic_objects`` (min, max)
    objects per image (None: make_synthetic's default)."""
    out = [source_from_yaml(Path(y).stem, Path(y).resolve(), link=True) for y in yamls]
    for ds in datasets:
        if ds == "synthetic":
            import make_synthetic
            seg = task == "segment"
            objects = tuple(synthetic_objects or make_synthetic.OBJECTS)
            yaml_path = common.synthetic_set(synthetic_n, root=synthetic_root, objects=objects, segments=seg)
            name = f"synthetic{'-seg' if seg else ''}{synthetic_n}"
            if objects != make_synthetic.OBJECTS:
                name += f"-obj{objects[0]}-{objects[1]}"
            out.append(source_from_yaml(name, yaml_path, link=True))
        else:
            d = common.dataset(ds, root)
            yamls = sorted(d.glob("*.yaml"))
            if not yamls:
                raise FileNotFoundError(f"{d}: no dataset yaml")
            out.append(source_from_yaml(ds, yamls[0], link=False))
    for s in out:
        if s.link and common.is_shared(s.images):
            s.link = False  # never hard-link into the shared datasets folder
    unique_names(out)
    return out


def unique_names(sources: List[Source]) -> None:
    """Give sources that share a name (two yamls called highres.yaml) their folder's name instead, then
    a number: each gets its own copy folder and its own rows in the report."""
    shared = {s.name for s in sources if sum(t.name == s.name for t in sources) > 1}
    taken = set()
    for s in sources:
        if s.name in shared and s.yaml.parent.name:
            s.name = s.yaml.parent.name
        name, k = s.name, 2
        while name in taken:
            name, k = f"{s.name}-{k}", k + 1
        s.name = name
        taken.add(name)


def copy_for(src: Source, dst_root: Path) -> DatasetCopy:
    """dst_root/images/<split> (links or copies), dst_root/labels/<split> (copies, no caches), the yaml."""
    split = src.images.name
    img_dst, lbl_dst = dst_root / "images" / split, dst_root / "labels" / split
    img_dst.mkdir(parents=True)
    lbl_dst.mkdir(parents=True)
    n = 0
    for f in sorted(src.images.iterdir()):
        if f.is_file():
            (os.link if src.link else shutil.copyfile)(f, img_dst / f.name)
            n += 1
    if src.labels.is_dir():
        for f in src.labels.iterdir():
            if f.is_file() and f.suffix != ".cache":
                shutil.copyfile(f, lbl_dst / f.name)
    shutil.copyfile(src.yaml, dst_root / src.yaml.name)
    return DatasetCopy(src.name, img_dst, src.names, n, src.channels)


# -- building loaders --------------------------------------------------------------------------------
def build_loader(libs: Libs, lib: str, ds: DatasetCopy, mode: str, workers: int, hyp: dict):
    """(loader, dataset) as the library's own training (mode 'train') or validation ('val') code makes it,
    for the task ``libs`` was imported for (segment: masks 1/MASK_RATIO of the image side, overlapping)."""
    train = mode == "train"
    batch = TRAIN_BATCH if train else VAL_BATCH
    segment = libs.task == "segment"
    if lib in ("yolo_data", "yolo_data_4dec", "yolo_data_cv2", "yolov5"):
        ours = lib.startswith("yolo_data")
        kw = dict(single_cls=False, cache=IMAGE_CACHE["mode"], rank=-1, workers=workers, image_weights=False, quad=False,
                  seed=0)
        if segment:  # YOLOv5-seg's signature, in yolo_data.integrations.yolov5_segment too
            kw.update(mask_downsample_ratio=MASK_RATIO, overlap_mask=True)
        if ours:
            kw.update(batch_partners=lib != "yolo_data_4dec")  # 4dec: partners from the whole dataset, as YOLOv5
            if ds.channels != 3:  # given an image folder, not the yaml: its channels are said here
                kw.update(channels=ds.channels)
        elif ds.channels != 3:
            raise ValueError(f"YOLOv5 reads 3-channel images only ({ds.name} has {ds.channels})")
        if train:
            kw.update(hyp=str(HYP_FILE) if ours else dict(hyp), augment=True, pad=0.0, rect=False,
                      shuffle=True, prefix="train: ")
        else:
            kw.update(hyp=None, augment=False, pad=0.5, rect=True, shuffle=False, prefix="val: ")
        create = libs.yd_create if ours else libs.v5_create
        return create(str(ds.images), IMGSZ, batch, STRIDE, **kw)
    # ultralytics: the trainer's build_dataset + get_dataloader, without the trainer
    import torch
    overrides = dict(task=libs.task, mode="train", imgsz=IMGSZ, batch=batch, workers=workers, cache=IMAGE_CACHE["mode"],
                     rect=not train, single_cls=False, fraction=1.0, close_mosaic=0, cutmix=0.0, bgr=0.0,
                     copy_paste_mode="flip", classes=None)
    overrides.update({k: hyp[k] for k in AUG_KEYS})
    if segment:
        overrides.update(mask_ratio=MASK_RATIO, overlap_mask=True)
    cfg = libs.ul_get_cfg(libs.ul_default_cfg, overrides)
    data = {"names": dict(ds.names), "nc": len(ds.names), "channels": ds.channels, "path": str(ds.images.parents[1])}
    dataset = libs.ul_build_dataset(cfg, str(ds.images), batch, data, mode="train" if train else "val",
                                    rect=not train, stride=STRIDE)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = libs.ul_build_loader(dataset, batch, workers, shuffle=train, rank=-1, device=device)
    return loader, dataset


def batch_size_of(batch) -> int:
    return int(batch["img"].shape[0]) if isinstance(batch, dict) else int(batch[0].shape[0])


def epochs(loader):
    """Batches as a training loop takes them: one ``for batch in loader`` pass per epoch, forever."""
    while True:
        got = False
        for b in loader:
            got = True
            yield b
        if not got:
            raise RuntimeError("loader yielded no batch")


@dataclass
class Measurement:
    ips: float
    first_batch_s: float
    decodes_per_img: float
    images: int
    seconds: float
    cpu_ms_per_img: float = float("nan")


def measure(libs: Libs, lib: str, ds: DatasetCopy, mode: str, workers: int, hyp: dict, images: int,
            warmup: int, counter, verbose: bool) -> Measurement:
    gc.collect()
    if lib.startswith("yolo_data"):  # workers fork after this, and inherit it
        from yolo_data.images import decode
        decode.use_simplejpeg(lib != "yolo_data_cv2")
    t0 = time.perf_counter()
    with library_output(verbose):
        loader, dataset = build_loader(libs, lib, ds, mode, workers, hyp)
    it = epochs(loader)
    try:
        next(it)
        first = time.perf_counter() - t0
        # with W workers the first W batches arrive together (all workers start at once), so the
        # warm-up takes at least W batches: the timed window then starts in the steady state
        for _ in range(max(warmup, workers, 1) - 1):
            next(it)
        counter.reset()
        cpu0 = common.tree_cpu_seconds()
        n, t0 = 0, time.perf_counter()
        while n < images:
            n += batch_size_of(next(it))
        dt = time.perf_counter() - t0
        cpu1 = common.tree_cpu_seconds()
        decodes = counter.get()
        # CPU time is what the host's noise (time the VM is not scheduled) does not change
        cpu_ms = sum(cpu1[pid] - cpu0.get(pid, 0.0) for pid in cpu1) / n * 1e3
    finally:
        it.close()
        shutdown(loader)
        del it, loader, dataset
        gc.collect()
        left = wait_for_children()
        if left:
            log(f"warning: {left} leftover child process(es) after {lib} {mode} workers={workers}; terminated")
    return Measurement(n / dt, first, decodes / n if decodes >= 0 else float("nan"), n, dt, cpu_ms)


# -- report -------------------------------------------------------------------------------------------
def machine_line(libs: Libs) -> str:
    import cv2
    import numpy as np
    import torch
    return (f"{platform.system()} {platform.machine()}, {common.cpu_model()}, {os.cpu_count()} cores, "
            f"{common.mem_total()} RAM, "
            f"Python {platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"cv2 {cv2.__version__} (cv2 threads {cv2.getNumThreads()}), numpy {np.__version__}; "
            + ", ".join(f"{k} {v}" for k, v in libs.versions.items()))


def fmt_cell(vals: List[float]) -> str:
    return common.fmt_range(vals, 1)


def ratio(a: List[float], b: List[float]) -> str:
    if not a or not b:
        return "n/a"
    return f"{statistics.median(a) / statistics.median(b):.2f}×"


def report(results: Dict[Tuple[str, str], Dict[str, List[Measurement]]], errors: List[str], libs_used,
           args, machine: str, loads: Tuple[str, str], sources: List[Source], n_images: Dict[str, int]) -> None:
    task = TASK_WORDS[args.task]
    print(f"### Training dataloader throughput, {task} (img/s, higher is better)\n")
    print(f"**Machine:** {machine}  ")
    print(f"Load average (1/5/15 min) at start {loads[0]}, at end {loads[1]}.  ")
    val = "" if args.no_val else (f"  **Val loader:** augment off, rect, pad 0.5, batch {VAL_BATCH}, "
                                  f"{args.val_workers} workers, no shuffle, same (train) images.")
    masks = (f", masks 1/{MASK_RATIO} of the image side, overlap_mask (one mask per image)"
             if args.task == "segment" else "")
    print(f"**Task:** {args.task} ({LOADER_WORDS[args.task]}){masks}.  ")
    print(f"**Train loader:** augment, hyp.scratch-low (mosaic 1.0, mixup 0, copy-paste 0), imgsz {IMGSZ}, "
          f"batch {TRAIN_BATCH}, shuffle, image cache {IMAGE_CACHE['mode'] or 'none'}, rect False.{val}  ")
    print(f"Each measurement: fresh dataset + loader, max({args.warmup}, workers) warm-up batches untimed, then "
          f"≥{args.images} "
          f"images timed; {args.repeats} rounds with the libraries alternating (order rotated each round); "
          "cells are median (min–max) img/s.  ")
    print("Datasets: " + ", ".join(f"{s.name} ({n_images[s.name]} images)" for s in sources) + ".\n")
    peers = [l for l in libs_used if l != "yolo_data"]
    head = ["dataset", "loader"] + list(libs_used)
    if "yolo_data" in libs_used:
        head += [f"yolo_data / {p}" for p in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for (ds, cfg), per_lib in results.items():
        ips = {l: [m.ips for m in per_lib.get(l, [])] for l in libs_used}
        row = [ds, cfg] + [fmt_cell(ips[l]) for l in libs_used]
        if "yolo_data" in libs_used:
            row += [ratio(ips["yolo_data"], ips[p]) for p in peers]
        print("| " + " | ".join(row) + " |")
    print("\nDecodes per image (cv2.imread/imdecode and simplejpeg calls in the timed window ÷ images; "
          "approximate) and time to first batch (build dataset + loader from the label cache, start workers, "
          "first batch; median s):\n")
    head = ["dataset", "loader"] + [f"{l} decodes/img" for l in libs_used] + [f"{l} first batch s" for l in libs_used]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for (ds, cfg), per_lib in results.items():
        dec, first = [], []
        for l in libs_used:
            ms = per_lib.get(l, [])
            d = [m.decodes_per_img for m in ms if m.decodes_per_img == m.decodes_per_img]
            dec.append(f"{statistics.median(d):.2f}" if d else "n/a")
            first.append(f"{statistics.median([m.first_batch_s for m in ms]):.2f}" if ms else "n/a")
        print("| " + " | ".join([ds, cfg] + dec + first) + " |")
    print("\nCPU time per image (ms, user + system of the main process and its workers during the timed "
          "window; median): on a shared host, time the VM is not scheduled lowers img/s but not this.  "
          "Lower is better; the ratio is peer / yolo_data:\n")
    head = ["dataset", "loader"] + [f"{l} CPU ms/img" for l in libs_used]
    if "yolo_data" in libs_used:
        head += [f"{p} / yolo_data" for p in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for (ds, cfg), per_lib in results.items():
        cpu = {l: [m.cpu_ms_per_img for m in per_lib.get(l, []) if m.cpu_ms_per_img == m.cpu_ms_per_img]
               for l in libs_used}
        row = [ds, cfg] + [f"{statistics.median(cpu[l]):.2f}" if cpu[l] else "n/a" for l in libs_used]
        if "yolo_data" in libs_used:
            row += [ratio(cpu[p], cpu["yolo_data"]) for p in peers]
        print("| " + " | ".join(row) + " |")
    if "yolov5" in libs_used and any(s.channels != 3 for s in sources):
        print("\nYOLOv5 7.0 decodes every image as 3-channel colour: datasets of other channels are not measured "
              "for it (n/a).")
    if any(s.channels != 3 for s in sources):
        print("\nDatasets of other channels (their yaml's `channels`): "
              + ", ".join(f"{s.name} {s.channels}" for s in sources if s.channels != 3)
              + "; HSV applies to 3-channel images only (as Ultralytics), so their training items have no colour "
                "augmentation.")
    if "ultralytics" in libs_used:
        print("\nUltralytics keeps the last min(n, 8 × batch, 1000) images each process loaded in RAM (even with "
              "cache=False) and takes the 3 other mosaic tiles from them, so it decodes about 1 image per sample "
              "where YOLOv5 decodes 4, and its batches depend on the number of workers; on a dataset that small "
              "(coco128: 128 images) the buffer ends up holding every image, and later epochs decode almost "
              "nothing. yolo_data (default) draws mosaic partners from the batch's own images, each decoded once "
              "per batch, reproducibly for any worker count; yolo_data_4dec is yolo_data with "
              "batch_partners=False (partners from the whole dataset, 4 decodes per sample, as YOLOv5)"
              + ("; yolo_data_cv2 is yolo_data with every image decoded by OpenCV (no simplejpeg)"
                 if "yolo_data_cv2" in libs_used else "") + ".")
    common.report_end(errors)


# -- main ----------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=TASKS, default="detect",
                   help="which training loaders: detect (default) or segment (YOLOv5-seg's create_dataloader, "
                        "Ultralytics' task='segment'; masks 1/4, overlap_mask)")
    p.add_argument("--datasets", nargs="+", default=None,
                   help="'synthetic' (generated set; polygon labels with --task segment) and/or folder names under "
                        "--root (default: coco128 synthetic; segment: coco128-seg; none with --data)")
    p.add_argument("--data", nargs="+", type=Path, default=[], help="dataset yamls to measure too (their train split)")
    p.add_argument("--root", type=Path, default=None,
                   help="folder holding coco128 etc., only read (default $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    p.add_argument("--synthetic-n", type=int, default=2000, help="images in the generated set (default 2000)")
    p.add_argument("--synthetic-objects", type=int, nargs=2, default=None, metavar=("MIN", "MAX"),
                   help="objects per generated image (default 1 15; e.g. 20 60 for dense segmentation scenes)")
    p.add_argument("--synthetic-root", type=Path, default=None,
                   help="where generated sets are kept (default $YOLO_DATA_BENCH_SYNTHETIC or <temp>/yolo_data_bench)")
    p.add_argument("--workers", type=int, nargs="+", default=[2, 0], help="training loader workers (default: 2 0)")
    p.add_argument("--images", type=int, default=320, help="images timed per measurement (default 320)")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed batches before timing, at least the number of workers (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="rounds; medians are over these (default 3)")
    p.add_argument("--libraries", nargs="+", default=[lib for lib in LIBS if lib != "yolo_data_cv2"], choices=LIBS)
    p.add_argument("--val-workers", type=int, default=2, help="workers of the validation-style loader (default 2)")
    p.add_argument("--no-val", action="store_true", help="skip the validation-style loader")
    p.add_argument("--no-count-decodes", action="store_true", help="do not wrap the decoders")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: coco128 (segment: coco128-seg) only, 64 images, 1 round (overrides those "
                        "options)")
    p.add_argument("--verbose", action="store_true", help="show what the libraries print")
    p.add_argument("--channels", type=int, nargs="+", default=[],
                   help="also measure each dataset's copies of these channels (1: grayscale JPEGs, N > 1: N-page "
                        "TIFFs made from its colours; benchmarks/generators/make_channels.py), beside the original")
    p.add_argument("--cache", choices=["none", "ram"], default="none",
                   help="image cache for every library (ram: yolo_data shares one copy per node)")
    common.add_result_options(p)
    args = p.parse_args(argv)
    real = "coco128-seg" if args.task == "segment" else "coco128"
    if args.datasets is None:
        args.datasets = [] if args.data else [real] + (["synthetic"] if args.task == "detect" else [])
    if args.quick:
        args.datasets, args.images, args.repeats = [real], 64, 1
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    IMAGE_CACHE["mode"] = "ram" if args.cache == "ram" else False
    common.require("bench_train.py", *(PEERS[lib] for lib in args.libraries if lib in PEERS))
    t_start = time.perf_counter()
    loads = [common.load_average()]
    tmp = Path(tempfile.mkdtemp(prefix="bench_train_"))
    counter = NoCounter()
    try:
        isolate_environment(tmp, "bench_train")
        import yaml
        with library_output(args.verbose):
            libs = import_libraries(args.libraries, args.task)
        hyp = yaml.safe_load(HYP_FILE.read_text(encoding="utf-8"))
        machine = machine_line(libs)
        sources = resolve_sources(args.datasets, args.root, args.synthetic_n, args.synthetic_root, args.data,
                                  args.task, args.synthetic_objects)
        if args.channels:
            sources = with_channels(sources, args.channels, tmp / "channels")
        copies: Dict[Tuple[str, str], DatasetCopy] = {}
        errors: List[str] = []
        n_images: Dict[str, int] = {}
        for src in sources:
            for lib in args.libraries:
                if lib == "yolov5" and src.channels != 3:
                    continue  # YOLOv5 7.0 decodes every image as colour: not measured (said in the report)
                c = copies[(src.name, lib)] = copy_for(src, tmp / "data" / lib / src.name)
                n_images[src.name] = c.n_images
                warm_page_cache(c.images)
                t0 = time.perf_counter()  # priming: write each library's label cache (untimed)
                try:
                    with library_output(args.verbose):
                        loader, _ = build_loader(libs, lib, c, "train", 0, hyp)
                    shutdown(loader)
                    del loader
                except Exception as e:
                    errors.append(f"{lib} on {src.name}: building the loader failed: {type(e).__name__}: {e}")
                log(f"prepared {src.name} for {lib} ({c.n_images} images, label cache in "
                    f"{time.perf_counter() - t0:.1f} s, {'linked' if src.link else 'copied'} images)")
        gc.collect()
        if not args.no_count_decodes:
            counter = DecodeCounter()

        plan = [(src, "train", w) for src in sources for w in args.workers]
        if not args.no_val:
            plan += [(src, "val", args.val_workers) for src in sources]
        results: Dict[Tuple[str, str], Dict[str, List[Measurement]]] = {}
        failed = set()
        for src, mode, workers in plan:
            cfg = (f"train, workers {workers}" if mode == "train"
                   else f"val (rect, pad 0.5, b{VAL_BATCH}), workers {workers}")
            per_lib = results.setdefault((src.name, cfg), {})
            for r in range(args.repeats):
                order = args.libraries[r % len(args.libraries):] + args.libraries[:r % len(args.libraries)]
                for lib in order:
                    if (src.name, lib) in failed or (src.name, lib) not in copies:
                        continue
                    try:
                        m = measure(libs, lib, copies[(src.name, lib)], mode, workers, hyp, args.images,
                                    args.warmup, counter, args.verbose)
                    except Exception as e:
                        errors.append(f"{lib} on {src.name} ({cfg}): {type(e).__name__}: {e}")
                        log(f"ERROR {errors[-1]}")
                        if mode == "train":
                            failed.add((src.name, lib))
                        continue
                    per_lib.setdefault(lib, []).append(m)
                    dec = "" if m.decodes_per_img != m.decodes_per_img else f", {m.decodes_per_img:.2f} decodes/img"
                    log(f"[{time.perf_counter() - t_start:6.0f} s] {src.name:>13} {cfg:<36} round {r + 1} "
                        f"{lib:<11} {m.ips:7.1f} img/s ({m.images} img in {m.seconds:.2f} s, first batch "
                        f"{m.first_batch_s:.2f} s{dec})")
        counter.uninstall()
        loads.append(common.load_average())
        report(results, errors, args.libraries, args, machine, (loads[0], loads[1]), sources, n_images)
        rows = []
        for (ds, cfg), per_lib in results.items():
            runs = {lib: [asdict(m) for m in ms] for lib, ms in per_lib.items()}
            rows.append({"dataset": ds, "loader": cfg, "runs": runs,
                         "medians": {lib: common.medians(r) for lib, r in runs.items()}})
        common.write_result("train", {"images": n_images, "library_versions": libs.versions, "errors": errors,
                                      "rows": rows}, args, task=args.task, datasets=[s.name for s in sources])
        log(f"total {time.perf_counter() - t_start:.0f} s")
        return 1 if errors else 0
    finally:
        counter.uninstall()
        wait_for_children(5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
