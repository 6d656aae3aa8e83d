"""Generate a synthetic, COCO-like YOLO detection (or segmentation) dataset for benchmarks and tests.

    python benchmarks/generators/make_synthetic.py OUT --n 2000 [--val 0] [--seed 0] [--size 640] [--quality 90]
    python benchmarks/generators/make_synthetic.py OUT --n 2000 --segments --objects 20 60   # polygons, dense scenes

Layout (YOLOv5 style)::

    OUT/images/train/000000000000.jpg   OUT/labels/train/000000000000.txt
    OUT/images/val/...                  OUT/labels/val/...          (only with --val N > 0)
    OUT/data.yaml                       (path: ., train, val, names: the 80 COCO names)

Images are meant to cost what real photos cost to read, decode and store: smooth gradients,
low-frequency "scene" noise, textured and shaded shapes, optical blur and sensor grain, so that a
640-px JPEG at quality 90 weighs roughly 120-180 KB like a COCO image (flat colours would compress to
a few KB and make every I/O number look far too good).

Every image has 1-15 objects (``--objects MIN MAX``).  Each label row is ``class x y w h`` (normalised,
6 decimals) and is the exact pixel extent of the shape as drawn, clipped to the image.  With
``--segments`` a row is ``class x1 y1 x2 y2 ...`` instead: the outline of the drawn shape (its largest
part where the image edge cuts it in two), through the centres of its border pixels, simplified to
within 1 pixel (cv2.findContours + approxPolyDP), as YOLOv5-seg and Ultralytics read segment labels.
Class frequencies are skewed like COCO's (class 0 "person" is by far the most common).  The default
settings write exactly what they wrote before these options existed.

Randomness: each image gets its own ``numpy.random.Generator`` derived from (seed, split, index) with
``SeedSequence``, so the output is identical whatever the number of worker processes or their order.
No global random state is used.

Importable: ``make_dataset(out, n, ...)`` returns the path of the written data.yaml.
"""
from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np

COCO_NAMES = [
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
    "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase",
    "scissors", "teddy bear", "hair drier", "toothbrush",
]
NC = len(COCO_NAMES)

# (long side, short side) aspect ratios and how often they occur; COCO is mostly 640x480 / 640x427
# landscape with a good share of portrait and some square images.
_ASPECTS = [((1.0, 0.75), 0.36), ((1.0, 0.667), 0.22), ((0.75, 1.0), 0.16), ((0.667, 1.0), 0.08),
            ((1.0, 1.0), 0.08), ((1.0, 0.5625), 0.06), ((0.781, 1.0), 0.04)]
# Zipf-like class frequencies: COCO's "person" alone is about a quarter of all boxes.
_CLASS_P = 1.0 / np.arange(1, NC + 1) ** 1.1
_CLASS_P /= _CLASS_P.sum()

OBJECTS = (1, 15)  # default (min, max) objects per image
MARKER = ".make_synthetic.json"  # written last: its presence means the dataset is complete

# Tuned so that the mean JPEG at 640 px / quality 90 lands near 150 KB (see the module docstring).
SCENE_AMPLITUDE = 38.0  # std of the background's 1/f brightness texture (0-255 scale)
SCENE_BETA = 0.9  # spectral slope: about 1 is typical of natural images; larger is smoother
CHROMA_FRACTION = 0.3  # colour texture relative to brightness texture
TEXTURE_AMPLITUDE = 32.0  # std of the objects' surface texture
GRAIN_SIGMA = 2.5  # sensor noise std


# -- image synthesis --------------------------------------------------------------------------------
def _image_rng(seed: int, split_id: int, index: int) -> np.random.Generator:
    """An independent generator per image, so results do not depend on worker count or order."""
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(split_id, index)))


def _image_size(rng: np.random.Generator, size: int) -> Tuple[int, int]:
    """(w, h) with long side ``size`` and a COCO-like aspect ratio."""
    ratios, weights = zip(*_ASPECTS)
    rw, rh = ratios[rng.choice(len(ratios), p=np.array(weights) / sum(weights))]
    return max(16, int(round(size * rw))), max(16, int(round(size * rh)))


@functools.lru_cache(maxsize=64)
def _spectral_filter(h: int, w: int, beta: float) -> np.ndarray:
    """1/f**beta over the rfft2 frequency grid of an (h, w) image (cached: few distinct sizes)."""
    fy = np.fft.fftfreq(h).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(w).astype(np.float32)[None, :]
    f = np.sqrt(fy * fy + fx * fx)
    f[0, 0] = 1.0  # keep the mean term finite; the mean is removed afterwards anyway
    return (1.0 / f ** beta).astype(np.float32)


def _pink_noise(rng: np.random.Generator, h: int, w: int, beta: float = 1.0) -> np.ndarray:
    """(h, w) float32 noise with a 1/f**beta amplitude spectrum, scaled to unit standard deviation.

    Natural images have roughly a 1/f amplitude spectrum: detail at every scale, which is what makes
    their JPEGs large.  White noise filtered in the Fourier domain gives the same statistics cheaply
    (float32 in, so NumPy >= 2 transforms in single precision).
    """
    spectrum = np.fft.rfft2(rng.standard_normal((h, w), dtype=np.float32))
    spectrum *= _spectral_filter(h, w, float(beta))
    out = np.fft.irfft2(spectrum, s=(h, w))
    out -= out.mean()
    return (out / max(float(out.std()), 1e-6)).astype(np.float32, copy=False)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A lit scene: a linear colour gradient plus 1/f texture, mostly in brightness (as in real
    scenes) with weaker independent colour variation."""
    c0, c1 = rng.uniform(30, 225, 3), rng.uniform(30, 225, 3)
    angle = rng.uniform(0, 2 * np.pi)
    # Broadcast a row and a column instead of materialising coordinate grids.
    t = (np.arange(w, dtype=np.float32)[None, :] * np.float32(np.cos(angle))
         + np.arange(h, dtype=np.float32)[:, None] * np.float32(np.sin(angle)))
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0.astype(np.float32) + (c1 - c0).astype(np.float32) * t[..., None]
    amp = SCENE_AMPLITUDE * rng.uniform(0.7, 1.3)  # some scenes are busier than others
    img += amp * _pink_noise(rng, h, w, SCENE_BETA)[..., None]
    # Colour texture at half resolution: cheaper, and JPEG keeps chroma at half resolution anyway.
    hh, hw = (h + 1) // 2, (w + 1) // 2
    chroma = np.stack([_pink_noise(rng, hh, hw, SCENE_BETA) for _ in range(3)], -1)
    img += CHROMA_FRACTION * amp * cv2.resize(chroma, (w, h), interpolation=cv2.INTER_LINEAR)
    return img


def _shape_mask(rng: np.random.Generator, kind: int, cx: float, cy: float, bw: float, bh: float,
                region: Tuple[int, int, int, int]) -> np.ndarray:
    """A uint8 0/255 mask of one ellipse, rotated rectangle or polygon, drawn into the image window
    ``region`` = (x0, y0, x1, y1) only (drawing outside it is clipped, as in the full image)."""
    x0, y0, x1, y1 = region
    mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cx, cy = cx - x0, cy - y0  # window coordinates
    angle = float(rng.uniform(0, 180))
    if kind == 0:
        cv2.ellipse(mask, (int(round(cx)), int(round(cy))), (max(1, int(bw / 2)), max(1, int(bh / 2))),
                    angle, 0, 360, 255, -1)
    elif kind == 1:
        box = cv2.boxPoints(((cx, cy), (bw, bh), angle if rng.random() < 0.5 else 0.0))
        cv2.fillPoly(mask, [np.round(box).astype(np.int32)], 255)
    else:
        k = int(rng.integers(5, 12))
        theta = np.sort(rng.uniform(0, 2 * np.pi, k))
        radius = rng.uniform(0.55, 1.0, k)
        pts = np.stack([cx + radius * bw / 2 * np.cos(theta), cy + radius * bh / 2 * np.sin(theta)], 1)
        cv2.fillPoly(mask, [np.round(pts).astype(np.int32)], 255)
    return mask


def _texture(rng: np.random.Generator, hh: int, ww: int, base: np.ndarray) -> np.ndarray:
    """Object surface for a (hh, ww) patch: base colour, a shading ramp, 1/f mottling and, for some
    objects, stripes (zebras, shirts, keyboards...)."""
    yy = np.arange(hh, dtype=np.float32)[:, None]
    xx = np.arange(ww, dtype=np.float32)[None, :]
    a = rng.uniform(0, 2 * np.pi)
    ramp = (xx * np.float32(np.cos(a)) + yy * np.float32(np.sin(a))) / np.float32(max(hh, ww))
    tex = base[None, None, :] * (0.75 + 0.5 * ramp[..., None])
    tex += TEXTURE_AMPLITUDE * rng.uniform(0.5, 1.5) * _pink_noise(rng, hh, ww, SCENE_BETA)[..., None]
    if rng.random() < 0.3:
        period = rng.uniform(4, 16)
        b = rng.uniform(0, np.pi)
        stripes = np.sin((xx * np.cos(b) + yy * np.sin(b)) * (2 * np.pi / period))
        tex += rng.uniform(15, 40) * stripes[..., None]
    return tex


def _class_colour(rng: np.random.Generator, cls: int) -> np.ndarray:
    """A BGR colour tied to the class (hue) with per-object jitter, so classes are learnable."""
    hue = (cls * 37) % 180
    hsv = np.uint8([[[hue, int(rng.integers(80, 230)), int(rng.integers(60, 240))]]])
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0].astype(np.float32)


def _outline(mask: np.ndarray) -> np.ndarray:
    """(k, 2) float pixel coordinates (x, y) of the outline of the largest part of a 0/255 mask, through
    its border pixels' centres, simplified to within 1 pixel; the mask's box corners when that leaves
    fewer than 3 points (a shape 1-2 pixels thin)."""
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    c = max(contours, key=cv2.contourArea)
    pts = cv2.approxPolyDP(c, 1.0, True).reshape(-1, 2).astype(np.float64) + 0.5
    if len(pts) < 3:
        h, w = mask.shape
        pts = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    return pts


def _draw_object(rng: np.random.Generator, img: np.ndarray, cls: int,
                 outline: bool = False) -> Optional[Tuple[Tuple[int, int, int, int], Optional[np.ndarray]]]:
    """Draw one object into ``img`` (float32, in place); return its pixel box x0, y0, x1, y1 (exclusive
    ends) measured from the drawn mask, so the label is exactly where the shape is, clipped, and with
    ``outline`` the (k, 2) pixel outline of the drawn mask (else None).  No extra random draws either way."""
    h, w = img.shape[:2]
    # COCO-like size spread: many small objects, some large (side as a fraction of the long side).
    side = float(np.exp(rng.uniform(np.log(0.04), np.log(0.75)))) * max(w, h)
    aspect = float(np.exp(rng.uniform(-0.9, 0.9)))
    bw, bh = max(6.0, side * np.sqrt(aspect)), max(6.0, side / np.sqrt(aspect))
    # Centres inside the image, so every object is at least partly visible; big ones get cut at edges.
    cx, cy = rng.uniform(0, w - 1), rng.uniform(0, h - 1)
    # Draw in a window that surely holds the shape at any rotation (half-diagonal + rounding margin).
    r = int(np.ceil(np.hypot(bw, bh) / 2)) + 2
    wx0, wy0 = max(0, int(cx) - r), max(0, int(cy) - r)
    wx1, wy1 = min(w, int(cx) + r + 2), min(h, int(cy) + r + 2)
    win = _shape_mask(rng, cls % 3, cx, cy, bw, bh, (wx0, wy0, wx1, wy1))
    ys, xs = np.nonzero(win.any(1))[0], np.nonzero(win.any(0))[0]
    if not len(ys):
        return None
    y0, y1, x0, x1 = wy0 + int(ys[0]), wy0 + int(ys[-1]) + 1, wx0 + int(xs[0]), wx0 + int(xs[-1]) + 1
    mask = win[y0 - wy0:y1 - wy0, x0 - wx0:x1 - wx0]
    # Soft (anti-aliased) edge inside the box only, so the label extent stays the hard mask's.
    alpha = cv2.GaussianBlur(mask, (3, 3), 0).astype(np.float32)[..., None] / 255.0
    alpha = np.maximum(alpha, (mask > 0)[..., None] * 0.85)
    tex = _texture(rng, y1 - y0, x1 - x0, _class_colour(rng, cls))
    roi = img[y0:y1, x0:x1]
    roi *= 1 - alpha
    roi += alpha * tex
    return (x0, y0, x1, y1), (_outline(mask) + (x0, y0) if outline else None)


Label = Tuple[int, Sequence[float]]  # class, normalised (x, y, w, h) or polygon (x1, y1, x2, y2, ...)


def synth_image(rng: np.random.Generator, size: int, objects: Tuple[int, int] = OBJECTS,
                segments: bool = False) -> Tuple[np.ndarray, List[Label]]:
    """One photo-like BGR uint8 image and its labels: (class, (x, y, w, h)) normalised, or with
    ``segments`` (class, (x1, y1, x2, y2, ...)) the shape's outline normalised; ``objects`` = (min, max)
    objects drawn (fewer labels where a shape falls wholly outside)."""
    w, h = _image_size(rng, size)
    img = _background(rng, h, w)
    labels = []
    for cls in rng.choice(NC, size=int(rng.integers(objects[0], objects[1] + 1)), p=_CLASS_P):
        drawn = _draw_object(rng, img, int(cls), outline=segments)
        if drawn is None:
            continue
        (x0, y0, x1, y1), outline = drawn
        if segments:
            labels.append((int(cls), tuple((outline / (w, h)).ravel())))
        else:
            labels.append((int(cls), ((x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h)))
    # A touch of lens blur (soft object edges), then sensor grain.
    img = cv2.GaussianBlur(img, (0, 0), rng.uniform(0.3, 0.6))
    img += GRAIN_SIGMA * rng.standard_normal(img.shape, dtype=np.float32)
    return np.clip(img, 0, 255).astype(np.uint8), labels


def label_text(labels: Sequence[Label]) -> str:
    """YOLO label file text: ``class x y w h`` (or ``class x1 y1 x2 y2 ...``) per row, coordinates with 6
    decimals, clipped to [0, 1]."""
    rows = []
    for cls, coords in labels:
        rows.append(f"{cls} " + " ".join(f"{min(max(v, 0.0), 1.0):.6f}" for v in coords))
    return "\n".join(rows) + "\n"


# -- writing ----------------------------------------------------------------------------------------
def _write_one(args) -> Tuple[int, int]:
    """Worker: synthesise, encode and write one image and its label file -> (jpeg bytes, objects)."""
    out, split, split_id, index, seed, size, quality, objects, segments = args
    img, labels = synth_image(_image_rng(seed, split_id, index), size, objects, segments)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError(f"JPEG encoding failed for image {index}")
    stem = f"{index:012d}"
    Path(out, "images", split, stem + ".jpg").write_bytes(buf.tobytes())
    Path(out, "labels", split, stem + ".txt").write_text(label_text(labels), encoding="utf-8")
    return len(buf), len(labels)


def _init_worker() -> None:
    # One OpenCV thread per process: the pool already uses every core, more threads only contend.
    cv2.setNumThreads(1)


def _write_yaml(out: Path, splits: Dict[str, int]) -> Path:
    """data.yaml in YOLOv5 form; plain text (yaml-compatible), so no yaml writer is needed."""
    lines = ["# synthetic COCO-like dataset written by benchmarks/generators/make_synthetic.py", "path: .",
             "train: images/train"]
    if splits.get("val"):
        lines.append("val: images/val")
    lines.append(f"nc: {NC}")
    lines.append("names:")
    lines += [f"  {i}: {json.dumps(name)}" for i, name in enumerate(COCO_NAMES)]
    path = out / "data.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _prepare(out: Path, splits: Dict[str, int], overwrite: bool) -> None:
    """Create the split folders; refuse to mix with an existing dataset unless ``overwrite``."""
    for split in splits:
        for kind in ("images", "labels"):
            d = out / kind / split
            if d.exists() and any(d.iterdir()):
                if not overwrite:
                    raise FileExistsError(f"{d} is not empty (use overwrite=True / --overwrite)")
                shutil.rmtree(d)
            d.mkdir(parents=True, exist_ok=True)
    stale = [out / "labels" / f"{s}{x}" for s in splits for x in (".cache", ".yolo_data.cache")]  # of older files
    for f in stale + [out / MARKER]:
        if f.exists():
            f.unlink()


def make_dataset(out, n: int, val: int = 0, seed: int = 0, size: int = 640, quality: int = 90,
                 workers: int = 2, overwrite: bool = False, verbose: bool = False, objects=OBJECTS,
                 segments: bool = False) -> Path:
    """Write ``n`` train (and ``val`` val) images with labels into ``out``; return the data.yaml path.
    ``objects``: (min, max) objects per image; ``segments``: polygon labels (module docstring).

    ``workers`` processes share the work (1: in this process).  The output depends only on
    (n, val, seed, size, quality, objects, segments), never on ``workers``.  A file
    ``out/.make_synthetic.json`` with the settings and stats is written last, so its presence marks a
    complete dataset.
    """
    out = Path(out)
    objects = (int(objects[0]), int(objects[1]))
    if not 0 <= objects[0] <= objects[1]:
        raise ValueError(f"objects={objects}: need 0 <= min <= max")
    splits = {"train": int(n)} if not val else {"train": int(n), "val": int(val)}
    _prepare(out, splits, overwrite)
    t0 = time.perf_counter()
    jobs = [(str(out), split, sid, i, int(seed), int(size), int(quality), objects, bool(segments))
            for sid, (split, count) in enumerate(splits.items()) for i in range(count)]
    if workers > 1 and len(jobs) > 1:
        # spawn, not fork: a process that already ran OpenCV (a test, or make_dataset with
        # workers=1) holds OpenCV's thread-pool locks, and forked children then hang in cv2 calls.
        with mp.get_context("spawn").Pool(workers, initializer=_init_worker) as pool:
            results = pool.map(_write_one, jobs, chunksize=8)
    else:
        results = [_write_one(j) for j in jobs]
    seconds = time.perf_counter() - t0
    yaml_path = _write_yaml(out, splits)
    sizes = np.array([r[0] for r in results], dtype=np.int64)
    boxes = int(sum(r[1] for r in results))
    stats = {"images": len(results), "splits": splits, "seed": int(seed), "size": int(size),
             "quality": int(quality), "bytes": int(sizes.sum()), "mean_kb": float(sizes.mean() / 1024),
             "min_kb": float(sizes.min() / 1024), "max_kb": float(sizes.max() / 1024), "boxes": boxes,
             "objects": list(objects), "segments": bool(segments), "seconds": round(seconds, 2),
             "workers": int(workers)}
    (out / MARKER).write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    if verbose:
        print(f"{stats['images']} images ({', '.join(f'{k} {v}' for k, v in splits.items())}), "
              f"{boxes} {'polygons' if segments else 'boxes'} ({boxes / len(results):.1f}/image) in {out}")
        print(f"total {sizes.sum() / 1e6:.1f} MB, mean {stats['mean_kb']:.1f} KB/image "
              f"(min {stats['min_kb']:.0f}, max {stats['max_kb']:.0f}), {seconds:.1f} s "
              f"({len(results) / seconds:.0f} images/s, {workers} processes)")
    return yaml_path


def dataset_settings(out) -> Dict:
    """The settings/stats a complete dataset in ``out`` was made with, or {} if incomplete/absent."""
    try:
        return json.loads(Path(out, MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder (created)")
    p.add_argument("--n", type=int, default=2000, help="train images (default 2000)")
    p.add_argument("--val", type=int, default=0, help="val images (default 0: no val split)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=640, help="long side in pixels (default 640)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    p.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    p.add_argument("--objects", type=int, nargs=2, default=list(OBJECTS), metavar=("MIN", "MAX"),
                   help="objects drawn per image (default 1 15)")
    p.add_argument("--segments", action="store_true", help="polygon labels (the drawn outlines) instead of boxes")
    p.add_argument("--overwrite", action="store_true", help="replace existing split folders in OUT")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        yaml_path = make_dataset(a.out, a.n, val=a.val, seed=a.seed, size=a.size, quality=a.quality,
                                 workers=a.workers, overwrite=a.overwrite, verbose=True, objects=a.objects,
                                 segments=a.segments)
    except (FileExistsError, ValueError) as e:
        print(f"make_synthetic: {e}", file=sys.stderr)
        return 2
    print(f"wrote {yaml_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
