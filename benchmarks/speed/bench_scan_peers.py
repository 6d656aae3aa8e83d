"""Label scan from scratch and cache reload: yolo_data against YOLOv5 7.0 and Ultralytics 8.x.

    python benchmarks/speed/run.py scan                  # 10,000 images, 3 rounds (benchmark environment)
    python benchmarks/speed/run.py scan --copies 1 --repeats 1   # a quick run (2,000)
    python benchmarks/speed/run.py scan --peer-threads 2 --profile
    python benchmarks/speed/run.py scan --libs yolo_data yolo_data_w1   # any environment with yolo_data

Data: the generated COCO-like set (benchmarks/generators/make_synthetic.py, 2,000 JPEGs of 147 KB, 640 px; kept in
$YOLO_DATA_BENCH_SYNTHETIC or yolo_data_bench in the system temp folder, and generated there when
missing; ``--source`` names another) is turned
into a ``--copies`` x 2,000 image split: every image is hard-linked ``--copies`` times under new names
(``c{k}_<name>.jpg``) and its label file copied beside each link.  Each library gets its own such
folder, because YOLOv5 and Ultralytics both write ``labels/train.cache``.  Hard links are safe here: the files are our
own generated ones (never the shared datasets) and none of them is a damaged JPEG a peer would rewrite.
Every file is read once before measuring, so all libraries start from the same warm page cache.

What is timed, per library, in alternating rounds (the order rotates each round, so drift and
background load hit all alike); reported as median (min-max) over ``--repeats`` rounds:

* scan: the label cache file is deleted, then
  - yolo_data: ``load_split(images, nc=80, force=True)``: list files, fingerprint (stat of every
    file), verify every pair in ``--yd-workers`` processes (default: all usable cores), build the
    LabelStore, write the cache;
  - yolo_data_w1: the same with ``workers=1`` (one process: a per-core comparison);
  - YOLOv5: ``LoadImagesAndLabels(images, augment=False)`` (as ``create_dataloader`` builds it, with
    workers > 0): glob, ``get_hash``, ``cache_labels`` = ``verify_image_label`` for every pair in a
    ``Pool(NUM_THREADS)``, ``np.save`` of the pickled dict, then the dataset's own set-up;
  - Ultralytics: ``YOLODataset(images, augment=False, data=..., task="detect")``: glob,
    ``check_file_speeds``, ``cache_labels`` (``verify_image_label`` in a ``ThreadPool(NUM_THREADS)``),
    ``get_hash``, ``np.save``, then the dataset's set-up (labels update, transforms).
  The peers' times therefore include a few ms of dataset set-up that yolo_data's ``load_split`` does
  not do; their reload times show how much that is.
* reload: the same call again with the cache in place (yolo_data without ``force``): list files,
  hash/fingerprint, read the cache (yolo_data: checksum + ``np.frombuffer``; peers: unpickle a dict
  holding one NumPy array per image).

Both peers use ``NUM_THREADS = min(8, cpu_count - 1)`` workers, which is 1 on a 2-core machine;
``--peer-threads N`` overrides it (patched into their modules) for an equal-workers comparison.
Importing them also calls ``cv2.setNumThreads(0)`` (no decoding here, so no effect) and Ultralytics
wraps ``PIL.Image.open`` for the whole process (a try/except around the original: negligible, and the
same for all three libraries).

With ``--profile`` (or automatically when yolo_data's scan is not at most half the faster peer's),
the report adds yolo_data's scan steps one by one, the pool's overhead (fork, pickling the records
back, 1 vs N processes against the machine's measured parallel speed-up) and a cProfile of a
single-process scan of ``--profile-n`` images.

Isolation: YOLOv5/Ultralytics settings, matplotlib and yolo_data user caches go into the temporary
folder (set before the imports), YOLO_OFFLINE=1, outgoing network connections are refused.  The
temporary folder is deleted at the end.  Output: paste-ready markdown on stdout, progress on stderr.
"""
from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing as mp
import os
import pickle
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import (cpu_model, ensure_pkg_resources, isolate_environment, library_output, log,  # noqa: E402
                    usable_cores, warm_page_cache)

SPLIT = "train"
NC = 80
ALL_LIBS = ("yolo_data", "yolo_data_w1", "yolov5", "ultralytics")
PEERS = ("yolov5", "ultralytics")


# -- environment: keep the libraries offline and inside the temp folder ----------------------------
@dataclass
class Libs:
    load_split: Callable
    v5_dataset: type
    ul_dataset: type
    ul_hyp: object
    versions: Dict[str, str]
    threads: Dict[str, int]  # workers each peer's cache_labels uses


def import_libraries(peer_threads: Optional[int], want) -> Libs:
    """yolo_data, and of the peers only those in ``want`` (the others' fields stay None)."""
    sys.dont_write_bytecode = True  # leave no __pycache__ in the checkout
    import yolo_data
    from yolo_data.labels.split import load_split
    versions = {"yolo_data": getattr(yolo_data, "__version__", "?") + " (this checkout)"}
    threads: Dict[str, int] = {}
    v5_dataset = ul_dataset = ul_hyp = None
    if "yolov5" in want:
        ensure_pkg_resources()
        import yolov5
        import yolov5.utils.dataloaders as v5_dl
        logging.getLogger("yolov5").setLevel(logging.ERROR)
        if peer_threads:
            v5_dl.NUM_THREADS = peer_threads  # the name its cache_labels reads
        versions["yolov5"], threads["yolov5"] = getattr(yolov5, "__version__", "?"), v5_dl.NUM_THREADS
        v5_dataset = v5_dl.LoadImagesAndLabels
    if "ultralytics" in want:
        import ultralytics
        import ultralytics.data.dataset as ul_ds
        from ultralytics.cfg import DEFAULT_CFG, get_cfg
        logging.getLogger("ultralytics").setLevel(logging.ERROR)
        if peer_threads:
            ul_ds.NUM_THREADS = peer_threads
        versions["ultralytics"], threads["ultralytics"] = ultralytics.__version__, ul_ds.NUM_THREADS
        ul_dataset, ul_hyp = ul_ds.YOLODataset, get_cfg(DEFAULT_CFG)
    return Libs(load_split, v5_dataset, ul_dataset, ul_hyp, versions, threads)


# -- data -------------------------------------------------------------------------------------------
def build_copy(src: Path, dst: Path, copies: int) -> Path:
    """dst/images/train: ``copies`` hard links of every source image; dst/labels/train: their labels.

    Returns the image folder.  Labels are real copies (small, and each library's own).
    """
    src_img, src_lbl = src / "images" / SPLIT, src / "labels" / SPLIT
    img_dst, lbl_dst = dst / "images" / SPLIT, dst / "labels" / SPLIT
    img_dst.mkdir(parents=True)
    lbl_dst.mkdir(parents=True)
    images = sorted(f for f in os.listdir(src_img) if not f.startswith("."))
    for k in range(copies):
        for name in images:
            os.link(src_img / name, img_dst / f"c{k}_{name}")
            label = src_lbl / (name.rsplit(".", 1)[0] + ".txt")
            if label.is_file():
                shutil.copyfile(label, lbl_dst / f"c{k}_{label.name}")
    return img_dst


def cache_file_of(lib: str, images: Path) -> Path:
    """Where ``lib`` keeps this split's cache: labels/train.cache for YOLOv5 and Ultralytics,
    labels/train.yolo_data.cache for yolo_data."""
    suffix = ".yolo_data.cache" if lib.startswith("yolo_data") else ".cache"
    return images.parents[1] / "labels" / f"{images.name}{suffix}"


# -- one measurement ---------------------------------------------------------------------------------
@dataclass
class Outcome:
    images: int
    boxes: int


def construct(libs: Libs, lib: str, images: Path, scan: bool, yd_workers: Optional[int]) -> Outcome:
    """Build ``lib``'s labels for ``images`` once (the caller times this)."""
    if lib.startswith("yolo_data"):
        workers = 1 if lib == "yolo_data_w1" else yd_workers
        res = libs.load_split(str(images), nc=NC, workers=workers, force=scan)
        assert res.built == scan, (lib, res.built)
        return Outcome(len(res.store), res.store.num_boxes())
    if lib == "yolov5":
        ds = libs.v5_dataset(str(images), img_size=640, batch_size=16, augment=False, hyp=None, rect=False,
                             stride=32, pad=0.0, prefix="", workers=8)
        return Outcome(len(ds.im_files), sum(len(lb) for lb in ds.labels))
    data = {"names": {i: str(i) for i in range(NC)}, "nc": NC, "channels": 3, "path": str(images.parents[1])}
    ds = libs.ul_dataset(img_path=str(images), imgsz=640, cache=False, augment=False, hyp=libs.ul_hyp,
                         prefix="", rect=False, batch_size=16, stride=32, pad=0.0, single_cls=False,
                         classes=None, fraction=1.0, data=data, task="detect")
    return Outcome(len(ds.labels), sum(len(lb["cls"]) for lb in ds.labels))


def timed_construct(libs: Libs, lib: str, images: Path, scan: bool, yd_workers, verbose: bool):
    """(seconds, Outcome).  For a scan the cache file is deleted first (outside the timed window)."""
    cfile = cache_file_of(lib, images)
    if scan:
        cfile.unlink(missing_ok=True)
    elif not cfile.is_file():
        raise RuntimeError(f"{lib}: no cache file {cfile} after its scan")
    gc.collect()
    with library_output(verbose):
        t0 = time.perf_counter()
        out = construct(libs, lib, images, scan, yd_workers)
        t = time.perf_counter() - t0
    return t, out


@dataclass
class Series:
    scan: List[float] = field(default_factory=list)
    reload: List[float] = field(default_factory=list)
    outcome: Optional[Outcome] = None
    cache_bytes: int = 0


def run_rounds(libs: Libs, copies: Dict[str, Path], repeats: int, warmup: int, yd_workers,
               verbose: bool) -> Dict[str, Series]:
    """``warmup + repeats`` rounds; each round: every library scans, then reloads.  Order rotates."""
    names = list(copies)
    res = {lib: Series() for lib in names}
    for r in range(warmup + repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for lib in order:
            t_scan, out = timed_construct(libs, lib, copies[lib], True, yd_workers, verbose)
            t_reload, out2 = timed_construct(libs, lib, copies[lib], False, yd_workers, verbose)
            if out2 != out:
                raise RuntimeError(f"{lib}: reload gives {out2}, scan gave {out}")
            tag = "warm-up" if r < warmup else f"round {r - warmup + 1}/{repeats}"
            log(f"{tag} {lib}: scan {t_scan:.2f} s, reload {t_reload:.3f} s ({out.images} images, {out.boxes} boxes)")
            if r >= warmup:
                s = res[lib]
                s.scan.append(t_scan)
                s.reload.append(t_reload)
                s.outcome = out
                s.cache_bytes = cache_file_of(lib, copies[lib]).stat().st_size
    return res


# -- yolo_data diagnosis (profile, pool overhead) --------------------------------------------------
_timed = common.timed


def _noop(x):
    return x


def pool_overhead(images: Path, workers: int) -> List[Tuple[str, str]]:
    """Where the N-process scan loses against N x the single-process one."""
    from bench_scan import cpu_scaling
    from yolo_data.labels.scan import scan_pairs
    from yolo_data.formats.sources import img2label_path, list_image_files
    im_files = list_image_files(str(images))
    lb_files = [img2label_path(f) for f in im_files]
    n = len(im_files)
    t1, recs = _timed(lambda: scan_pairs(im_files, lb_files, NC, workers=1))
    tn, _ = _timed(lambda: scan_pairs(im_files, lb_files, NC, workers=workers))
    t_dump, blob = _timed(lambda: pickle.dumps(recs, pickle.HIGHEST_PROTOCOL))
    t_load, _ = _timed(lambda: pickle.loads(blob))
    size = len(blob)
    recs = blob = None  # free them before the pool test
    t0 = time.perf_counter()
    with mp.get_context("fork").Pool(workers) as pool:
        pool.map(_noop, range(workers))
    t_fork = time.perf_counter() - t0
    scale = cpu_scaling(workers)
    rows = [
        ("verify, 1 process (threads path, no pickling)", f"{t1:.2f} s ({n / t1:,.0f} images/s)"),
        (f"verify, {workers} processes (fork pool)", f"{tn:.2f} s ({n / tn:,.0f} images/s): "
                                                     f"{t1 / tn:.2f}x the single process"),
        ("machine: parallel speed-up of a pure CPU loop now",
         f"{scale:.2f}x with {workers} processes" if scale else "n/a"),
        ("pool start + join (fork, no work)", f"{t_fork * 1000:.0f} ms"),
        ("records sent back: pickle size", f"{size / 1e6:.1f} MB ({size / n:.0f} B/image)"),
        ("records sent back: pickle.dumps (in workers, shared)", f"{t_dump * 1000:.0f} ms"),
        ("records sent back: pickle.loads (in the parent, serial)", f"{t_load * 1000:.0f} ms"),
    ]
    return rows


def profile_report(images: Path, workers: int, profile_n: int) -> str:
    """Scan steps, pool overhead and a cProfile of a single-process scan, as markdown."""
    from bench_scan import profile_serial, run_stages
    from yolo_data.formats.sources import list_image_files
    log("profiling yolo_data's scan ...")
    stages = run_stages(str(images), NC, 1, workers, cache_file_of("yolo_data", images))
    lines = ["", f"#### yolo_data scan steps ({len(os.listdir(images)):,} images, one pass, same calls as "
                 "load_split)", "", "| step | seconds |", "|---|---:|"]
    lines += [f"| {name} | {ts[0]:.3f} |" for name, ts in stages.items()]
    lines += ["", "#### Pool overhead", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in pool_overhead(images, workers)]
    subset = list_image_files(str(images))[:profile_n]
    listing = images.parents[1] / "profile_subset.txt"  # a .txt list: no per-file stat while listing
    listing.write_text("".join(f + "\n" for f in subset), encoding="utf-8")
    lines += ["", f"#### cProfile, single-process scan of {len(subset):,} images", "", "```",
              profile_serial(str(listing), NC, top=15).rstrip(), "```"]
    return "\n".join(lines)


# -- report -----------------------------------------------------------------------------------------
def _load(avg) -> str:
    return " / ".join(f"{x:.2f}" for x in avg) + " (1 / 5 / 15 min)"


def _med(ts: List[float]) -> float:
    return statistics.median(ts)


def _fmt(ts: List[float], digits: int) -> str:
    return common.fmt_range(ts, digits, always=True)


def describe(lib: str, libs: Libs, yd_workers: int) -> str:
    if lib == "yolo_data":
        return f"yolo_data, {yd_workers} processes"
    if lib == "yolo_data_w1":
        return "yolo_data, 1 process"
    kind = "Pool" if lib == "yolov5" else "ThreadPool"
    return f"{lib} {libs.versions[lib]}, {kind}({libs.threads[lib]})"


def report(args, libs: Libs, res: Dict[str, Series], yd_workers: int, load_before, load_after,
           n_images: int) -> Tuple[str, Optional[float]]:
    """(markdown, yolo_data scan / fastest peer scan or None)."""
    lines = [f"### Label scan from scratch and cache reload: {n_images:,} images, "
             f"median (min–max) of {args.repeats} round(s)", "",
             f"Machine: {cpu_model()}, {os.cpu_count()} logical cores ({usable_cores()} usable), "
             f"Python {platform.python_version()}, {platform.platform()}; load average before "
             f"{_load(load_before)}, after {_load(load_after)}.  "
             f"Data: {args.source.name} x {args.copies} (hard links, warm page cache).  "
             f"Versions: " + ", ".join(f"{k} {v}" for k, v in libs.versions.items()) + ".", ""]
    peers = [p for p in PEERS if p in res]
    head = ["library", "scan s", "scan images/s", "reload s", "reload images/s", "cache file"]
    head += [f"scan ratio yolo_data / {p}" for p in peers] + [f"reload ratio yolo_data / {p}" for p in peers]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    for lib, s in res.items():
        row = [describe(lib, libs, yd_workers), _fmt(s.scan, 2), f"{n_images / _med(s.scan):,.0f}",
               _fmt(s.reload, 3), f"{n_images / _med(s.reload):,.0f}", f"{s.cache_bytes / 1e6:.2f} MB"]
        for key in ("scan", "reload"):
            for p in peers:
                row.append(f"{_med(getattr(s, key)) / _med(getattr(res[p], key)):.2f}"
                           if lib.startswith("yolo_data") else "")
        lines.append("| " + " | ".join(row) + " |")
    outcomes = {lib: (s.outcome.images, s.outcome.boxes) for lib, s in res.items()}
    same = len(set(outcomes.values())) == 1
    lines += ["", "Ratios are time ratios of medians (lower is better for yolo_data).  Images and boxes kept: "
              + ("all libraries agree, " + f"{outcomes[next(iter(outcomes))][0]:,} images, "
                 f"{outcomes[next(iter(outcomes))][1]:,} boxes" if same
                 else ", ".join(f"{k} {v}" for k, v in outcomes.items()) + " (DIFFER)") + "."]
    ratio = None
    if "yolo_data" in res and peers:
        fastest = min(peers, key=lambda p: _med(res[p].scan))
        ratio = _med(res["yolo_data"].scan) / _med(res[fastest].scan)
        verdict = "met" if ratio <= 0.5 else "NOT met"
        lines.append(f"Target (yolo_data scan ≤ 0.5 x the faster peer's, {fastest}): {ratio:.2f} x, {verdict}.")
    return "\n".join(lines), ratio


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, default=None,
                   help="generated dataset with images/train and labels/train (default: the 2,000-image set in "
                        "$YOLO_DATA_BENCH_SYNTHETIC or <temp>/yolo_data_bench, generated when missing)")
    p.add_argument("--copies", type=int, default=5, help="links per source image (default 5: 10,000 images)")
    p.add_argument("--repeats", type=int, default=3, help="measured rounds (default 3)")
    p.add_argument("--warmup", type=int, default=0, help="unmeasured rounds first (default 0; the page "
                                                         "cache is warmed by reading every file anyway)")
    p.add_argument("--libs", nargs="+", default=list(ALL_LIBS), choices=ALL_LIBS)
    p.add_argument("--yd-workers", type=int, default=None, help="yolo_data scan processes (default all cores)")
    p.add_argument("--peer-threads", type=int, default=None,
                   help="override the peers' NUM_THREADS (default: their own, min(8, cores - 1))")
    p.add_argument("--profile", action="store_true", help="always add yolo_data's scan profile")
    p.add_argument("--no-profile", action="store_true", help="never add it, even when the target is missed")
    p.add_argument("--profile-n", type=int, default=2000, help="images in the cProfile run (default 2000)")
    p.add_argument("--tmp", type=Path, default=None, help="parent of the temporary folder (default: system tmp)")
    p.add_argument("--verbose", action="store_true", help="show what the libraries print")
    common.add_result_options(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    common.require("bench_scan_peers.py", *(lib for lib in PEERS if lib in args.libs))
    args.source = args.source or common.synthetic_set().parent
    src = args.source.resolve()
    if not (src / "images" / SPLIT).is_dir():
        raise SystemExit(f"{src}/images/{SPLIT} not found; generate it with benchmarks/generators/make_synthetic.py")
    with tempfile.TemporaryDirectory(prefix="bench_scan_peers_", dir=args.tmp) as tmp:
        tmp = Path(tmp)
        if common.is_shared(tmp):
            raise SystemExit("refusing to work inside the shared datasets folder")
        isolate_environment(tmp, "bench_scan_peers")
        with library_output(args.verbose):
            libs = import_libraries(args.peer_threads, args.libs)
        yd_workers = args.yd_workers or usable_cores()
        log(f"building {len(args.libs)} copies of {args.copies} x {src.name} under {tmp} ...")
        copies = {lib: build_copy(src, tmp / lib, args.copies) for lib in args.libs}
        warm_page_cache(src / "images" / SPLIT, *(c for c in copies.values()),
                        *(c.parents[1] / "labels" / SPLIT for c in copies.values()))
        n_images = len(os.listdir(next(iter(copies.values()))))
        load_before = os.getloadavg()
        res = run_rounds(libs, copies, args.repeats, args.warmup, yd_workers, args.verbose)
        load_after = os.getloadavg()
        text, ratio = report(args, libs, res, yd_workers, load_before, load_after, n_images)
        print(text, flush=True)
        if not args.no_profile and (args.profile or (ratio is not None and ratio > 0.5)):
            yd_images = copies.get("yolo_data") or copies.get("yolo_data_w1") or next(iter(copies.values()))
            print(profile_report(yd_images, yd_workers, args.profile_n), flush=True)
    print("\n" + common.footer())
    results = {"images": n_images, "yolo_data_workers": yd_workers, "library_versions": libs.versions,
               "scan_ratio_yolo_data_over_fastest_peer": ratio, "libraries": {}}
    for lib, series in res.items():
        results["libraries"][lib] = {
            "scan_s": series.scan, "scan_median_s": _med(series.scan), "reload_s": series.reload,
            "reload_median_s": _med(series.reload), "cache_file_bytes": series.cache_bytes,
            "images_kept": series.outcome.images if series.outcome else None,
            "boxes_kept": series.outcome.boxes if series.outcome else None}
    common.write_result("scan", results, args, datasets=[f"{src.name}x{args.copies}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
