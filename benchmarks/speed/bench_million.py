#!/usr/bin/env python
"""A million images end to end: yolo_data against YOLOv5 7.0 (PyPI, benchmark environment), same files.

    python benchmarks/speed/run.py million --root ../bench-data/million --images 1000000 \\
        --peer-python .peer-venv/bin/python               # or $YOLO_DATA_PEER_PYTHON; --no-peer: yolo_data only
    python benchmarks/speed/run.py million --root ../bench-data/m300 --images 300 --no-peer --repeats 1 --small-images 0

**Data.** ``--root`` gets one flat COCO-style split, ``images/train2017/000000000000.jpg`` ...
``images/train2017/000000999999.jpg`` and ``labels/train2017/*.txt``: hard links to a few hundred real
photos and their label files (``--sources``, default the coco128 and bccd splits in $YOLO_DATA_BENCH_DATA
or ../shared/datasets: 620
JPEGs, some without labels, i.e. backgrounds), image i linking to source i mod 620.  The sources are first
copied into ``ROOT/sources`` (linking the shared files themselves would change their link count and
ctime).  A marker file ``ROOT/.bench_million-N`` makes later runs reuse the set; ``--remove`` deletes
ROOT at the end.  ROOT is only ever written or deleted when it is empty or holds the marker
``ROOT/.bench_million``.  The smaller sets (``--scan-images``, ``--small-images``) live in
``ROOT/n<N>/`` in the same layout.  Each library writes its own label cache beside the labels
(``labels/train2017.cache`` and ``labels/train2017.yolo_data.cache``), so both share the files.

**What is measured.**  Every measurement runs in a fresh subprocess (a fresh interpreter importing one
library; both libraries run in the peer's Python when given, so torch, numpy and OpenCV are the same):

* scan from scratch: the library's label cache is deleted, then ``create_dataloader`` for training (it
  lists, verifies every pair and writes the cache) - once per library, at ``--scan-images`` (default:
  all);
* warm construction (label cache present) of ``create_dataloader`` for training: augment=True, hyp from
  data/hyps/hyp.scratch-low.yaml (mosaic 1.0), batch 16, 2 workers, imgsz 640, shuffle, no image cache;
  then the time to the first batch (``next(iter(loader))``); both libraries start their workers at
  construction;
* per-epoch sampler cost: ``for _ in loader.sampler`` fully consumed and ``len(loader)``, for that
  shuffled training loader and for a rect one (rect=True, augment=True, shuffle=True; YOLOv5 turns
  shuffle off with rect), whose construction time is shown too;
* PSS (/proc/PID/smaps_rollup: a page shared by k processes counts 1/k) of the main process and of each
  DataLoader worker after ``--batches`` batches, the current batch held; also its anonymous part (heap
  and Python objects: what grows when a worker touches per-image objects), and the same at
  ``--small-images`` images to show what grows with the number of images;
* yolo_data's warm-start steps on their own (list files, label paths, fingerprint, cache load).

Libraries alternate, the order rotating between rounds; warm rows are medians (min-max) of ``--repeats``
fresh processes, rect rows of ``--rect-repeats``.  The page cache is warm: the scan reads every file
first, and the 1M names are links to 620 files.

Output: a paste-ready markdown report on stdout; progress on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # leave no __pycache__ in the checkout
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import HYP_FILE, REPO, log, shutdown  # noqa: E402

PEER_ENV = common.PEER_PYTHON_ENV
LIBS = ("yolo_data", "yolov5")
OWNER = ".bench_million"  # ROOT holds this: created by this script, safe to fill and delete
SPLIT = "train2017"
IMGSZ, BATCH, STRIDE, WORKERS = 640, 16, 32, 2


def default_sources() -> List[Path]:
    """The train2017 and val2017 images of coco128 and bccd in the datasets folder."""
    return [common.dataset(name) / "images" / split for name in ("coco128", "bccd")
            for split in ("train2017", "val2017")]


# -- data ---------------------------------------------------------------------------------------------
def claim_root(root: Path) -> None:
    """Make ``root`` ours: create it, or accept it empty or already marked; refuse anything else."""
    if root.exists() and not (root / OWNER).exists() and any(root.iterdir()):
        raise SystemExit(f"{root} exists, is not empty and was not made by this script; choose another --root")
    root.mkdir(parents=True, exist_ok=True)
    (root / OWNER).touch()


def copy_sources(root: Path, sources: List[Path]) -> List[tuple]:
    """(image, label or None) of the source photos, copied once into ROOT/sources."""
    dst = root / "sources"
    pairs = []
    for k, folder in enumerate(sources):
        labels = Path(str(folder).replace(f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"))
        for im in sorted(folder.iterdir()):
            if not im.is_file() or im.name.startswith("."):
                continue
            into = dst / str(k)
            into.mkdir(parents=True, exist_ok=True)
            im_copy = into / im.name
            lb, lb_copy = labels / (im.stem + ".txt"), into / (im.stem + ".txt")
            if not im_copy.exists():
                shutil.copyfile(im, im_copy)
            if lb.is_file() and not lb_copy.exists():
                shutil.copyfile(lb, lb_copy)
            pairs.append((str(im_copy), str(lb_copy) if lb.is_file() else None))
    if not pairs:
        raise SystemExit(f"no source images in {', '.join(map(str, sources))}")
    return pairs


def build_set(root: Path, n: int, pairs: List[tuple]) -> Path:
    """``root/images/train2017`` with ``n`` hard links (flat), labels beside; reused when its marker
    says it is complete.  Returns the image folder."""
    images, labels = root / "images" / SPLIT, root / "labels" / SPLIT
    marker = root / f".bench_million-{n}"
    if marker.exists():
        return images
    for d in (images, labels):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    for cache in labels.parent.glob(f"{SPLIT}*cache*"):
        cache.unlink()
    t0 = time.perf_counter()
    link, m = os.link, len(pairs)
    im_dir, lb_dir = str(images) + os.sep, str(labels) + os.sep
    for i in range(n):
        im, lb = pairs[i % m]
        name = "%012d" % i
        link(im, im_dir + name + ".jpg")
        if lb is not None:
            link(lb, lb_dir + name + ".txt")
        if i and i % 200_000 == 0:
            log(f"  {i:,} links")
    marker.write_text(json.dumps({"images": n, "sources": m}))
    log(f"built {n:,} images ({m} sources) in {root} in {time.perf_counter() - t0:.1f} s")
    return images


def remove_caches(images: Path, lib: str) -> None:
    labels = images.parent.parent / "labels"
    names = [f"{SPLIT}.cache", f"{SPLIT}.cache.npy"] if lib == "yolov5" else [f"{SPLIT}.yolo_data.cache"]
    for name in names:
        (labels / name).unlink(missing_ok=True)
    if lib == "yolo_data":
        for f in labels.glob(f"{SPLIT}*.failed*"):
            f.unlink()


def balance_only(args, data, measure, res: Dict[str, List[dict]]) -> int:
    """--class-balance: yolo_data's warm training loader with and without it, alternating."""
    labels = data["main"].parent.parent / "labels"
    if not (labels / f"{SPLIT}.yolo_data.cache").exists():
        measure("yolo_data", "prep", "warm", "main")
    for _ in range(args.repeats):
        measure("yolo_data", "warm", "warm", "main")
        measure("yolo_data", "balanced", "balanced", "main")
    res.pop("prep", None)
    med = {group: common.medians(runs) for group, runs in res.items()}
    lines = [f"### class_balance={args.class_balance:g} at {args.images:,} images (yolo_data, warm, "
             f"medians of {args.repeats})", "", "| | without | class_balance |", "|---|---:|---:|"]
    for key, what in (("construct_s", "construction, s"), ("first_batch_s", "first batch, s"),
                      ("sampler_items", "items per epoch"), ("steps", "steps per epoch (len(loader))"),
                      ("sampler_iter_s", "`iter(loader.sampler)` consumed, s")):
        a, b = med["warm"].get(key), med["balanced"].get(key)
        fmt = (lambda v: f"{v:,.0f}") if key in ("sampler_items", "steps") else (lambda v: f"{v:.3f}")
        lines.append(f"| {what} | {fmt(a)} | {fmt(b)} |")
    per = [med[g]["sampler_iter_s"] / med[g]["sampler_items"] * 1e9 for g in ("warm", "balanced")]
    lines.append(f"\nper item of the epoch (medians): {per[0]:.0f} ns without, {per[1]:.0f} ns with class_balance")
    print("\n".join(lines), flush=True)
    common.write_result("million", {"runs": res, "medians": med}, args,
                        datasets=[f"n{args.images}", f"balance{args.class_balance:g}"])
    common.report_end()
    return 0


# -- the child: one measurement in a fresh process ----------------------------------------------------
def worker_pss(pid: int) -> List[dict]:
    return [r for r in (common.smaps_rollup(k) for k in sorted(common.child_pids(pid))) if r]


def child_main(spec: dict) -> None:
    if spec.get("yolo_data_root"):
        sys.path.insert(0, spec["yolo_data_root"])
    tmp = Path(spec["tmp"])
    lib, task = spec["lib"], spec["task"]
    common.isolate_environment(tmp, f"{lib} {task}")
    out: Dict[str, object] = {}
    t0 = time.perf_counter()
    if lib == "yolov5":
        common.ensure_pkg_resources()
        common.numpy_compat()
        with common.library_output(False):
            from yolov5.utils.dataloaders import create_dataloader
        import yaml
        hyp = yaml.safe_load(HYP_FILE.read_text())
    else:
        import cv2
        from yolo_data import create_dataloader
        cv2.setNumThreads(0)  # as importing YOLOv5 does for its process (bench_train.py does the same)
        hyp = str(HYP_FILE)
        import logging
        logging.getLogger("yolo_data").setLevel(logging.ERROR)
    out["import_s"] = time.perf_counter() - t0
    if task == "stages":
        out.update(yolo_data_stages(spec["data"]))
        print(json.dumps(out), flush=True)
        return
    rect = task == "rect"
    kw = dict(hyp=hyp, augment=True, cache=False, pad=0.0, rect=rect, rank=-1, workers=WORKERS,
              image_weights=False, quad=False, prefix="train: ", shuffle=True, seed=0)
    if task == "balanced":
        kw["class_balance"] = spec["class_balance"]
    with common.library_output(False):
        t1 = time.perf_counter()
        loader, dataset = create_dataloader(spec["data"], IMGSZ, BATCH, STRIDE, **kw)
        t2 = time.perf_counter()
        it = iter(loader)
        batch = next(it)
        t3 = time.perf_counter()
        for _ in range(spec["batches"] - 1):
            batch = next(it)  # noqa: F841  (held, as a training step holds it, while PSS is read)
    out.update(construct_s=t2 - t1, first_batch_s=t3 - t2, images=len(dataset))
    main = common.smaps_rollup(os.getpid())
    out["main_pss"], out["main_anon"] = main["Pss"] / 1024, main["Pss_Anon"] / 1024
    kids = worker_pss(os.getpid())
    out["worker_pss"] = [k["Pss"] / 1024 for k in kids]
    out["worker_anon"] = [k["Pss_Anon"] / 1024 for k in kids]
    t4 = time.perf_counter()
    count = sum(1 for _ in loader.sampler)
    t5 = time.perf_counter()
    steps = len(loader)
    t6 = time.perf_counter()
    out.update(sampler_iter_s=t5 - t4, sampler_items=count, len_s=t6 - t5, steps=steps)
    shutdown(loader)
    print(json.dumps(out), flush=True)


def yolo_data_stages(images: str) -> dict:
    """yolo_data's warm start, step by step (the calls split.load_split makes)."""
    from yolo_data.labels import cache
    from yolo_data.formats.sources import default_cache_file, img2label_path, list_image_files
    t = [time.perf_counter()]
    im_files = list_image_files(images)
    t.append(time.perf_counter())
    lb_files = [img2label_path(f) for f in im_files]
    t.append(time.perf_counter())
    fp = cache.fingerprint(im_files, lb_files, None)
    t.append(time.perf_counter())
    contents = cache.load(default_cache_file(images, lb_files[0]))
    t.append(time.perf_counter())
    steps = ("list_s", "label_paths_s", "fingerprint_s", "load_s")
    res = {k: t[i + 1] - t[i] for i, k in enumerate(steps)}
    res["fresh"] = contents.fingerprint == fp
    res["module"] = str(Path(cache.__file__).parent)
    return res


# -- the parent ---------------------------------------------------------------------------------------
def run_child(python: str, spec: dict, timeout: float) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        # run_tree: a child that times out is killed with its DataLoader workers (subprocess.run alone
        # would leave them running through the next measurements)
        p = common.run_tree(cmd, timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        return {"error": f"exit {p.returncode}: " + " | ".join(tail)}
    res = json.loads(lines[-1])
    res["wall_s"] = wall
    return res


med = common.med
fmt_s = common.fmt_seconds


def fmt_mib(vals: List[float]) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    text = f"{statistics.median(vals):,.0f} MiB"
    return text + (f" ({min(vals):,.0f}-{max(vals):,.0f})" if len(vals) > 1 else "")


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}x" if a is not None and b and min(a, b) >= 1e-3 else "-"


def collect(runs: List[dict], key: str) -> List[float]:
    return [r[key] for r in runs if "error" not in r and r.get(key) is not None]


def per_worker(runs: List[dict], key: str, w: int) -> List[float]:
    return [r[key][w] for r in runs if "error" not in r and len(r.get(key, [])) > w]


def report(args, libs, res: Dict[str, Dict[str, List[dict]]], sizes: Dict[str, int], stages: List[dict],
           build_s: float) -> str:
    n, ns, nsmall = sizes["main"], sizes["scan"], sizes["small"]
    names = {"yolo_data": "yolo_data", "yolov5": "YOLOv5 7.0"}
    lines = [f"{n:,} images ({sizes['sources']} distinct photos, hard links in one flat folder), "
             f"{os.cpu_count()} cores ({common.cpu_model()}), imgsz {IMGSZ}, batch {BATCH}, {WORKERS} workers; "
             f"warm rows: median (min-max) of {args.repeats} fresh processes, rect rows of {args.rect_repeats}; "
             "page cache warm (the links share their sources' inodes, so every stat finds its inode cached: "
             "distinct files would make stats, and the fingerprint, somewhat dearer)", ""]
    head = "| measurement | " + " | ".join(names[l] for l in libs) + (" | yolo_data / YOLOv5 |" if len(libs) > 1 else " |")
    lines += [head, "|---|" + "---:|" * (len(libs) + (len(libs) > 1))]

    def row(label: str, group: str, key: str, kind: str = "s", w: Optional[int] = None, total=None):
        cells, meds = [], []
        for lib in libs:
            runs = res[lib].get(group, [])
            if total is not None:
                vals = [total(r) for r in runs if "error" not in r]
            elif w is not None:
                vals = per_worker(runs, key, w)
            else:
                vals = collect(runs, key)
            errs = [r["error"] for r in runs if "error" in r]
            cell = fmt_mib(vals) if kind == "mib" else fmt_s(vals)
            if errs and not vals:
                cell = "failed: " + errs[0][:80].replace("|", "/")
            cells.append(cell)
            meds.append(med(vals))
        extra = [ratio(meds[0], meds[1])] if len(libs) > 1 else []
        lines.append(f"| {label} | " + " | ".join(cells + extra) + " |")

    row(f"scan from scratch (label cache absent) + construction, {ns:,} images", "scan", "construct_s")
    row(f"warm construction, training loader ({n:,} images)", "warm", "construct_s")
    row("first batch after construction", "warm", "first_batch_s")
    row("**warm construction + first batch**", "warm", "", total=lambda r: r["construct_s"] + r["first_batch_s"])
    row("construction, rect loader", "rect", "construct_s")
    row("`iter(loader.sampler)` consumed, shuffled training", "warm", "sampler_iter_s")
    row("`len(loader)`, shuffled training", "warm", "len_s")
    row("`iter(loader.sampler)` consumed, rect", "rect", "sampler_iter_s")
    row("`len(loader)`, rect", "rect", "len_s")
    row(f"PSS main process after {args.batches} batches", "warm", "main_pss", "mib")
    for w in range(WORKERS):
        row(f"PSS worker {w}", "warm", "worker_pss", "mib", w=w)
        row(f"PSS worker {w}, anonymous part", "warm", "worker_anon", "mib", w=w)
    if nsmall:
        row(f"PSS main process, {nsmall:,} images", "small", "main_pss", "mib")
        for w in range(WORKERS):
            row(f"PSS worker {w}, {nsmall:,} images", "small", "worker_pss", "mib", w=w)
            row(f"PSS worker {w}, anonymous part, {nsmall:,} images", "small", "worker_anon", "mib", w=w)
    lines.append("")
    if stages:
        ok = [s for s in stages if "error" not in s]
        parts = ", ".join(f"{k[:-2].replace('_', ' ')} {fmt_s([s[k] for s in ok])}"
                          for k in ("list_s", "label_paths_s", "fingerprint_s", "load_s"))
        lines.append(f"- yolo_data warm-start steps at {n:,} images: {parts}; cache fresh: "
                     f"{all(s.get('fresh') for s in ok) if ok else '-'}; yolo_data from "
                     f"{ok[0]['module'] if ok else '-'}")
    for lib in libs:
        for group, runs in res[lib].items():
            for r in runs:
                if "error" in r:
                    lines.append(f"- {names[lib]} {group}: {r['error'][:300]}")
    labels = Path(args.root) / "labels" / SPLIT
    sizes_mib = {lib: (labels.parent / (f"{SPLIT}.cache" if lib == "yolov5" else f"{SPLIT}.yolo_data.cache"))
                 for lib in libs}
    lines.append("- label cache files at %s images: " % f"{n:,}" + ", ".join(
        f"{names[lib]} {f.stat().st_size / 2**20:,.0f} MiB" for lib, f in sizes_mib.items() if f.exists())
        + " (yolo_data's is mapped, and its pages shared by every process; YOLOv5's is unpickled into "
        "Python objects in the main process, which the forked workers inherit)")
    if ns != n:
        lines.append(f"- scan from scratch measured at {ns:,} images (`--scan-images`), not {n:,}")
    if args.yolo_data:
        lines.append(f"- yolo_data imported from {args.yolo_data}")
    lines.append(f"- data set {'built in %.0f s' % build_s if build_s else 'reused'} under {args.root}; "
                 "steps per epoch and sampler items: "
                 + ", ".join(f"{names[lib]} {r.get('steps')} / {r.get('sampler_items')}"
                             for lib in libs for r in res[lib].get("warm", [])[:1] if "error" not in r))
    lines += ["", common.footer()]
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", help="folder for the generated sets (outside the checkout); required")
    ap.add_argument("--images", type=int, default=1_000_000)
    ap.add_argument("--scan-images", type=int, default=0, help="size for the scan from scratch (default: --images)")
    ap.add_argument("--small-images", type=int, default=10_000, help="a small set for the PSS comparison (0: none)")
    ap.add_argument("--sources", nargs="+", type=Path, default=None,
                    help="image folders to link to (default: coco128's and bccd's in $YOLO_DATA_BENCH_DATA "
                         "or ../shared/datasets)")
    ap.add_argument("--peer-python", default=os.environ.get(PEER_ENV),
                    help=f"the benchmark environment's python, with yolov5 (default ${PEER_ENV})")
    ap.add_argument("--no-peer", action="store_true", help="yolo_data only")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rect-repeats", type=int, default=None, help="default: --repeats")
    ap.add_argument("--batches", type=int, default=10, help="batches taken before reading PSS")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per child process")
    ap.add_argument("--skip-scan", action="store_true", help="keep existing label caches (no scan row)")
    ap.add_argument("--class-balance", type=float, default=None, metavar="T",
                    help="instead of the comparison: yolo_data's training loader with class_balance=T against "
                         "without, warm (construction, first batch, one epoch of the sampler); results in "
                         "million-nN-balanceT.json")
    ap.add_argument("--remove", action="store_true", help="delete --root at the end")
    ap.add_argument("--yolo-data", help="import yolo_data from this folder (e.g. an exported older commit); "
                    "default: this checkout")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    if args.rect_repeats is None:
        args.rect_repeats = args.repeats
    if not args.child and not args.root:
        ap.error("--root is required")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        child_main(json.loads(args.child))
        return 0
    root = Path(args.root).resolve()
    if root == REPO or REPO in root.parents:
        raise SystemExit("--root must be outside the checkout")
    libs = ["yolo_data"] if args.no_peer or not args.peer_python else list(LIBS)
    python = {"yolo_data": args.peer_python if len(libs) > 1 else sys.executable, "yolov5": args.peer_python}
    if len(libs) > 1:
        probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('yolov5') is None)"
        if subprocess.run([args.peer_python, "-c", probe], timeout=300).returncode:
            raise SystemExit(f"bench_million.py: --peer-python {args.peer_python} has no yolov5 (BENCHMARKS.md, "
                             "Setup; --no-peer for yolo_data only)")
    claim_root(root)
    t0 = time.perf_counter()
    pairs = copy_sources(root, args.sources or default_sources())
    sizes = {"main": args.images, "scan": args.scan_images or args.images,
             "small": args.small_images if args.small_images and args.small_images != args.images else 0,
             "sources": len(pairs)}
    built = not (root / f".bench_million-{args.images}").exists()
    data = {"main": build_set(root, args.images, pairs)}
    for key in ("scan", "small"):
        if sizes[key] and sizes[key] != args.images:
            data[key] = build_set(root / f"n{sizes[key]}", sizes[key], pairs)
        elif sizes[key]:
            data[key] = data["main"]
    build_s = time.perf_counter() - t0 if built else 0.0
    res: Dict[str, Dict[str, List[dict]]] = {lib: {} for lib in libs}
    tmp = Path(tempfile.mkdtemp(prefix="bench_million-"))
    try:
        def measure(lib: str, group: str, task: str, key: str) -> dict:
            spec = {"lib": lib, "task": task, "data": str(data[key]), "batches": args.batches,
                    "tmp": str(tmp / f"{lib}-{group}"), "yolo_data_root": args.yolo_data,
                    "class_balance": args.class_balance}
            t = time.perf_counter()
            r = run_child(python[lib], spec, args.timeout)
            res[lib].setdefault(group, []).append(r)
            log(f"{lib:9s} {group:6s} {time.perf_counter() - t:7.1f} s  "
                + (r.get("error") or ", ".join(f"{k} {v:.3f}" for k, v in r.items() if isinstance(v, float))))
            return r

        if args.class_balance is not None:
            return balance_only(args, data, measure, res["yolo_data"])
        if not args.skip_scan:
            for lib in libs:
                remove_caches(data["scan"], lib)
                measure(lib, "scan", "warm", "scan")
        for key in ("main", "small"):  # the warm rows need each library's cache of each set
            if key in data:
                for lib in libs:
                    labels = data[key].parent.parent / "labels"
                    name = f"{SPLIT}.cache" if lib == "yolov5" else f"{SPLIT}.yolo_data.cache"
                    if not (labels / name).exists():
                        measure(lib, f"prep-{key}", "warm", key)
        for r in range(max(args.repeats, args.rect_repeats)):
            order = libs[r % len(libs):] + libs[:r % len(libs)]
            for lib in order:
                if r < args.repeats:
                    measure(lib, "warm", "warm", "main")
                if r < args.rect_repeats:
                    measure(lib, "rect", "rect", "main")
            if r < args.repeats:
                measure("yolo_data", "stages", "stages", "main")
        if "small" in data and sizes["small"]:
            for lib in libs:
                measure(lib, "small", "warm", "small")
        stages = res["yolo_data"].pop("stages", [])
        for lib in libs:
            for k in [k for k in res[lib] if k.startswith("prep-")]:
                res[lib].pop(k)
        print(report(args, libs, res, sizes, stages, build_s), flush=True)
        common.write_result("million", {
            "sizes": sizes, "build_s": build_s, "runs": res, "yolo_data_stages": stages,
            "medians": {lib: {group: common.medians(runs) for group, runs in groups.items()}
                        for lib, groups in res.items()},
            "yolo_data_stages_medians": common.medians(stages)}, args, datasets=[f"n{args.images}"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.remove:
            shutil.rmtree(root)
            log(f"removed {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
