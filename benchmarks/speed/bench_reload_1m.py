"""Reload of a 1,000,000-image label cache: time, breakdown, and proof that no per-image objects are made.

    python benchmarks/speed/run.py reload-1m                      # 1M images, 5 repeats
    python benchmarks/speed/run.py reload-1m --n 20000 --repeats 1 --from-records-n 2000  # a quick run

No image files are involved.  A synthetic split is built directly as a yolo_data ``LabelStore``
(vectorised, no per-image Python objects): paths ``/data/coco/images/train/000000123456.jpg`` (unique,
increasing ids), COCO-like (h, w) shapes, 1-15 boxes per image with random classes and coordinates,
and ``--poly-frac`` of the images (default 1 %) with polygons (3-12 points a row, the row's box being
the polygon's envelope).  It is written with ``yolo_data.labels.cache.save`` (the same atomic write a scan
does) into a temporary folder, deleted at the end.

What is measured, median (min-max) over ``--repeats``:

* warm: ``yolo_data.labels.cache.load(path)`` with the file in the page cache (open + map, header and
  offset checks, CRC-32 of the header and arrays, ``LabelStore.from_arrays`` with its ``validate``);
* cold-ish: the same after ``posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`` on the file (no root
  needed; dropping all caches would need root).  The share of the file's pages still resident before
  the load is measured with ``mincore`` and shown; a virtual disk may still be served from the host's
  cache, so this can be warmer than a true first read;
* breakdown (warm): file read (``open`` + ``read``: what a loader that read the file instead of
  mapping it would pay; for comparison),
  ``container.read(path, cache.KIND)`` alone (open + map + header and offset checks + CRC-32),
  ``zlib.crc32`` alone over the same bytes it checks (header + arrays, on a fresh mapping, so the page
  faults are included), ``container.read`` without the CRC (the difference), and
  ``LabelStore.from_arrays`` (the store's ``validate``) alone on arrays already read;
* objects: ``len(gc.get_objects())`` (gc-tracked containers), ``sys.getallocatedblocks()`` (every
  Python object allocation) and tracemalloc's peak/retained bytes around one load; a loader that made
  one object per image would show ~n more of them;
* access: ``store.im_file(i)``, ``store.labels_of(i)``, ``store.segments_of(i)`` at random indices,
  checked against the generated data, and their cost per call;
* optional (``--from-records-n``, default 200,000, 0 to skip): building a store the way a scan does,
  from one ``PairRecord`` per image (``LabelStore.from_records``), for comparison.

Output: paste-ready markdown on stdout, progress on stderr.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import mmap
import os
import platform
import statistics
import sys
import tempfile
import tracemalloc
import zlib
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import cpu_model, log, timed  # noqa: E402

import numpy as np  # noqa: E402

from yolo_data.labels import cache  # noqa: E402
from yolo_data.storage import container
from yolo_data.labels.verify import PairRecord  # noqa: E402
from yolo_data.labels.store import ImageFiles, Labels, LabelStore  # noqa: E402

PREFIX = "/data/coco/images/train/"
DIGITS = 12
SHAPES_HW = np.array([[480, 640], [427, 640], [640, 480], [375, 500], [640, 640], [612, 612], [640, 427]],
                     np.int32)
TARGET_S = 0.5


# -- synthetic store --------------------------------------------------------------------------------
def image_paths(ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(path_bytes, path_offsets) of PREFIX + zero-padded id + '.jpg', built as one uint8 matrix."""
    n = len(ids)
    pre, suf = np.frombuffer(PREFIX.encode(), np.uint8), np.frombuffer(b".jpg", np.uint8)
    width = len(pre) + DIGITS + len(suf)
    m = np.empty((n, width), np.uint8)
    m[:, :len(pre)] = pre
    powers = 10 ** np.arange(DIGITS - 1, -1, -1, dtype=np.int64)
    m[:, len(pre):len(pre) + DIGITS] = (ids[:, None] // powers % 10 + ord("0")).astype(np.uint8)
    m[:, -len(suf):] = suf
    return m.reshape(-1), np.arange(n + 1, dtype=np.int64) * width


def expected_path(ids: np.ndarray, i: int) -> str:
    return f"{PREFIX}{int(ids[i]):0{DIGITS}d}.jpg"


def random_boxes(rng: np.random.Generator, rows: int, nc: int = 80) -> np.ndarray:
    """(rows, 5) float32 [class, x, y, w, h] normalised, boxes inside the image."""
    w = rng.uniform(0.01, 0.6, rows)
    h = rng.uniform(0.01, 0.6, rows)
    x = rng.uniform(w / 2, 1 - w / 2)
    y = rng.uniform(h / 2, 1 - h / 2)
    cls = rng.integers(0, nc, rows)
    return np.stack([cls, x, y, w, h], 1).astype(np.float32)


def add_polygons(rng: np.random.Generator, labels: np.ndarray, label_offsets: np.ndarray,
                 frac: float) -> Tuple[np.ndarray, np.ndarray]:
    """Polygons for every row of a random ``frac`` of the images; those rows' boxes become the polygons'
    envelopes (in place).  Returns (seg_points, seg_offsets)."""
    n = len(label_offsets) - 1
    poly_images = rng.random(n) < frac
    row_image = np.repeat(np.arange(n), np.diff(label_offsets))
    poly_rows = np.flatnonzero(poly_images[row_image])
    counts = np.zeros(len(labels), np.int64)
    counts[poly_rows] = rng.integers(3, 13, len(poly_rows))
    seg_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    # points scattered inside each row's box, so the envelope stays near the box
    owner = np.repeat(np.arange(len(labels)), counts)
    _, x, y, w, h = labels[owner].T
    pts = np.stack([x + w * rng.uniform(-0.5, 0.5, len(owner)), y + h * rng.uniform(-0.5, 0.5, len(owner))], 1)
    pts = pts.clip(0, 1).astype(np.float32)
    if len(poly_rows):
        starts = seg_offsets[poly_rows]
        lo = np.minimum.reduceat(pts, starts, axis=0)
        hi = np.maximum.reduceat(pts, starts, axis=0)
        labels[poly_rows, 1:3] = (lo + hi) / 2
        labels[poly_rows, 3:5] = hi - lo
    return pts, seg_offsets


def build_store(n: int, seed: int, poly_frac: float) -> Tuple[LabelStore, np.ndarray, int]:
    """(store, image ids, number of polygon rows); everything vectorised."""
    rng = np.random.default_rng(seed)
    ids = np.cumsum(rng.integers(1, 600, n, dtype=np.int64))
    path_bytes, path_offsets = image_paths(ids)
    shapes_hw = SHAPES_HW[rng.integers(0, len(SHAPES_HW), n)]
    per_image = rng.integers(1, 16, n)
    label_offsets = np.concatenate([[0], np.cumsum(per_image)]).astype(np.int64)
    labels = random_boxes(rng, int(label_offsets[-1]))
    seg_points, seg_offsets = add_polygons(rng, labels, label_offsets, poly_frac)
    store = LabelStore(path_bytes, path_offsets, shapes_hw, labels, label_offsets, seg_points, seg_offsets)
    store.validate()
    return store, ids, int(np.count_nonzero(np.diff(seg_offsets)))


def contents_of(store: LabelStore) -> cache.CacheContents:
    n = len(store)
    counts = {"found": n, "ok": n, "missing": 0, "empty": 0, "corrupt": 0, "boxes": store.num_boxes(),
              "backgrounds": store.num_backgrounds(), "warnings": 0}
    fp = hashlib.sha256(f"synthetic {n}".encode()).hexdigest()
    return cache.CacheContents(store, fp, counts, problems=[])


# -- measurements ------------------------------------------------------------------------------------
PAGES = common.PageCache()


def evict(path: Path) -> None:
    """Ask the kernel to drop the file's pages (it was fsynced by cache.save, so none are dirty)."""
    PAGES.evict([str(path)])


def resident(path: Path) -> Optional[float]:
    """Share of the file's pages in the page cache (mincore), or None when unknown."""
    return PAGES.resident([str(path)])


def read_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def time_loads(path: Path, repeats: int, cold: bool) -> Tuple[List[float], List[Optional[float]]]:
    """Seconds of ``cache.load`` per repeat, and the resident share before each."""
    times, res = [], []
    for _ in range(repeats):
        if cold:
            evict(path)
        res.append(resident(path))
        gc.collect()
        t, contents = timed(lambda: cache.load(path))
        times.append(t)
        del contents
    return times, res


def crc_of_mapping(path: Path, end: int) -> Tuple[float, int]:
    """(seconds, crc) of ``zlib.crc32`` over bytes [0, end) of a fresh read-only mapping of ``path``: the
    bytes ``container.read`` checks, with the page faults of a first touch; the open and the mmap call
    are not timed."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)[:end]
        try:
            return timed(lambda: zlib.crc32(view))
        finally:
            view.release()


def time_breakdown(path: Path, repeats: int) -> Dict[str, List[float]]:
    """Warm: a plain read of the file (what ``cache.load`` avoids by mapping it), ``container.read``
    alone, the CRC-32 alone over the same bytes, their difference, and ``LabelStore.from_arrays``
    (validation) alone.  ``cache.load`` = ``container.read`` + header meta checks + ``from_arrays``."""
    out: Dict[str, List[float]] = {
        "file read (open + read), for comparison": [],
        "`container.read` (open + map + header/offset checks + CRC-32)": [],
        "`zlib.crc32` of header + arrays alone (fresh mapping, page faults included)": [],
        "`container.read` without the CRC (difference)": [],
        "`LabelStore.from_arrays` (validate) alone, arrays already read": []}
    for _ in range(repeats):
        gc.collect()
        t_read, data = timed(lambda: read_file(path))
        del data
        t_cont, c = timed(lambda: container.read(path, cache.KIND))
        t_crc, crc = crc_of_mapping(path, c.payload_offset)
        stored = int.from_bytes(c.mm[len(c.mm) - container._CRC:], "little")
        assert crc == stored, "CRC-32 timed over other bytes than container.read checks"
        arrays = c.arrays
        t_val, store = timed(lambda: LabelStore.from_arrays(arrays))
        del store, c
        vals = (t_read, t_cont, t_crc, t_cont - t_crc, t_val)
        for key, v in zip(out, vals):
            out[key].append(v)
    return out


def object_counts(path: Path) -> Dict[str, object]:
    """gc-tracked objects, allocated blocks and tracemalloc bytes around one load (kept alive)."""
    gc.collect()
    gc0, blocks0 = len(gc.get_objects()), sys.getallocatedblocks()
    contents = cache.load(path)
    gc1, blocks1 = len(gc.get_objects()), sys.getallocatedblocks()
    del contents
    gc.collect()
    tracemalloc.start()
    contents = cache.load(path)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    store = contents.store
    owns = sum(a.base is None for a in store.arrays().values())
    return {"gc": gc1 - gc0, "blocks": blocks1 - blocks0, "peak": peak, "current": current,
            "views": len(store.arrays()) - owns, "n_arrays": len(store.arrays()), "contents": contents}


def check_access(store: LabelStore, truth: LabelStore, ids: np.ndarray, samples: int, seed: int) -> Dict:
    """Random dataset-style reads, checked against the generated store, and their cost per call."""
    rng = np.random.default_rng(seed + 1)
    idx = rng.integers(0, len(store), samples)
    for i in idx[:1000]:
        assert store.im_file(int(i)) == expected_path(ids, int(i)), i
        assert np.array_equal(store.labels_of(int(i)), truth.labels_of(int(i))), i
    poly = np.flatnonzero(np.diff(truth.seg_offsets[truth.label_offsets]))  # images with polygon points
    for i in poly[:200]:
        got, want = store.segments_of(int(i)), truth.segments_of(int(i))
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want)), i
    idx_list = [int(i) for i in idx]
    t_file, _ = timed(lambda: [store.im_file(i) for i in idx_list])
    t_lab, _ = timed(lambda: [store.labels_of(i) for i in idx_list])
    polys = [int(i) for i in poly[:samples]] or [0]
    t_seg, _ = timed(lambda: [store.segments_of(i) for i in polys])
    files, labels = ImageFiles(store), Labels(store)
    t_seq, _ = timed(lambda: [(files[i], labels[i]) for i in idx_list])
    i0 = int(poly[0]) if len(poly) else 0
    return {"n": samples, "im_file": t_file / samples, "labels_of": t_lab / samples,
            "segments_of": t_seg / len(polys), "n_seg": len(polys), "lazy": t_seq / samples,
            "example": (i0, store.im_file(i0), store.labels_of(i0)[:2].tolist(), len(store.segments_of(i0)),
                        len(files), repr(labels))}


def records_of(store: LabelStore, n: int) -> List[PairRecord]:
    """One PairRecord per image, as a scan returns them (copies, so they own their arrays)."""
    recs = []
    for i in range(n):
        segs = store.segments_of(i)
        recs.append(PairRecord(store.im_file(i), tuple(int(v) for v in store.shapes_hw[i]),
                               store.labels_of(i).copy(), [s.copy() for s in segs] or None))
    return recs


def time_from_records(store: LabelStore, n: int) -> Dict[str, float]:
    t_make, recs = timed(lambda: records_of(store, n))
    gc.collect()
    t_build, built = timed(lambda: LabelStore.from_records(recs))
    assert len(built) == n and np.array_equal(built.labels, store.labels[:store.label_offsets[n]])
    return {"n": n, "make": t_make, "build": t_build}


# -- report -------------------------------------------------------------------------------------------
def _ms(ts: List[float]) -> str:
    return common.fmt_range(ts, 0, 1e3, always=True)


def _res(vals: List[Optional[float]]) -> str:
    return common.fmt_share(vals, dash="–")


def report(args, store, n_poly_rows, cfile, t_build, t_save, warm, cold, parts, objs, acc, fr,
           load_before, load_after) -> str:
    n = len(store)
    size = cfile.stat().st_size
    med_warm = statistics.median(warm[0])
    lines = [f"### Label cache reload: {n:,} images, {store.num_boxes():,} boxes, "
             f"median (min–max) of {args.repeats}", "",
             f"Machine: {cpu_model()}, {os.cpu_count()} logical cores, Python {platform.python_version()}, "
             f"numpy {np.__version__}; load average before "
             + " / ".join(f"{x:.2f}" for x in load_before) + ", after "
             + " / ".join(f"{x:.2f}" for x in load_after) + f"; cache in {cfile.parent} "
             f"(built in {t_build:.1f} s, saved in {t_save:.1f} s).", "",
             f"Cache file: {size / 1e6:.1f} MB ({size / n:.0f} B/image); arrays: "
             + ", ".join(f"{k} {a.nbytes / 1e6:.1f} MB" for k, a in store.arrays().items())
             + f".  Polygon rows: {n_poly_rows:,}.", "",
             "| measurement | ms | MB/s (median) | pages resident before |", "|---|---:|---:|---:|",
             f"| `cache.load`, warm page cache | {_ms(warm[0])} | {size / 1e6 / med_warm:,.0f} | "
             f"{_res(warm[1])} |",
             f"| `cache.load`, cold-ish (after POSIX_FADV_DONTNEED) | {_ms(cold[0])} | "
             f"{size / 1e6 / statistics.median(cold[0]):,.0f} | {_res(cold[1])} |"]
    for name, ts in parts.items():
        lines.append(f"| breakdown (warm): {name} | {_ms(ts)} | "
                     f"{size / 1e6 / max(statistics.median(ts), 1e-9):,.0f} | |")
    verdict = "met" if med_warm <= TARGET_S else "NOT met"
    lines += ["", f"Target (warm reload ≤ {TARGET_S} s): {med_warm:.3f} s, {verdict}.", "",
              "Objects made by one `cache.load` (file and store kept alive while counting):", "",
              f"- gc-tracked objects: {objs['gc']:+,} ({objs['gc'] / n:.6f} per image)",
              f"- allocated blocks (`sys.getallocatedblocks`, every Python object): {objs['blocks']:+,}",
              f"- tracemalloc: peak {objs['peak'] / 1e6:.1f} MB, retained {objs['current'] / 1e6:.1f} MB "
              f"(the file's {size / 1e6:.1f} MB are mapped, not allocated, so not counted here; "
              f"{objs['views']} of the store's {objs['n_arrays']} arrays are views of the mapping)",
              "", f"Dataset-style access ({acc['n']:,} random images; first 1,000 and 200 polygon images "
                  "checked against the generated data):", "",
              f"- `store.im_file(i)`: {acc['im_file'] * 1e6:.2f} µs, `store.labels_of(i)`: "
              f"{acc['labels_of'] * 1e6:.2f} µs, `store.segments_of(i)` ({acc['n_seg']:,} polygon images): "
              f"{acc['segments_of'] * 1e6:.1f} µs, `ImageFiles(store)[i]` + `Labels(store)[i]`: "
              f"{acc['lazy'] * 1e6:.2f} µs per call",
              f"- e.g. image {acc['example'][0]}: `{acc['example'][1]}`, first rows {acc['example'][2]}, "
              f"{acc['example'][3]} polygons; `len(ImageFiles(store))` = {acc['example'][4]:,}, "
              f"`Labels(store)` = `{acc['example'][5]}`"]
    if fr:
        per = (fr["make"] + fr["build"]) / fr["n"]
        lines += ["", f"Per-image build for comparison ({fr['n']:,} images): making one `PairRecord` per image "
                      f"{fr['make']:.2f} s, `LabelStore.from_records` {fr['build']:.2f} s "
                      f"({fr['build'] / fr['n'] * 1e6:.1f} µs/image; both together ≈ {per * n:.1f} s for "
                      f"{n:,} images)."]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="images (default 1,000,000)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--poly-frac", type=float, default=0.01, help="share of images with polygons (default 0.01)")
    p.add_argument("--samples", type=int, default=100_000, help="random accesses timed (default 100,000)")
    p.add_argument("--from-records-n", type=int, default=200_000,
                   help="images in the per-image from_records comparison (0: skip; default 200,000)")
    p.add_argument("--tmp", type=Path, default=None, help="parent of the temporary folder (default: system tmp)")
    common.add_result_options(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    log(f"building a {args.n:,}-image store ...")
    t_build, (store, ids, n_poly_rows) = timed(lambda: build_store(args.n, args.seed, args.poly_frac))
    with tempfile.TemporaryDirectory(prefix="bench_reload_1m_", dir=args.tmp) as tmp:
        cfile = Path(tmp) / "train.cache"
        t_save, _ = timed(lambda: cache.save(cfile, contents_of(store)))
        log(f"built in {t_build:.1f} s, saved {cfile.stat().st_size / 1e6:.0f} MB in {t_save:.1f} s; timing loads ...")
        cache.load(cfile)  # one untimed load: page cache and allocator warm
        warm = time_loads(cfile, args.repeats, cold=False)
        cold = time_loads(cfile, args.repeats, cold=True)
        parts = time_breakdown(cfile, args.repeats)
        objs = object_counts(cfile)
        acc = check_access(objs["contents"].store, store, ids, args.samples, args.seed)
        del objs["contents"]
        gc.collect()
        fr = None
        if args.from_records_n:
            log(f"per-image from_records build of {min(args.from_records_n, args.n):,} images ...")
            fr = time_from_records(store, min(args.from_records_n, args.n))
        print(report(args, store, n_poly_rows, cfile, t_build, t_save, warm, cold, parts, objs, acc, fr,
                     load_before, os.getloadavg()))
        print("\n" + common.footer())
        size = cfile.stat().st_size
    med = common.med
    common.write_result("reload-1m", {
        "images": args.n, "polygon_rows": n_poly_rows, "cache_file_bytes": size, "build_s": t_build, "save_s": t_save,
        "warm_load_s": warm[0], "warm_load_median_s": med(warm[0]), "warm_resident_before": warm[1],
        "cold_load_s": cold[0], "cold_load_median_s": med(cold[0]), "cold_resident_before": cold[1],
        "breakdown_s": parts, "breakdown_median_s": {k: med(v) for k, v in parts.items()},
        "objects": objs, "access_s_per_call": acc, "from_records_s": fr}, args, datasets=[f"n{args.n}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
