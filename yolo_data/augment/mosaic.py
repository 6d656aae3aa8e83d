"""Multi-image augmentations: 4- and 9-image mosaics, mixup and copy-paste (YOLOv5's numbers), and
Ultralytics' copy-paste rule (from the image itself or from another) and CutMix.

Every function takes `Sample`s whose boxes are pixel xyxy float32 on their own image and returns a
new `Sample`; inputs are never modified.  Random decisions come from an explicit generator; the
choice of which images to combine belongs to the caller.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np

from ..geometry.boxes import bbox_ioa
from ..geometry.shapes import pad_value
from .layout import Layout, placed
from .perspective import flip_lr, is_axis_aligned
from .sample import Sample, box_polygons


def mosaic_border(img_size: int) -> Tuple[int, int]:
    """(bh, bw) border for `random_perspective` that crops a (2s, 2s) mosaic canvas back to (s, s)."""
    return -img_size // 2, -img_size // 2


def mosaic_centre(rng: np.random.Generator, img_size: int) -> Tuple[int, int]:
    """(xc, yc) int mosaic centre on the (2s, 2s) canvas, each U(s/2, 3s/2) truncated to int.

    Drawn y first, then x, as YOLOv5 does.  Keeping the centre away from the canvas edges makes each
    of the four tiles show up in the s x s crop that the perspective step later keeps."""
    lo = -mosaic_border(img_size)[0]
    yc = int(rng.uniform(lo, 2 * img_size - lo))
    xc = int(rng.uniform(lo, 2 * img_size - lo))
    return xc, yc


def _shifted(part: Sample, dx: float, dy: float, size: float) -> Sample:
    """``part``'s boxes and polygons moved by (dx, dy) and clipped to [0, size], its extras moved onto
    a ``size`` square (new arrays)."""
    shift = np.array([dx, dy], np.float32)
    boxes = (part.boxes + np.array([dx, dy, dx, dy], np.float32)).clip(0, size).astype(np.float32)
    segments = [(s + shift).clip(0, size).astype(np.float32) for s in part.segments]
    return Sample(part.img, part.cls, boxes, segments, part.moved_extras(lambda p: p + (dx, dy), (size, size)))


def canvas_bands(bands: int) -> int:
    """The channels of a mosaic canvas for tiles of ``bands`` channels: 4 (BGRA) for 3-channel BGR tiles,
    since OpenCV's linear affine warp that follows a mosaic runs about three times faster on 4 channels
    than on 3 (the pipeline drops the alpha channel after the warp); ``bands`` otherwise."""
    return 4 if bands == 3 else bands


def _canvas(parts: Sequence[Sample], side: int) -> np.ndarray:
    """A (side, side, canvas_bands(C)) canvas of PAD_VALUE for tiles of C channels, of the tiles' dtype
    (uint8, or uint16 with the same grey at 16 bits: geometry.shapes.pad_value)."""
    img = parts[0].img
    return np.full((side, side, canvas_bands(img.shape[2])), pad_value(img.dtype), dtype=img.dtype)


def _paste(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy a tile region into a canvas region of the same size: BGR into BGRA, else band for band."""
    if not dst.size:
        return
    if src.shape[2] == 3 and dst.shape[2] == 4:
        cv2.cvtColor(src, cv2.COLOR_BGR2BGRA, dst=dst)  # writes straight into the canvas region
    else:
        dst[...] = src


def _tiles(parts: List[Sample], img_size: int, centre: Tuple[int, int]):
    """Per part: (left, top) of the whole tile on the (2s, 2s) canvas and the visible canvas region
    (x1, y1, x2, y2) after cutting it at the canvas edge.  Part 0 top-left of the centre, 1 top-right,
    2 bottom-left, 3 bottom-right."""
    if len(parts) != 4:
        raise ValueError(f"mosaic4 needs 4 samples, got {len(parts)}")
    s2 = 2 * img_size
    xc, yc = int(centre[0]), int(centre[1])
    out = []
    for i, part in enumerate(parts):
        h, w = part.img.shape[:2]
        left = xc - w if i in (0, 2) else xc
        top = yc - h if i in (0, 1) else yc
        out.append((left, top, max(left, 0), max(top, 0), min(left + w, s2), min(top + h, s2)))
    return out


def mosaic4(parts: List[Sample], img_size: int, centre: Tuple[int, int]) -> Sample:
    """Four samples on one (2s, 2s, canvas_bands(C)) uint8 canvas (s = ``img_size``) filled with
    PAD_VALUE: BGRA for (h, w, 3) BGR parts, else the parts' C bands in their order.

    ``parts``: 4 Samples, each already resized so its long side is s.  ``centre``: (xc, yc) int, where
    the four tiles meet (see `mosaic_centre`).  Part 0 goes top-left of the centre, 1 top-right,
    2 bottom-left, 3 bottom-right; each tile keeps the corner that touches the centre and is cut by the
    canvas edge.  Boxes and polygons are shifted onto the canvas and clipped to [0, 2s]; boxes cut to
    nothing are kept (the perspective step that follows drops them, as in YOLOv5).
    """
    s2 = 2 * img_size
    regions = _tiles(parts, img_size, centre)
    moved = [_shifted(part, left, top, s2) for part, (left, top, *_) in zip(parts, regions)]
    return Sample.concat(moved, _placed_pixels(parts, [r + (0, 0) for r in regions], (s2, s2)))


def _placed_pixels(parts: Sequence[Sample], regions, hw: Tuple[int, int]):
    """An (h, w, canvas_bands(C)) canvas of PAD_VALUE with each part's image drawn at its region (left,
    top, x1, y1, x2, y2, dx, dy): the tile whose top-left corner is at (left, top) on a larger plane, cut
    to [x1, x2) x [y1, y2) there, lands moved by (-dx, -dy) on the canvas.  For parts that are layouts
    (layout.py), the layout of that canvas."""
    if isinstance(parts[0].img, Layout):
        return placed(hw, [(p.img, (x1 - left, y1 - top, x2 - left, y2 - top), (x1 - dx, y1 - dy, x2 - dx, y2 - dy))
                           for p, (left, top, x1, y1, x2, y2, dx, dy) in zip(parts, regions)])
    canvas = _canvas(parts, hw[0])
    for part, (left, top, x1, y1, x2, y2, dx, dy) in zip(parts, regions):
        _paste(canvas[y1 - dy:y2 - dy, x1 - dx:x2 - dx], part.img[y1 - top:y2 - top, x1 - left:x2 - left])
    return canvas


def _span(a: float, b: float, lo: int, hi: int, size: int):
    """One axis of a tile for `mosaic4_resized`: the canvas range [lo, hi) mapped by o = a * X + b,
    rounded to whole output pixels [o1, o2) inside [0, size]; the whole canvas pixels [X1, X2) that
    map onto it; and the map (k, t), o = k * X + t, that resizing [X1, X2) onto [o1, o2) makes.
    None when nothing of the range is visible."""
    def whole(v):
        return math.floor(v + 0.5)
    o1, o2 = (min(max(whole(a * v + b), 0), size) for v in (lo, hi))
    if o2 <= o1 or hi <= lo:
        return None
    X1, X2 = (min(max(whole((o - b) / a), lo), hi) for o in (o1, o2))
    if X2 <= X1:  # less than a source pixel is visible: take one
        X1, X2 = (X1, X1 + 1) if X1 < hi else (X2 - 1, X2)
    k = (o2 - o1) / (X2 - X1)
    return o1, o2, X1, X2, k, o1 - k * X1


def mosaic4_resized(parts: List[Sample], img_size: int, centre: Tuple[int, int], M: np.ndarray):
    """``mosaic4`` followed by an axis-aligned affine ``M`` (scale and translation only: no rotation,
    shear or perspective) onto the (s, s) output, without the (2s, 2s) canvas.

    Each tile's visible part is resized (cv2.resize, bilinear: several times cheaper than a warp)
    straight into its rectangle of the output.  That rectangle is M's image of the tile's canvas
    region with its edges rounded to whole pixels, so neighbouring tiles share their seam (no gap, no
    overlap); it is filled from the whole source pixels that M maps onto it.  Each tile therefore
    moves by its own matrix, within half a source pixel of M at its edges, and that tile's boxes and
    polygons go through the same matrix: pixels and boxes agree exactly.

    ``parts``: 4 Samples with (h, w, C) uint8 images, any C >= 1 (3: BGR).  Returns ``(sample,
    blocks)``: the (s, s, C) output with the boxes and polygons still in canvas coordinates (as
    `mosaic4` places them), and per part (its number of boxes, its (3, 3) canvas-to-output matrix), for
    ``perspective.warp_sample(sample, M, ..., warped_img=sample.img, row_blocks=blocks)``.
    """
    if not is_axis_aligned(M):
        raise ValueError("mosaic4_resized takes scale and translation only")
    s, s2 = img_size, 2 * img_size
    deferred = isinstance(parts[0].img, Layout)
    bands = parts[0].img.shape[2]
    dtype = None if deferred else parts[0].img.dtype  # uint8, or uint16 (16 bits kept)
    out = None if deferred else np.full((s, s, bands), pad_value(dtype), dtype=dtype)
    moved, blocks, tiles = [], [], []
    for part, (left, top, x1, y1, x2, y2) in zip(parts, _tiles(parts, img_size, centre)):
        moved.append(_shifted(part, left, top, s2))
        cols, rows = _span(M[0, 0], M[0, 2], x1, x2, s), _span(M[1, 1], M[1, 2], y1, y2, s)
        if cols is None or rows is None:  # the tile is outside the output: its boxes are clipped away
            blocks.append((len(part), M))
            continue
        (c1, c2, u1, u2, kx, tx), (r1, r2, v1, v2, ky, ty) = cols, rows
        if deferred:
            tiles.append((part.img, (u1 - left, v1 - top, u2 - left, v2 - top), (c1, r1, c2, r2)))
        else:
            src = part.img[v1 - top:v2 - top, u1 - left:u2 - left, :bands]
            # OpenCV resizes any number of bands as it resizes each alone, straight into the region
            cv2.resize(src, dsize=(c2 - c1, r2 - r1), dst=out[r1:r2, c1:c2], interpolation=cv2.INTER_LINEAR)  # (cols, rows)
        blocks.append((len(part), np.array([[kx, 0.0, tx], [0.0, ky, ty], [0.0, 0.0, 1.0]])))
    return Sample.concat(moved, placed((s, s), tiles) if deferred else out), blocks


def mosaic9(parts: List[Sample], img_size: int, rng: np.random.Generator) -> Sample:
    """Nine samples in a 3x3 layout on a (3s, 3s) canvas, then a random (2s, 2s, canvas_bands(C)) uint8
    crop (BGRA for BGR parts, as `mosaic4`).

    ``parts``: 9 Samples resized to long side s.  Part 0 sits at (s, s); then, clockwise from the top:
    1 above it, 2 top-right, 3 right, 4 bottom-right, 5 below, 6 bottom-left, 7 left, 8 top-left, each
    laid against its neighbours as YOLOv5 does (so tiles of different sizes leave gaps of PAD_VALUE).
    The crop's top-left corner is (int U(0, s), int U(0, s)), drawn y first.  Boxes and polygons are
    shifted into the crop and clipped to [0, 2s].
    """
    if len(parts) != 9:
        raise ValueError(f"mosaic9 needs 9 samples, got {len(parts)}")
    s = img_size
    h0, w0 = parts[0].img.shape[:2]
    hp = wp = 0  # size of the previous tile, which the next one is laid against
    origins = []
    for i, part in enumerate(parts):
        h, w = part.img.shape[:2]
        left, top = [(s, s), (s, s - h), (s + wp, s - h), (s + w0, s), (s + w0, s + hp),
                     (s + w0 - w, s + h0), (s + w0 - wp - w, s + h0), (s - w, s + h0 - h),
                     (s - w, s + h0 - hp - h)][i]
        origins.append((left, top))
        hp, wp = h, w
    yc, xc = int(rng.uniform(0, s)), int(rng.uniform(0, s))
    # Each tile cut at the near edges of the 3s plane (tiles never pass its far ones: every side is
    # <= s) and at the 2s crop at (xc, yc) that is kept.
    regions = []
    for part, (left, top) in zip(parts, origins):
        h, w = part.img.shape[:2]
        x1, y1 = max(left, xc, 0), max(top, yc, 0)
        x2, y2 = max(min(left + w, xc + 2 * s), x1), max(min(top + h, yc + 2 * s), y1)
        regions.append((left, top, x1, y1, x2, y2, xc, yc))
    moved = [_shifted(p, left - xc, top - yc, 2 * s) for p, (left, top) in zip(parts, origins)]
    return Sample.concat(moved, _placed_pixels(parts, regions, (2 * s, 2 * s)))


def mixup(a: Sample, b: Sample, rng: np.random.Generator) -> Sample:
    """Blend two samples of the same image shape: img = a * r + b * (1 - r), truncated to uint8 (to
    uint16 for 16-bit images, the same rule), with r ~ Beta(32, 32) (so r stays near 0.5), and the
    boxes of both.  Returns a new Sample."""
    if a.img.shape != b.img.shape:
        raise ValueError(f"mixup needs images of one shape, got {a.img.shape} and {b.img.shape}")
    r = rng.beta(32.0, 32.0)
    img = a.img.blended(b.img, r) if isinstance(a.img, Layout) else (a.img * r + b.img * (1 - r)).astype(a.img.dtype)
    return Sample.concat([a, b], img)


def copy_paste(sample: Sample, p: float, rng: np.random.Generator) -> Sample:
    """Copy-paste (Ghiasi et al. 2021) as YOLOv5 does it: objects mirrored left-right in place.

    ``sample``: pixel xyxy boxes with one polygon each (without polygons, or with ``p`` 0, the sample
    is returned as is).  A random ``round(p * n)`` of the n objects, in random order, are candidates;
    a candidate's mirrored box (x -> W - x) is added, with its class and mirrored polygon, when it
    would cover less than 30% of every box present so far; the image pixels inside each accepted
    mirrored polygon are taken from the mirrored image.  Returns a new Sample (new image array).
    """
    n = len(sample.segments)
    if not p or not n:
        return sample
    h, w = sample.img.shape[:2]
    cls, boxes, segments = list(sample.cls), list(sample.boxes), list(sample.segments)
    pasted = []  # the objects copied, whose extras are mirrored with them
    mask = np.zeros((h, w), np.uint8)  # filled source polygons; mirrored below with the image
    for j in rng.choice(n, size=round(p * n), replace=False):
        x1, y1, x2, y2 = sample.boxes[j]
        box = np.array([w - x2, y1, w - x1, y2], np.float32)
        if (bbox_ioa(box, np.array(boxes)) < 0.30).all():
            cls.append(sample.cls[j])
            boxes.append(box)
            seg = sample.segments[j]
            segments.append(np.stack([w - seg[:, 0], seg[:, 1]], 1).astype(np.float32))
            pasted.append(j)
            cv2.drawContours(mask, [seg.astype(np.int32)], -1, 1, cv2.FILLED)
    img = sample.img.copy()
    paste = mask[:, ::-1].astype(bool)
    img[paste] = sample.img[:, ::-1][paste]
    extras = {k: e.joined([e.select(np.array(pasted, np.int64)).mirrored(w)]) for k, e in sample.extras.items()}
    return Sample(img, np.array(cls, np.float32).reshape(-1), np.array(boxes, np.float32).reshape(-1, 4),
                  segments, extras)


def _ioa(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) float64: the intersection of each pixel xyxy box of ``a`` (n, 4) with each of ``b``
    (m, 4), over the area of the box of ``b`` (the share of b's box that a's covers)."""
    a = np.asarray(a, np.float64).reshape(-1, 1, 4)
    b = np.asarray(b, np.float64).reshape(1, -1, 4)
    iw = (np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])).clip(0)
    ih = (np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])).clip(0)
    return iw * ih / ((b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) + 1e-7)


def paste_objects(sample: Sample, p: float, source: Optional[Sample] = None) -> Sample:
    """Copy-paste by Ultralytics' rule (its CopyPaste): no randomness once ``source`` is chosen.

    ``sample``: pixel xyxy boxes with one polygon each; without polygons, or with ``p`` 0, it is
    returned as is.  ``source``: a Sample of the same image shape whose objects are pasted ('mixup'
    mode; its boxes' rectangles stand in for missing polygons), or None for ``sample`` mirrored
    left-right ('flip' mode).  Of the k source objects whose box covers less than 30% of every box of
    ``sample``, the round(p * k) that cover least (their largest share; ties in source order) are
    added with their class, polygon and extras, and the image pixels inside their polygons (filled
    with integer vertices) are taken from the source image.  Returns a new Sample (new image array).
    """
    if not p or not sample.segments:
        return sample
    src = flip_lr(sample) if source is None else source
    if src.img.shape[:2] != sample.img.shape[:2]:
        raise ValueError(f"copy-paste needs images of one size, got {sample.img.shape} and {src.img.shape}")
    ioa = _ioa(src.boxes, sample.boxes)
    ok = np.flatnonzero((ioa < 0.30).all(1))
    ok = ok[np.argsort(ioa.max(1)[ok], kind="stable")]
    chosen = ok[:round(p * len(ok))]
    if not len(chosen):
        return sample
    polygons = src.segments or box_polygons(src.boxes)
    mask = np.zeros(sample.img.shape[:2], np.uint8)
    for j in chosen:
        cv2.drawContours(mask, [polygons[j].astype(np.int32)], -1, 1, cv2.FILLED)
    img = sample.img.copy()
    pasted = mask.astype(bool)
    img[pasted] = src.img[pasted]
    return Sample.concat([sample, src.select(chosen)], img)


def cut_area(rng: np.random.Generator, w: int, h: int, beta: float = 1.0) -> Tuple[int, int, int, int]:
    """A random (x1, y1, x2, y2) int rectangle inside a (h, w) image, as Ultralytics' CutMix draws it:
    lam ~ Beta(beta, beta), sides int(w * sqrt(1 - lam)) and int(h * sqrt(1 - lam)) around a centre
    (int U[0, w), int U[0, h)), halves floored, cut at the image edges.  Drawn lam, x, then y."""
    cut = math.sqrt(1.0 - rng.beta(beta, beta))
    cw, ch = int(w * cut), int(h * cut)
    cx, cy = int(rng.integers(w)), int(rng.integers(h))
    return (min(max(cx - cw // 2, 0), w), min(max(cy - ch // 2, 0), h),
            min(max(cx + cw // 2, 0), w), min(max(cy + ch // 2, 0), h))


def cutmix(sample: Sample, other: Sample, rng: np.random.Generator, areas: int = 3, beta: float = 1.0) -> Sample:
    """CutMix (Yun et al. 2019) as Ultralytics does it: a rectangle of ``other`` pasted into ``sample``.

    ``sample``, ``other``: Samples of one image shape, pixel xyxy boxes.  ``areas`` rectangles are
    drawn (``cut_area``); one of those that touch no box of ``sample`` is taken at random (none: the
    sample is returned as is).  The objects of ``other`` with at least 1% of their box inside it (10%
    when ``sample`` has no polygons) are added, boxes and polygons clipped to the rectangle, extras
    too (keypoints outside it become invisible, then are clipped), and the rectangle's pixels are
    ``other``'s.  No object kept: ``sample`` as is.  Returns a new Sample (new image array).
    """
    if sample.img.shape != other.img.shape:
        raise ValueError(f"cutmix needs images of one shape, got {sample.img.shape} and {other.img.shape}")
    h, w = sample.img.shape[:2]
    rects = np.array([cut_area(rng, w, h, beta) for _ in range(areas)], np.float32)
    free = np.flatnonzero(_ioa(rects, sample.boxes).sum(1) <= 0)
    if not len(free):
        return sample
    area = rects[int(rng.choice(free))]
    keep = np.flatnonzero(_ioa(area[None], other.boxes)[0] >= (0.01 if sample.segments else 0.1))
    if not len(keep):
        return sample
    x1, y1, x2, y2 = (int(v) for v in area)
    img = sample.img.copy()
    img[y1:y2, x1:x2] = other.img[y1:y2, x1:x2]
    part = other.select(keep)
    lo, hi = np.array([x1, y1], np.float32), np.array([x2, y2], np.float32)
    boxes = np.concatenate([part.boxes[:, :2].clip(lo, hi), part.boxes[:, 2:].clip(lo, hi)], 1)
    segments = [s.clip(lo, hi).astype(np.float32) for s in part.segments]
    # extras: first onto the rectangle alone (what lies outside it is the kind's to handle: keypoints
    # become invisible), then back onto the image, clipped to the rectangle
    inside = part.moved_extras(lambda q: q - lo, (y2 - y1, x2 - x1))
    extras = {k: e.moved(lambda q: (q + lo).clip(lo, hi), (h, w)) for k, e in inside.items()}
    pasted = Sample(img, part.cls, boxes.astype(np.float32), segments, extras)
    return Sample.concat([Sample(img, sample.cls, sample.boxes, sample.segments, sample.extras), pasted], img)
