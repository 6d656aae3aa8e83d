"""High-resolution photos: a generated set of 12-megapixel photo-like JPEGs (4032x3024, as phones and
drones write them; every 4th one stored on its side with EXIF orientation 6), YOLO labels beside them.

    python benchmarks/speed/run.py highres make OUT [--unique 200] [--n 1000]
    python benchmarks/speed/run.py highres decode OUT           # per-image decode + resize, full vs reduced
    python benchmarks/speed/run.py highres cache OUT [--opencv] # disk image cache build, full vs reduced

``make`` writes ``OUT/images/train`` and ``OUT/labels/train`` (``--unique`` generated photos, then
hard links up to ``--n`` images, each with its own label file) and ``OUT/highres.yaml``; an existing
complete set is reused.  The training-loader comparison with the peers runs through
``bench_train.py --data OUT/highres.yaml`` (same loaders, settings and report as the other sets).
``decode`` times yolo_data's ``load_image`` on the set's first images at imgsz 640, full and reduced
decode alternating, and reports the pixel difference between the two (mean and 99th percentile of
absolute differences, in levels of 255).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path)
from common import footer, log  # noqa: E402

W, H = 4032, 3024  # a 12-megapixel phone photo
EXIF_EVERY = 4  # every 4th photo is stored on its side, with EXIF orientation 6


def photo(seed: int) -> np.ndarray:
    """(H, W, 3) uint8 RGB, photo-like: smooth shapes and gradients (made at 1/4 size and enlarged),
    film grain, and a few sharp-edged objects, so that it compresses like a photo (a few MB at q 92)."""
    rng = np.random.default_rng(seed)
    h, w = H // 4, W // 4
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = rng.uniform(60, 200, 3).astype(np.float32)
    img = base + np.stack([40 * np.sin(x / rng.uniform(40, 120) + c) * np.cos(y / rng.uniform(40, 120))
                           for c in rng.uniform(0, 6, 3)], -1)
    for _ in range(12):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(w / 30, w / 6)
        img += rng.uniform(-90, 90, 3) * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None]
    img = cv2.resize(np.clip(img, 0, 255).astype(np.uint8), (W, H), interpolation=cv2.INTER_CUBIC)
    for _ in range(8):  # objects with hard edges
        x0, y0 = int(rng.uniform(0, W - 400)), int(rng.uniform(0, H - 400))
        cv2.rectangle(img, (x0, y0), (x0 + int(rng.uniform(80, 400)), y0 + int(rng.uniform(80, 400))),
                      tuple(int(v) for v in rng.integers(0, 255, 3)), -1)
    grain = np.empty((H, W, 3), np.int16)
    cv2.randn(grain, 0, 10)
    return np.clip(img.astype(np.int16) + grain, 0, 255).astype(np.uint8)


def boxes(rng: np.random.Generator, k: int) -> str:
    rows = []
    for _ in range(k):
        w, h = rng.uniform(0.03, 0.3), rng.uniform(0.03, 0.3)
        rows.append(f"{rng.integers(0, 3)} {rng.uniform(w / 2, 1 - w / 2):.6f} {rng.uniform(h / 2, 1 - h / 2):.6f} "
                    f"{w:.6f} {h:.6f}")
    return "\n".join(rows) + "\n"


def make(out: Path, unique: int, n: int) -> Path:
    img_dir, lb_dir = out / "images" / "train", out / "labels" / "train"
    yaml = out / "highres.yaml"
    if yaml.exists() and len(list(img_dir.glob("*.jpg"))) == n:
        log(f"reusing {n} images in {out}")
        return yaml
    img_dir.mkdir(parents=True, exist_ok=True)
    lb_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for k in range(unique):
        f = img_dir / f"{k:05d}.jpg"
        if not f.exists():
            rgb = photo(k)
            exif = Image.Exif()
            if k % EXIF_EVERY == 1:  # stored on its side: the decoder turns it upright (3024 x 4032)
                rgb = np.ascontiguousarray(np.rot90(rgb, 1))
                exif[0x0112] = 6
            Image.fromarray(rgb).save(f, quality=92, exif=exif.tobytes())
        (lb_dir / f"{k:05d}.txt").write_text(boxes(rng, int(rng.integers(2, 12))))
        if k % 20 == 19:
            log(f"{k + 1}/{unique} photos, {time.perf_counter() - t0:.0f} s")
    for k in range(unique, n):  # hard links: more images for the sampler, no more disk
        f = img_dir / f"{k:05d}.jpg"
        if not f.exists():
            os.link(img_dir / f"{k % unique:05d}.jpg", f)
        (lb_dir / f"{k:05d}.txt").write_text(boxes(rng, int(rng.integers(2, 12))))
    yaml.write_text(f"path: {out.resolve()}\ntrain: images/train\nval: images/train\nnames: [a, b, c]\n")
    size = sum(f.stat().st_size for f in list(img_dir.glob("*.jpg"))[:unique]) / unique / 2**20
    log(f"{unique} photos ({size:.1f} MB each on average), {n} images, in {time.perf_counter() - t0:.0f} s")
    return yaml


def decode(out: Path, count: int, imgsz: int, repeats: int) -> dict:
    """Per image: yolo_data's ``load_image`` (decode + resize to ``imgsz``), full and reduced decode, by
    OpenCV alone and with simplejpeg where installed (decode.py), all alternating; one line per decoder."""
    from yolo_data.images import decode as decoding
    from yolo_data.images.load import load_image
    from yolo_data.labels.verify import image_size
    cv2.setNumThreads(1)
    files = sorted((out / "images" / "train").glob("*.jpg"))[:count]
    decoders = ["OpenCV"] + (["simplejpeg"] if decoding.simplejpeg_module() is not None else [])
    times = {(dec, r): [] for dec in decoders for r in (False, True)}
    diffs, sizes = [], set()
    try:
        for f in files:
            (h0, w0), _ = image_size(str(f))
            sizes.add(f"{max(w0, h0)}x{min(w0, h0)}")
            for _ in range(repeats):
                for dec, reduced in times:
                    decoding.use_simplejpeg(dec == "simplejpeg")
                    t = time.perf_counter()
                    load_image(str(f), imgsz, True, (h0, w0), reduced)
                    times[dec, reduced].append(time.perf_counter() - t)
            full, fast = (load_image(str(f), imgsz, True, (h0, w0), r).img.astype(np.int16) for r in (False, True))
            diffs.append(np.abs(full - fast).ravel())
    finally:
        decoding.use_simplejpeg(True)
    d = np.concatenate(diffs)
    print(f"decode + resize to {imgsz} ({len(files)} photos of {', '.join(sorted(sizes))}, {repeats} alternating "
          f"rounds, median, OpenCV 1 thread):")
    ms = {k: 1000 * statistics.median(v) for k, v in times.items()}
    for dec in decoders:
        full_ms, fast_ms = ms[dec, False], ms[dec, True]
        print(f"- {dec}: full {full_ms:.1f} ms, reduced {fast_ms:.1f} ms ({full_ms / fast_ms:.2f}x)")
    print(f"pixel difference full vs reduced: mean {d.mean():.2f}, 99th percentile {np.percentile(d, 99):.0f} "
          "levels of 255 (the decoders give the same pixels: tests/images/test_decode.py)")
    return {"photos": len(files), "sizes": sorted(sizes),
            "decoders": {dec: {"full_s": times[dec, False], "reduced_s": times[dec, True],
                               "full_median_ms": ms[dec, False], "reduced_median_ms": ms[dec, True]}
                         for dec in decoders},
            "pixel_difference_mean": float(d.mean()), "pixel_difference_p99": float(np.percentile(d, 99))}


def cache_build(out: Path, imgsz: int, repeats: int, workers: int, opencv: bool = False) -> dict:
    """Seconds to build a disk image cache of the whole set (training resize), full and reduced decode
    alternating, each into a fresh temporary folder (removed afterwards).  ``opencv``: every JPEG decoded
    by OpenCV (no simplejpeg)."""
    import logging
    import shutil
    import tempfile
    from yolo_data import LoadImagesAndLabels
    logging.getLogger("yolo_data").setLevel(logging.ERROR)
    from yolo_data.images import decode as decoding
    decoding.use_simplejpeg(not opencv)
    yaml = out / "highres.yaml"
    LoadImagesAndLabels(str(yaml), imgsz, augment=True, split="train")  # the label cache, outside the timing
    times = {False: [], True: []}
    for _ in range(repeats):
        for reduced in (False, True):
            tmp = Path(tempfile.mkdtemp(prefix="highres_cache_"))
            try:
                t = time.perf_counter()
                ds = LoadImagesAndLabels(str(yaml), imgsz, augment=True, split="train", cache_images="disk",
                                 cache_dir=str(tmp), reduced_decode=reduced, workers=workers)
                times[reduced].append(time.perf_counter() - t)
                n = int(ds.image_cache.ok.sum())
                del ds
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    full, fast = (statistics.median(times[r]) for r in (False, True))
    print(f"disk image cache build at {imgsz} ({n} images, {workers} decode threads, "
          f"{'OpenCV' if opencv or decoding.simplejpeg_module() is None else 'simplejpeg'}, median of {repeats}, "
          f"alternating): full decode {full:.1f} s, reduced {fast:.1f} s ({full / fast:.2f}x)")
    return {"images": n, "decoder": "OpenCV" if opencv or decoding.simplejpeg_module() is None else "simplejpeg",
            "full_s": times[False], "reduced_s": times[True], "full_median_s": full, "reduced_median_s": fast}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="generate the set")
    m.add_argument("out", type=Path)
    m.add_argument("--unique", type=int, default=200, help="generated photos (default 200)")
    m.add_argument("--n", type=int, default=1000, help="images in all, hard links after --unique (default 1000)")
    d = sub.add_parser("decode", help="time full vs reduced decode on the set")
    d.add_argument("out", type=Path)
    d.add_argument("--count", type=int, default=20)
    d.add_argument("--imgsz", type=int, default=640)
    d.add_argument("--repeats", type=int, default=3)
    common.add_result_options(d)
    c = sub.add_parser("cache", help="time a disk image cache build, full vs reduced decode")
    c.add_argument("out", type=Path)
    c.add_argument("--imgsz", type=int, default=640)
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--workers", type=int, default=2)
    c.add_argument("--opencv", action="store_true", help="decode every JPEG by OpenCV (no simplejpeg)")
    common.add_result_options(c)
    a = ap.parse_args(argv)
    if a.cmd == "make":
        print(make(a.out, a.unique, max(a.n, a.unique)))
        print(footer())
        return 0
    if a.cmd == "decode":
        results = decode(a.out, a.count, a.imgsz, a.repeats)
    else:
        results = cache_build(a.out, a.imgsz, a.repeats, a.workers, a.opencv)
    print(footer())
    common.write_result("highres", results, a, datasets=[a.cmd + ("-opencv" if getattr(a, "opencv", False) else ""),
                                                         a.out.name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
