"""Training-loader memory: yolo_data against YOLOv5 7.0 and Ultralytics 8.x, same data, same settings.

    python benchmarks/speed/run.py memory                       # default (~3 min, 2 cores; benchmark environment)
    python benchmarks/speed/run.py memory --quick               # coco128, tiny
    python benchmarks/speed/run.py memory --datasets synthetic coco128 --repeats 5
    python benchmarks/speed/run.py memory --libraries yolo_data # any environment with yolo_data

Datasets, environment variables and ``--libraries`` as in bench_train.py (a peer is imported only by the
children that measure it, and a missing one stops the run with one line first).

What is measured, per dataset x library x round: the memory of a process that trains from the library's
uncached training loader, i.e. of the whole process tree (the main process plus its DataLoader worker
processes), while batches flow.

* Each measurement runs in a FRESH Python process that imports only the library it measures (so one
  library's imports, allocator state and caches never count for another); this parent process imports
  neither torch nor any of the libraries and only reads /proc.
* The loader is built as bench_train.py builds it (``bench_train.build_loader``: the library's own
  ``create_dataloader`` / ``build_dataloader``): augment=True with hyp.scratch-low (mosaic 1.0), imgsz 640,
  batch 16, ``--workers`` workers (default 2), shuffle, no image cache, rect False, from a label cache a
  priming pass wrote first.  As in bench_train.py, OpenCV runs single-threaded in every library's main
  process (importing YOLOv5 or Ultralytics does that; the child sets it for yolo_data too).
* The child takes ``--batches`` batches the way a training loop does (``for batch in loader``, the current
  batch held while the next is fetched, one byte per page of its images read as ``.to(device)`` would;
  ``--step-ms`` adds a simulated training step per batch, so the prefetch queues fill up).  During
  the last ``--window`` batches the parent samples, every ``--interval`` s, /proc/<pid>/smaps_rollup of
  the child and all its descendants and sums them: PSS (proportional set size: a page shared by k
  processes counts 1/k in each, so the sum over the tree counts every page once), USS (private pages)
  and RSS (shared pages counted in every process; overstates), PSS split into anonymous (heap, Python
  objects, image buffers), file-backed (shared libraries, mapped files) and shmem (mapped torch
  shared-memory batches), and the main process's PSS apart from the workers'.  Batches a worker has
  finished and queued are torch shared-memory files held open but mapped by no process, invisible to
  PSS: the sizes of those files (distinct, allocated) are reported beside it, and a "PSS + unmapped
  in-flight batches" row adds them.  Ultralytics keeps up to min(n, 8 x batch, 1000) recently loaded images per process in RAM;
  40 batches (640 images) are enough for both workers' buffers to fill (128 images each).
* Also the main process's RSS right after the imports and right after building the dataset + loader
  (for YOLOv5/Ultralytics building starts the workers; yolo_data's start with the first batch).
* Libraries alternate within each round and the order rotates between rounds; reported are medians over
  ``--repeats`` rounds (the headline metric also with min-max) and ratios of medians yolo_data / peer
  (lower is better for yolo_data).

Isolation and dataset copies as in bench_train.py (one "prep" child copies the data per library, warms
the page cache and writes each library's label cache; YOLO_OFFLINE=1, settings in a temporary folder,
network refused; the temporary folder is deleted at the end).

Output: a paste-ready markdown report on stdout; progress on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import select
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
import bench_train as bt  # noqa: E402  (stdlib-only at import time; the libraries are imported in children)
import common  # noqa: E402
from common import log  # noqa: E402

LIBS = ("yolo_data", "yolov5", "ultralytics")
MiB = 1024.0  # smaps values are KiB
SHM_PREFIXES = ("/dev/shm/torch_", "/memfd:torch")  # torch's file_descriptor / file_system strategies
ROLLUP_FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Private_Clean", "Private_Dirty", "Swap")


# -- /proc readers (parent) ------------------------------------------------------------------------------
def rollup(pid: int) -> Optional[Dict[str, int]]:
    """The fields of /proc/<pid>/smaps_rollup (KiB) this report uses, or None if the process is gone."""
    out = {k: v for k, v in common.smaps_rollup(pid).items() if k in ROLLUP_FIELDS}
    return out or None


def shm_files(pid: int, into: Dict[int, int]) -> None:
    """Add the torch shared-memory files ``pid`` holds open (inode -> allocated bytes) to ``into``.  Batches
    in flight (made by a worker, not yet taken by the main process) live in such files, held open by a
    descriptor but mapped by no process, so PSS does not see them."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
            if target.startswith(SHM_PREFIXES):
                st = os.stat(f"{fd_dir}/{fd}")
                into[st.st_ino] = st.st_blocks * 512
        except OSError:
            continue


def sample_tree(pid: int) -> Optional[dict]:
    """Summed smaps_rollup of ``pid`` and its descendants, the main process's and the children's PSS, and
    the torch shared-memory files the tree holds open."""
    main = rollup(pid)
    if main is None:
        return None
    kids_pids = common.descendants(pid)
    kids = [r for r in (rollup(k) for k in kids_pids) if r is not None]
    shm: Dict[int, int] = {}
    for p in [pid] + kids_pids:
        shm_files(p, shm)
    total = {k: main.get(k, 0) + sum(r.get(k, 0) for r in kids) for k in ROLLUP_FIELDS}
    total["Uss"] = total["Private_Clean"] + total["Private_Dirty"]
    total["main_Pss"] = main.get("Pss", 0)
    total["main_Rss"] = main.get("Rss", 0)
    total["kids_Pss"] = sum(r.get("Pss", 0) for r in kids)
    total["procs"] = 1 + len(kids)
    total["shm_open"] = sum(shm.values()) // 1024
    # in-flight batches mapped by no process (approximate: all mapped shmem is taken as torch's)
    total["shm_unmapped"] = max(0, total["shm_open"] - total["Pss_Shmem"])
    total["Pss_plus_shm"] = total["Pss"] + total["shm_unmapped"]
    return total


class LineReader:
    """Lines from a pipe, with a timeout (select)."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.eof = fd, b"", False

    def poll(self, timeout: float) -> List[str]:
        if self.eof:
            return []
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if ready:
            data = os.read(self.fd, 1 << 16)
            if not data:
                self.eof = True
            self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        return [ln.decode() for ln in lines]


# -- children --------------------------------------------------------------------------------------------
def child_args(kind: str, spec: dict) -> List[str]:
    return [sys.executable, str(Path(__file__).resolve()), kind, json.dumps(spec)]


def prep_main(spec: dict) -> int:
    """Copy the datasets per library, warm the page cache, write every library's label cache (loaders built
    with 0 workers, as bench_train.py primes), and report the machine line.  Not measured."""
    tmp = Path(spec["tmp"])
    common.isolate_environment(tmp, "bench_memory")
    import yaml
    with common.library_output(spec["verbose"]):
        libs = bt.import_libraries(only=spec["libraries"])
    hyp = yaml.safe_load(common.HYP_FILE.read_text(encoding="utf-8"))
    out = {"machine": bt.machine_line(libs), "copies": [], "errors": []}
    for src in bt.resolve_sources(spec["datasets"], spec["root"], spec["synthetic_n"], spec["synthetic_root"],
                                  spec["data"]):
        for lib in spec["libraries"]:
            c = bt.copy_for(src, tmp / "data" / lib / src.name)
            common.warm_page_cache(c.images)
            t0 = time.perf_counter()
            try:
                with common.library_output(spec["verbose"]):
                    loader, _ = bt.build_loader(libs, lib, c, "train", 0, hyp)
                common.shutdown(loader)
                del loader
            except Exception as e:
                out["errors"].append(f"{lib} on {src.name}: building the loader failed: {type(e).__name__}: {e}")
            log(f"prepared {src.name} for {lib} ({c.n_images} images, label cache in "
                f"{time.perf_counter() - t0:.1f} s, {'linked' if src.link else 'copied'} images)")
            out["copies"].append({"dataset": src.name, "lib": lib, "images": str(c.images),
                                  "names": {str(k): v for k, v in c.names.items()}, "n_images": c.n_images})
    Path(spec["out"]).write_text(json.dumps(out))
    common.wait_for_children(5)
    return 0


def measure_main(spec: dict) -> int:
    """One measurement: import one library, build its training loader, take batches; the parent samples."""
    import gc
    tmp = Path(spec["tmp"])
    common.isolate_environment(tmp, "bench_memory")
    ctl = os.fdopen(spec["fd"], "w", buffering=1)

    def say(msg: str) -> None:
        ctl.write(msg + "\n")
        ctl.flush()

    def checkpoint(tag: str) -> None:  # the parent samples, then answers on stdin
        say(tag)
        sys.stdin.readline()

    import yaml
    lib = spec["lib"]
    with common.library_output(spec["verbose"]):
        libs = bt.import_libraries(only=[lib])
    import cv2
    cv2.setNumThreads(0)  # as YOLOv5's and Ultralytics' imports do (and as in bench_train.py)
    hyp = yaml.safe_load(common.HYP_FILE.read_text(encoding="utf-8"))
    c = spec["copy"]
    ds = bt.DatasetCopy(c["dataset"], Path(c["images"]), {int(k): v for k, v in c["names"].items()},
                        c["n_images"])
    gc.collect()
    checkpoint("imported")
    with common.library_output(spec["verbose"]):
        loader, dataset = bt.build_loader(libs, lib, ds, "train", spec["workers"], hyp)
    checkpoint("built")
    it = bt.epochs(loader)
    step = spec["step_ms"] / 1000.0
    n_img, t0 = 0, time.perf_counter()
    batch = None
    try:
        for i in range(1, spec["batches"] + 1):
            batch = next(it)  # held until the next one arrives, as in a training loop
            n_img += bt.batch_size_of(batch)
            # read one byte per page of the images, as a training step reads the batch (.to(device)):
            # the batch's shared-memory pages get mapped into the main process, where PSS sees them
            img = batch["img"] if isinstance(batch, dict) else batch[0]
            int(img.reshape(-1)[::4096].sum())
            del img
            if step:
                time.sleep(step)
            say(f"batch {i}")
        dt = time.perf_counter() - t0
        checkpoint("end")
    finally:
        del batch
        it.close()
        common.shutdown(loader)
        del it, loader, dataset
        gc.collect()
        left = common.wait_for_children()
    say("result " + json.dumps({"ips": n_img / dt, "left": left, "version": libs.versions.get(lib, "?")}))
    return 0


# -- one measurement (parent) ---------------------------------------------------------------------------
def run_measurement(spec: dict, args, logfile: Path) -> dict:
    r, w = os.pipe()
    spec = dict(spec, fd=w)
    with open(logfile, "w") as lf:
        proc = subprocess.Popen(child_args("--_measure", spec), stdin=subprocess.PIPE, stdout=lf,
                                stderr=subprocess.STDOUT, pass_fds=(w,), text=True)
    os.close(w)
    reader = LineReader(r)
    samples: List[dict] = []
    marks: Dict[str, dict] = {}
    result = None
    sampling, next_at = False, 0.0
    deadline = time.monotonic() + args.timeout
    first_sampled = spec["batches"] - args.window

    def ack():
        proc.stdin.write("\n")
        proc.stdin.flush()

    try:
        while result is None and not reader.eof:
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"no result after {args.timeout} s")
            lines = reader.poll(min(1.0, next_at - now) if sampling else 1.0)
            for line in lines:
                if line in ("imported", "built"):
                    marks[line] = sample_tree(proc.pid)
                    ack()
                elif line.startswith("batch "):
                    if not sampling and int(line.split()[1]) >= first_sampled:
                        sampling, next_at = True, time.monotonic()
                elif line == "end":
                    s = sample_tree(proc.pid)
                    if s:
                        samples.append(s)
                    sampling = False
                    ack()
                elif line.startswith("result "):
                    result = json.loads(line[len("result "):])
            if sampling and time.monotonic() >= next_at:
                s = sample_tree(proc.pid)
                if s:
                    samples.append(s)
                next_at = time.monotonic() + args.interval
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(r)
    if result is None or proc.returncode:
        tail = logfile.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"child failed (exit {proc.returncode}): ...{tail}")
    if not samples:
        raise RuntimeError("no sample taken")
    mean = lambda key: statistics.fmean(s[key] for s in samples)  # noqa: E731
    return {
        "pss_max": max(s["Pss"] for s in samples) / MiB, "pss_mean": mean("Pss") / MiB,
        "uss_mean": mean("Uss") / MiB, "rss_mean": mean("Rss") / MiB,
        "main_pss": mean("main_Pss") / MiB, "kids_pss": mean("kids_Pss") / MiB,
        "pss_shm_max": max(s["Pss_plus_shm"] for s in samples) / MiB,
        "shm_open": mean("shm_open") / MiB, "shm_unmapped": mean("shm_unmapped") / MiB,
        "anon": mean("Pss_Anon") / MiB, "file": mean("Pss_File") / MiB, "shmem": mean("Pss_Shmem") / MiB,
        "swap": mean("Swap") / MiB, "procs": max(s["procs"] for s in samples), "samples": len(samples),
        "rss_imported": marks["imported"]["main_Rss"] / MiB, "rss_built": marks["built"]["main_Rss"] / MiB,
        "ips": result["ips"], "left": result["left"],
    }


# -- report ----------------------------------------------------------------------------------------------
ROWS = [  # (key, label, headline: show min-max)
    ("pss_max", "**summed PSS, max** (main + workers)", True),
    ("pss_mean", "**summed PSS, mean**", True),
    ("uss_mean", "summed USS, mean (private pages)", False),
    ("rss_mean", "summed RSS, mean (shared pages counted per process)", False),
    ("main_pss", "PSS of the main process, mean", False),
    ("kids_pss", "PSS of the worker processes together, mean", False),
    ("anon", "summed PSS: anonymous (heap, Python objects, image buffers), mean", False),
    ("file", "summed PSS: file-backed (shared libraries, mapped files), mean", False),
    ("shmem", "summed PSS: shmem (mapped torch shared-memory batches: the one held by the main process), mean",
     False),
    ("shm_open", "torch shared-memory files held open (all batches in flight, mapped or not), mean", False),
    ("pss_shm_max", "summed PSS + in-flight batches mapped by no process, max", False),
    ("rss_imported", "main process RSS after the imports", False),
    ("rss_built", "main process RSS after building dataset + loader", False),
]


med = statistics.median


def report(results, libs_used, args, machine: str, n_images: Dict[str, int], errors: List[str],
           loads) -> None:
    print("### Training dataloader memory (MiB, summed over the process tree, lower is better)\n")
    print(f"**Machine:** {machine}  ")
    print(f"Load average (1/5/15 min) at start {loads[0]}, at end {loads[1]}.  ")
    print(f"**Train loader:** augment, hyp.scratch-low (mosaic 1.0, mixup 0, copy-paste 0), imgsz {bt.IMGSZ}, "
          f"batch {bt.TRAIN_BATCH}, {args.workers} workers, shuffle, no image cache, rect False.  ")
    print(f"Each measurement: a fresh process importing only that library; {args.batches} batches taken "
          f"({'no training step' if not args.step_ms else f'{args.step_ms} ms simulated step per batch'}); "
          f"/proc/<pid>/smaps_rollup of the process and its descendants summed every {args.interval} s during "
          f"the last {args.window} batches; {args.repeats} rounds with the libraries alternating (order "
          "rotated each round); cells are medians over the rounds (headline rows: median (min–max)).  ")
    print("PSS splits each shared page among the processes mapping it, so the sum over the tree counts "
          "every page once.\n")
    peers = [l for l in libs_used if l != "yolo_data"]
    verdicts = []
    for ds, per_lib in results.items():
        print(f"**{ds}** ({n_images.get(ds, '?')} images)\n")
        head = ["metric (MiB)"] + list(libs_used)
        if "yolo_data" in libs_used:
            head += [f"yolo_data / {p}" for p in peers]
        print("| " + " | ".join(head) + " |")
        print("|---|" + "|".join(["---:"] * (len(head) - 1)) + "|")
        for key, label, headline in ROWS:
            row = [label]
            for l in libs_used:
                vals = [m[key] for m in per_lib.get(l, [])]
                if not vals:
                    row.append("n/a")
                elif headline and len(vals) > 1:
                    row.append(f"{med(vals):.0f} ({min(vals):.0f}–{max(vals):.0f})")
                else:
                    row.append(f"{med(vals):.0f}")
            if "yolo_data" in libs_used:
                ours = [m[key] for m in per_lib.get("yolo_data", [])]
                for p in peers:
                    theirs = [m[key] for m in per_lib.get(p, [])]
                    row.append(f"{med(ours) / med(theirs):.2f}×" if ours and theirs and med(theirs) else "n/a")
            print("| " + " | ".join(row) + " |")
        ctx = []
        for l in libs_used:
            ms = per_lib.get(l, [])
            if ms:
                ctx.append(f"{l} {med([m['ips'] for m in ms]):.0f} img/s, {max(m['procs'] for m in ms)} processes, "
                           f"{med([m['samples'] for m in ms]):.0f} samples")
        print("\nContext (median per measurement): " + "; ".join(ctx) + ".\n")
        if "yolo_data" in libs_used and per_lib.get("yolo_data") and all(per_lib.get(p) for p in peers) and peers:
            ours = med([m["pss_max"] for m in per_lib["yolo_data"]])
            lowest = min(peers, key=lambda p: med([m["pss_max"] for m in per_lib[p]]))
            theirs = med([m["pss_max"] for m in per_lib[lowest]])
            verdicts.append(f"{ds}: yolo_data's summed PSS (max) {ours:.0f} MiB "
                            f"{'≤' if ours <= theirs else '>'} the lower peer's ({lowest}, {theirs:.0f} MiB): "
                            f"{'yes' if ours <= theirs else 'NO'}")
    if verdicts:
        print("**Target (yolo_data's summed PSS ≤ the lower peer's):** " + "; ".join(verdicts) + ".")
    if "ultralytics" in libs_used:
        print("\nUltralytics keeps the last min(n, 8 × batch, 1000) images each process loaded in RAM even with "
              "cache=False (its mosaic partners come from that buffer); YOLOv5 and yolo_data hold no images "
              "between items.")
    common.report_end(errors)


# -- main ------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=None,
                   help="'synthetic' (generated set) and/or folder names under --root, e.g. coco128 "
                        "(default: synthetic, none with --data)")
    p.add_argument("--data", nargs="+", default=[], help="dataset yamls to measure too (their train split)")
    p.add_argument("--root", type=Path, default=None,
                   help="folder holding coco128 etc., only read (default $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    p.add_argument("--synthetic-n", type=int, default=2000, help="images in the generated set (default 2000)")
    p.add_argument("--synthetic-root", type=Path, default=None,
                   help="where generated sets are kept (default $YOLO_DATA_BENCH_SYNTHETIC or <temp>/yolo_data_bench)")
    p.add_argument("--libraries", nargs="+", default=list(LIBS), choices=bt.LIBS)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--batches", type=int, default=40, help="batches taken per measurement (default 40)")
    p.add_argument("--window", type=int, default=12, help="sample during the last N batches (default 12)")
    p.add_argument("--interval", type=float, default=0.1, help="seconds between samples (default 0.1)")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="simulated training step per batch, ms (default 0: take batches as fast as they come)")
    p.add_argument("--repeats", type=int, default=3, help="rounds; medians are over these (default 3)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per measurement (default 300)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: coco128, 12 batches, window 4, 1 round (overrides those options)")
    p.add_argument("--verbose", action="store_true", help="show what the libraries print (in child logs)")
    common.add_result_options(p)
    args = p.parse_args(argv)
    if args.datasets is None:
        args.datasets = [] if args.data else ["synthetic"]
    if args.quick:
        args.datasets, args.batches, args.window, args.repeats = ["coco128"], 12, 4, 1
    if not 1 <= args.window <= args.batches:
        p.error("--window must be between 1 and --batches")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    common.require("bench_memory.py", *(bt.PEERS[lib] for lib in args.libraries if lib in bt.PEERS))
    t_start = time.perf_counter()
    loads = [common.load_average()]
    tmp = Path(tempfile.mkdtemp(prefix="bench_memory_"))
    errors: List[str] = []
    try:
        prep_out = tmp / "prep.json"
        spec = {"tmp": str(tmp), "verbose": args.verbose, "libraries": args.libraries, "datasets": args.datasets,
                "root": args.root and str(args.root), "synthetic_n": args.synthetic_n,
                "synthetic_root": args.synthetic_root and str(args.synthetic_root), "out": str(prep_out),
                "data": [str(Path(d).resolve()) for d in args.data]}
        log("preparing dataset copies and label caches (one child importing all libraries; not measured) ...")
        subprocess.run(child_args("--_prep", spec), check=True, stdout=subprocess.DEVNULL)
        prep = json.loads(prep_out.read_text())
        errors += prep["errors"]
        copies = {(c["dataset"], c["lib"]): c for c in prep["copies"]}
        datasets = list(dict.fromkeys(c["dataset"] for c in prep["copies"]))
        n_images = {c["dataset"]: c["n_images"] for c in prep["copies"]}
        failed = {e.split(" on ")[0] + "@" + e.split(" on ")[1].split(":")[0] for e in prep["errors"]}
        results: Dict[str, Dict[str, List[dict]]] = {}
        k = 0
        for ds in datasets:
            per_lib = results.setdefault(ds, {})
            for r in range(args.repeats):
                order = args.libraries[r % len(args.libraries):] + args.libraries[:r % len(args.libraries)]
                for lib in order:
                    if f"{lib}@{ds}" in failed:
                        continue
                    k += 1
                    spec = {"tmp": str(tmp), "verbose": args.verbose, "lib": lib, "copy": copies[(ds, lib)],
                            "workers": args.workers, "batches": args.batches, "step_ms": args.step_ms}
                    try:
                        m = run_measurement(spec, args, tmp / f"child-{k}-{lib}.log")
                    except Exception as e:
                        errors.append(f"{lib} on {ds}, round {r + 1}: {type(e).__name__}: {e}")
                        log(f"ERROR {errors[-1]}")
                        failed.add(f"{lib}@{ds}")
                        continue
                    per_lib.setdefault(lib, []).append(m)
                    if m["left"]:
                        log(f"warning: {m['left']} leftover child process(es) after {lib}; terminated")
                    log(f"[{time.perf_counter() - t_start:5.0f} s] {ds:>13} round {r + 1} {lib:<11} "
                        f"PSS max {m['pss_max']:6.0f} mean {m['pss_mean']:6.0f} MiB (main {m['main_pss']:.0f}, "
                        f"workers {m['kids_pss']:.0f}; anon {m['anon']:.0f} file {m['file']:.0f} "
                        f"shmem {m['shmem']:.0f}; shm open {m['shm_open']:.0f}), USS {m['uss_mean']:.0f}, RSS {m['rss_mean']:.0f}, "
                        f"{m['procs']} procs, {m['samples']} samples, {m['ips']:.0f} img/s")
        loads.append(common.load_average())
        report(results, args.libraries, args, prep["machine"], n_images, errors, loads)
        common.write_result("memory", {
            "images": n_images, "errors": errors, "measurements_mib": results,
            "medians_mib": {ds: {lib: common.medians(ms) for lib, ms in per_lib.items()}
                            for ds, per_lib in results.items()}}, args, datasets=datasets)
        log(f"total {time.perf_counter() - t_start:.0f} s")
        return 1 if errors else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--_prep", "--_measure"):
        fn = prep_main if sys.argv[1] == "--_prep" else measure_main
        sys.exit(fn(json.loads(sys.argv[2])))
    sys.exit(main())
