"""Benchmark yolo_data's label scan (no cache) against reloading the label cache.

    python benchmarks/speed/run.py scan-steps [--n 2000] [--repeats 5] [--data DIR] [--cold] [--stages] [--profile]

Without ``--data`` a synthetic COCO-like set (benchmarks/generators/make_synthetic.py) of ``--n`` images is used;
it is generated once under ``--root`` ($YOLO_DATA_BENCH_SYNTHETIC, default yolo_data_bench in the system
temp folder) and reused by later runs with the same settings.

Each repeat times, in this order (alternating, so drift and background load hit both alike):

* scan:   ``load_split(images, nc, force=True)``: list files, fingerprint, verify every pair in a
          process pool, build the store, write the cache (what a first training run pays);
* reload: ``load_split(images, nc)`` in a fresh call: list files, fingerprint, read and check the cache.

The output is a paste-ready markdown report: environment, a table of median/min/max, the scan rate,
the cache file's size, the split's counts and whether the files were in the page cache.

Page cache: dropping it for the whole system needs root.  ``--cold`` instead asks the kernel to evict
this dataset's own file pages before every measurement (``posix_fadvise(DONTNEED)`` after ``fsync``,
no root needed); inodes and directory entries stay cached, and a virtual disk may still be served
from the host's cache, so "cold" here can still be warmer than a real first read.  Residency is
measured with ``mincore`` and reported either way.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import multiprocessing as mp
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import PageCache, cpu_model, timed  # noqa: E402

import numpy as np  # noqa: E402

import yolo_data  # noqa: E402
from yolo_data.labels import cache  # noqa: E402
from yolo_data.labels.verify import verify_pair  # noqa: E402
from yolo_data.labels.scan import default_workers, scan_pairs  # noqa: E402
from yolo_data.formats.datayaml import load_dataset_yaml  # noqa: E402
from yolo_data.formats.sources import default_cache_file, img2label_path, list_image_files  # noqa: E402
from yolo_data.labels.loadorscan import _counts  # noqa: E402
from yolo_data.labels.split import load_split  # noqa: E402
from yolo_data.labels.store import LabelStore  # noqa: E402

import make_synthetic  # noqa: E402


# -- dataset ----------------------------------------------------------------------------------------
def synthetic_dataset(n: int, seed: int, size: int, quality: int, root=None) -> Path:
    """The data.yaml of a generated set under ``root``, generating it only if it is not there yet."""
    return common.synthetic_set(n, seed, size, quality, root, say=lambda msg: print(f"<!-- {msg} -->", flush=True))


def resolve_images(data: str) -> Tuple[str, Optional[int]]:
    """(image folder or list, nc) from a data.yaml (its train split), a dataset root holding
    images/train, or an image folder / .txt list."""
    p = Path(data)
    if p.suffix.lower() in (".yaml", ".yml"):
        spec = load_dataset_yaml(p)
        train = spec.splits["train"]
        return (train[0] if len(train) == 1 else train), (spec.nc or None)
    if (p / "data.yaml").is_file():
        return resolve_images(str(p / "data.yaml"))
    if (p / "images" / "train").is_dir():
        return str(p / "images" / "train"), None
    return str(p), None


# -- measurements -----------------------------------------------------------------------------------
def run_pairs(images, nc, repeats: int, warmup: int, workers: Optional[int], files: List[str],
              cache_file: Path, pc: PageCache, cold: bool) -> Dict[str, list]:
    """Alternate scan and reload ``warmup + repeats`` times; keep the last ``repeats`` of each."""
    out = {"scan": [], "reload": [], "resident_scan": [], "resident_reload": [], "last_scan": None,
           "last_reload": None}
    for i in range(warmup + repeats):
        keep = i >= warmup
        if cold:
            pc.evict(files + [str(cache_file)])
        res_before = pc.resident(files)
        t, scan = timed(lambda: load_split(images, nc=nc, workers=workers, force=True))
        assert scan.built and scan.cache_file == cache_file, (scan.built, scan.cache_file)
        if keep:
            out["scan"].append(t)
            out["resident_scan"].append(res_before)
            out["last_scan"] = scan
        if cold:
            pc.evict(files + [str(cache_file)])
        res_before = pc.resident(files)
        t, reload = timed(lambda: load_split(images, nc=nc, workers=workers))
        assert not reload.built and reload.cache_file == cache_file, (reload.built, reload.cache_file)
        if keep:
            out["reload"].append(t)
            out["resident_reload"].append(res_before)
            out["last_reload"] = reload
    return out


def run_stages(images, nc, repeats: int, workers: Optional[int], cache_file: Path) -> Dict[str, List[float]]:
    """Time the scan's steps one by one, as load_split runs them (same functions, same order)."""
    times: Dict[str, List[float]] = {}

    def add(name, t):
        times.setdefault(name, []).append(t)

    for _ in range(repeats):
        t, im_files = timed(lambda: list_image_files(images))
        add("list image files (os.walk + sort)", t)
        t, lb_files = timed(lambda: [img2label_path(f) for f in im_files])
        add("image -> label paths", t)
        t, fp = timed(lambda: cache.fingerprint(im_files, lb_files, nc))
        add("fingerprint (os.stat + os.path.isdir per file, sha256)", t)
        t, records = timed(lambda: scan_pairs(im_files, lb_files, nc, workers=workers))
        add(f"verify pairs ({workers or default_workers()} processes)", t)
        t, store = timed(lambda: LabelStore.from_records(records))
        add("LabelStore.from_records", t)
        counts = _counts(records, store)
        problems = [p for r in records for p in r.problems]
        contents = cache.CacheContents(store, fp, counts, problems)
        t, _ = timed(lambda: cache._layout(contents, cache._arrays(contents)))
        add("cache layout (`cache._layout`: header JSON + offsets)", t)
        t, _ = timed(lambda: cache.save(cache_file, contents))
        add("cache save (layout + write + CRC-32 + fsync + rename)", t)
        t, _ = timed(lambda: cache.load(cache_file))
        add("cache load (map + checks + CRC-32 + validate)", t)
    return times


def profile_serial(images, nc, top: int = 10) -> str:
    """cProfile of a serial scan (the pool's workers are invisible to a profiler in the parent).

    Runs the steps of load_split with every pair verified in this process, so the profile shows the
    real per-pair costs; returns the top functions by own time and by cumulative time.
    """
    def serial():
        im_files = list_image_files(images)
        lb_files = [img2label_path(f) for f in im_files]
        fp = cache.fingerprint(im_files, lb_files, nc)
        records = [verify_pair(i, l, nc) for i, l in zip(im_files, lb_files)]
        store = LabelStore.from_records(records)
        with tempfile.TemporaryDirectory(prefix="bench_scan_profile_") as tmp:
            cache.save(Path(tmp) / "profile.cache", cache.CacheContents(store, fp, _counts(records, store), []))

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.runcall(serial)
    wall = time.perf_counter() - t0
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    buf.write(f"serial scan under cProfile: {wall:.2f} s wall (profiler overhead included)\n")
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


# -- report -----------------------------------------------------------------------------------------
def _versions() -> str:
    parts = [f"yolo_data {yolo_data.__version__}", f"numpy {np.__version__}"]
    for mod in ("PIL", "yaml"):
        with contextlib.suppress(Exception):
            m = __import__(mod)
            parts.append(f"{'Pillow' if mod == 'PIL' else 'PyYAML'} {m.__version__}")
    return ", ".join(parts)


def _fs_type(path: Path) -> str:
    """Filesystem type of ``path`` from /proc/mounts (longest matching mount point)."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError):
        real = str(path.resolve())
        for line in open("/proc/mounts", encoding="utf-8"):
            dev, mnt, fs = line.split()[:3]
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, kind = mnt, f"{fs} on {dev}"
    return kind


def _mem_gb() -> str:
    return common.mem_total().replace("GiB", "GB")


def _burn(loops: int) -> float:
    """Seconds a fixed pure-Python loop takes (one unit of single-core work)."""
    t0 = time.perf_counter()
    s = 0
    for i in range(loops):
        s += i
    return time.perf_counter() - t0


def cpu_scaling(procs: int, loops: int = 5_000_000) -> Optional[float]:
    """Speed-up of ``procs`` parallel copies of a CPU-bound loop over one copy, measured now.

    A shared or throttled machine can advertise 2 cores and deliver one; this says how much parallel
    work the scan's pool could actually get during the benchmark (ideal: ``procs``).
    """
    if procs < 2 or not sys.platform.startswith("linux"):
        return None
    one = _burn(loops)
    with mp.get_context("fork").Pool(procs) as pool:
        t0 = time.perf_counter()
        pool.map(_burn, [loops] * procs)
        many = time.perf_counter() - t0
    return procs * one / many


def _cpu_pressure() -> str:
    """Linux PSI: share of recent time some runnable task waited for a CPU (other load, throttling)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        line = open("/proc/pressure/cpu", encoding="utf-8").readline().split()
        vals = dict(kv.split("=") for kv in line[1:4])
        return f"{float(vals['avg10']):.0f}% / {float(vals['avg60']):.0f}% (10 s / 60 s)"
    return "unknown"


def environment(images, load_before: Tuple[float, ...], workers: Optional[int]) -> List[Tuple[str, str]]:
    usable = common.usable_cores()
    rows = [
        ("CPU", f"{cpu_model()}, {os.cpu_count()} logical cores ({usable} usable)"),
        ("RAM", _mem_gb()),
        ("OS", platform.platform()),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("Packages", _versions()),
        ("Data", f"{images} ({_fs_type(Path(images if isinstance(images, str) else images[0]))})"),
        ("Load average before", " / ".join(f"{x:.2f}" for x in load_before) + " (1 / 5 / 15 min)"),
        ("CPU pressure before", _cpu_pressure() + " of time some task waited for a CPU"),
    ]
    procs = workers or default_workers()
    scale = cpu_scaling(procs)
    if scale is not None:
        rows.append(("Parallel CPU check",
                     f"{procs} busy processes run {scale:.2f}x one (ideal {procs:.2f}x)"))
    return rows


def _fmt_s(t: float) -> str:
    return f"{t * 1000:.1f} ms" if t < 1 else f"{t:.3f} s"


def _residency_note(values: List[Optional[float]]) -> str:
    return common.fmt_share(values, dash="-")


def report(args, images, nc, env, res, stages, cache_file: Path, gen_stats: dict,
           load_after: Tuple[float, ...]) -> str:
    """The markdown report."""
    scan, reload = res["last_scan"], res["last_reload"]
    n = scan.counts["found"]
    lines = [f"### yolo_data label scan: {n} images, {args.repeats} repeats"
             f"{' (cold: file pages evicted before each run)' if args.cold else ''}", "",
             "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in env]
    lines += [f"| Load average after | {' / '.join(f'{x:.2f}' for x in load_after)} |",
              f"| CPU pressure after | {_cpu_pressure()} |"]
    if gen_stats:
        lines.append(f"| Dataset | synthetic COCO-like, {gen_stats['images']} JPEGs, mean "
                     f"{gen_stats['mean_kb']:.0f} KB ({gen_stats['bytes'] / 1e6:.0f} MB), "
                     f"{gen_stats['size']} px, q{gen_stats['quality']}, seed {gen_stats['seed']} |")
    lines += ["", "| measurement | median | min | max | images/s (median) | page cache before |",
              "|---|---:|---:|---:|---:|---:|"]
    workers = args.workers or default_workers()
    for key, label in (("scan", f"scan, `force=True`, workers={workers} (writes cache)"),
                       ("reload", "reload, fresh `load_split` (reads cache)")):
        ts = res[key]
        med = statistics.median(ts)
        lines.append(f"| {label} | {_fmt_s(med)} | {_fmt_s(min(ts))} | {_fmt_s(max(ts))} | "
                     f"{n / med:,.0f} | {_residency_note(res['resident_' + key])} |")
    ratio = statistics.median(res["scan"]) / statistics.median(res["reload"])
    c = scan.counts
    lines += ["",
              f"- reload is {ratio:.0f}x faster than a scan; warm-up pairs run first and not counted: "
              f"{args.warmup}",
              f"- cache file: `{cache_file.name}`, {cache_file.stat().st_size / 1024:.1f} KB "
              f"({cache_file.stat().st_size / n:.0f} B/image)",
              f"- counts: found {c['found']}, ok {c['ok']}, missing {c['missing']}, empty {c['empty']}, "
              f"corrupt {c['corrupt']}, boxes {c['boxes']}, backgrounds {c['backgrounds']}, "
              f"warnings {c['warnings']}" + ("" if reload.counts == c else " (reload counts DIFFER)"),
              f"- page cache: {'warm' if not args.cold else 'evicted per run'}; share of image+label "
              "pages resident before each run shown above (mincore). Root is needed to drop all caches; "
              "inodes/dentries stay cached in any case."]
    if stages:
        lines += ["", "| scan step (same calls as load_split) | median | min | max |", "|---|---:|---:|---:|"]
        for name, ts in stages.items():
            lines.append(f"| {name} | {_fmt_s(statistics.median(ts))} | {_fmt_s(min(ts))} "
                         f"| {_fmt_s(max(ts))} |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="data.yaml, dataset root (images/train) or image folder; "
                                  "default: a generated synthetic set")
    p.add_argument("--n", type=int, default=2000, help="synthetic images (default 2000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=640)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--root", type=Path, default=None,
                   help="where generated sets are kept (default $YOLO_DATA_BENCH_SYNTHETIC or <temp>/yolo_data_bench)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="uncounted scan+reload pairs first (default 1)")
    p.add_argument("--workers", type=int, default=None, help="scan processes (default: all cores)")
    p.add_argument("--cold", action="store_true", help="evict the dataset's file pages before each run")
    p.add_argument("--stages", action="store_true", help="also time the scan's steps separately")
    p.add_argument("--profile", action="store_true", help="also print a cProfile top-10 of a serial scan")
    common.add_result_options(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    gen_stats = {}
    if args.data:
        images, nc = resolve_images(args.data)
    else:
        yaml_path = synthetic_dataset(args.n, args.seed, args.size, args.quality, args.root)
        gen_stats = make_synthetic.dataset_settings(yaml_path.parent)
        images, nc = resolve_images(str(yaml_path))
    im_files = list_image_files(images)
    lb_files = [img2label_path(f) for f in im_files]
    cache_file = default_cache_file(images, lb_files[0])
    pc = PageCache()
    load_before = os.getloadavg()
    env = environment(images, load_before, args.workers)
    res = run_pairs(images, nc, args.repeats, args.warmup, args.workers, im_files + lb_files,
                    cache_file, pc, args.cold)
    stages = run_stages(images, nc, args.repeats, args.workers, cache_file) if args.stages else None
    print(report(args, images, nc, env, res, stages, cache_file, gen_stats, os.getloadavg()))
    if args.profile:
        print("\n```\n" + profile_serial(images, nc).rstrip() + "\n```")
    print("\n" + common.footer())
    n = res["last_scan"].counts["found"]
    results = {"images": n, "workers": args.workers or default_workers(), "counts": res["last_scan"].counts,
               "cache_file_bytes": cache_file.stat().st_size, "stages_s": stages}
    for key in ("scan", "reload"):
        results[key] = {"seconds": res[key], "median_s": statistics.median(res[key]),
                        "images_per_s_median": n / statistics.median(res[key]),
                        "page_cache_resident_before": res["resident_" + key]}
    common.write_result("scan-steps", results, args,
                        datasets=[Path(images).parents[1].name if args.data else f"synthetic{args.n}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
