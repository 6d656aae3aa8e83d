"""Random perspective (rotation, scale, shear, translation, perspective) and flips of a `Sample`.

Split in the detectron2 way so each step can be tested on its own:

1. ``draw_perspective`` only decides: it draws a `PerspectiveParams` from an explicit generator.
2. ``perspective_matrix`` turns the parameters into one deterministic (3, 3) matrix.
3. ``warp_sample`` applies a matrix to the image, the boxes and the polygons, then drops the boxes
   that ``box_candidates`` rejects (with their classes and polygons, via `Sample.select`).

The distributions and the matrix composition are YOLOv5's ``random_perspective``, so training sees
the same statistics.  All boxes are pixel xyxy float32 on the image they belong to.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np

from ..geometry.boxes import box_corners, clip_xyxy, resample_polygon, transform_points
from ..geometry.shapes import pad_value
from .layout import Layout
from .sample import Sample, join_extras

#: Points per polygon before warping: dense enough that the envelope of the points that stay inside
#: the image is a good box for a polygon cut by the border (YOLOv5's number).
POLYGON_POINTS = 1000


@dataclass
class PerspectiveParams:
    """One draw of the random perspective.

    ``angle``: rotation in degrees (positive turns counter-clockwise on screen).  ``scale``: isotropic
    scale.  ``shear_x``/``shear_y``: shear angles in degrees.  ``perspective_x``/``perspective_y``: the
    homography's bottom-row terms.  ``translate_x``/``translate_y``: where the input centre lands, as a
    fraction of the output width/height (0.5 = centred).
    """
    angle: float = 0.0
    scale: float = 1.0
    shear_x: float = 0.0
    shear_y: float = 0.0
    perspective_x: float = 0.0
    perspective_y: float = 0.0
    translate_x: float = 0.5
    translate_y: float = 0.5


def draw_perspective(rng: np.random.Generator, degrees: float = 10.0, translate: float = 0.1,
                     scale: float = 0.1, shear: float = 10.0, perspective: float = 0.0) -> PerspectiveParams:
    """Uniform draws as YOLOv5: angle U(-degrees, degrees), scale U(1-scale, 1+scale), each shear
    U(-shear, shear), each perspective term U(-perspective, perspective), each translation
    U(0.5-translate, 0.5+translate).  Always eight draws, in YOLOv5's order, even for zero ranges, so
    the generator advances the same way whatever the hyper-parameters."""
    px, py = rng.uniform(-perspective, perspective), rng.uniform(-perspective, perspective)
    angle = rng.uniform(-degrees, degrees)
    s = rng.uniform(1 - scale, 1 + scale)
    sx, sy = rng.uniform(-shear, shear), rng.uniform(-shear, shear)
    tx, ty = rng.uniform(0.5 - translate, 0.5 + translate), rng.uniform(0.5 - translate, 0.5 + translate)
    return PerspectiveParams(angle=float(angle), scale=float(s), shear_x=float(sx), shear_y=float(sy),
                             perspective_x=float(px), perspective_y=float(py),
                             translate_x=float(tx), translate_y=float(ty))


def perspective_matrix(params: PerspectiveParams, in_hw: Tuple[int, int],
                       out_hw: Tuple[int, int]) -> np.ndarray:
    """(3, 3) float64 matrix mapping input pixel (x, y, 1) to output pixels.

    ``in_hw``/``out_hw``: (height, width) of the input and the output.  Composed right to left as
    YOLOv5: move the input centre to the origin, perspective, rotate and scale, shear, then move the
    origin to ``translate`` times the output size.  For a mosaic the output is the 2s canvas shrunk by
    the border (s), so the translation picks which part of the canvas is kept.
    """
    C = np.eye(3)
    C[0, 2], C[1, 2] = -in_hw[1] / 2, -in_hw[0] / 2
    P = np.eye(3)
    P[2, 0], P[2, 1] = params.perspective_x, params.perspective_y
    # Same numbers as cv2.getRotationMatrix2D about the origin: y points down, so a positive angle
    # turns counter-clockwise on screen.
    a = math.radians(params.angle)
    ca, sa = params.scale * math.cos(a), params.scale * math.sin(a)
    R = np.array([[ca, sa, 0.0], [-sa, ca, 0.0], [0.0, 0.0, 1.0]])
    S = np.eye(3)
    S[0, 1] = math.tan(math.radians(params.shear_x))
    S[1, 0] = math.tan(math.radians(params.shear_y))
    T = np.eye(3)
    T[0, 2], T[1, 2] = params.translate_x * out_hw[1], params.translate_y * out_hw[0]
    return T @ S @ R @ P @ C


def box_candidates(before_wh_scaled: np.ndarray, after_boxes: np.ndarray, wh_thr: float = 2,
                   ar_thr: float = 100, area_thr: float = 0.1, eps: float = 1e-16) -> np.ndarray:
    """(n,) bool: which warped boxes are still worth training on (YOLOv5's rule).

    ``before_wh_scaled``: (n, 2) width and height of each box before the warp, multiplied by the warp's
    scale (so the area test measures what the border cut off, not the zoom).  ``after_boxes``: (n, 4)
    pixel xyxy after the warp.  Keeps boxes with both sides > ``wh_thr`` pixels, aspect ratio
    < ``ar_thr``, and more than ``area_thr`` of the scaled original area left.
    """
    w1, h1 = before_wh_scaled[:, 0], before_wh_scaled[:, 1]
    w2 = after_boxes[:, 2] - after_boxes[:, 0]
    h2 = after_boxes[:, 3] - after_boxes[:, 1]
    ar = np.maximum(w2 / (h2 + eps), h2 / (w2 + eps))
    return (w2 > wh_thr) & (h2 > wh_thr) & (w2 * h2 / (w1 * h1 + eps) > area_thr) & (ar < ar_thr)


def is_affine(M: np.ndarray) -> bool:
    """True when the (3, 3) ``M`` has no perspective part (last row exactly 0, 0, 1)."""
    return M[2, 0] == 0 and M[2, 1] == 0 and M[2, 2] == 1


def is_axis_aligned(M: np.ndarray) -> bool:
    """True when the (3, 3) ``M`` only scales (by positive factors) and translates."""
    return M[0, 1] == 0 and M[1, 0] == 0 and M[0, 0] > 0 and M[1, 1] > 0 and is_affine(M)


def warp_image(img: np.ndarray, M: np.ndarray, out_hw: Tuple[int, int],
               border_value: Optional[int] = None) -> np.ndarray:
    """(H, W, C) uint8 or uint16 -> (out_h, out_w, C) of its dtype warped by the (3, 3) ``M``
    (bilinear), uncovered pixels set to ``border_value`` in every band (None: PAD_VALUE's grey at the
    image's depth, geometry.shapes.pad_value); any C >= 1.  Returns ``img`` itself when ``M`` is the
    identity and the size is unchanged (nothing to resample)."""
    h, w = int(out_hw[0]), int(out_hw[1])
    if isinstance(img, Layout):  # its pixels are made later, by a device (layout.py)
        return img.warped(M, (h, w))
    if (h, w) == img.shape[:2] and np.array_equal(M, np.eye(3)):
        return img
    bands = img.shape[2]
    border_value = pad_value(img.dtype) if border_value is None else border_value
    if bands in (1, 3, 4):
        out = _warped_bands(img, M, (h, w), border_value)
        return out[..., None] if out.ndim == 2 else out  # OpenCV drops the axis of one band
    out = np.empty((h, w, bands), img.dtype)
    for start, stop in band_groups(bands):
        part = _warped_bands(np.ascontiguousarray(img[..., start:stop]), M, (h, w), border_value)
        out[..., start:stop] = part.reshape(h, w, stop - start)
    return out


def band_groups(bands: int) -> List[Tuple[int, int]]:
    """[start, stop) runs of ``bands`` channels that OpenCV's warps handle as it handles each band alone:
    runs of 4, and the rest as one run of 3 or as single bands.  Its warps take any number of channels,
    but on 2 or more than 4 they round differently (one level on about a third of the pixels, measured
    with OpenCV 5.0), so a band's pixels would depend on how many bands the image has."""
    runs = [(c, c + 4) for c in range(0, bands - bands % 4, 4)]
    rest = bands - bands % 4
    if bands % 4 == 3:
        return runs + [(rest, bands)]
    return runs + [(c, c + 1) for c in range(rest, bands)]


def _warped_bands(img: np.ndarray, M: np.ndarray, hw: Tuple[int, int], border_value: int) -> np.ndarray:
    """One OpenCV warp of ``img`` ((H, W, C) uint8 or uint16, C <= 4) onto ``hw``: warpAffine (cheaper, and exact
    for the common case) when ``M`` has no perspective part, else warpPerspective."""
    fill = (border_value,) * img.shape[2]
    if is_affine(M):
        return cv2.warpAffine(img, M[:2], dsize=(hw[1], hw[0]), borderValue=fill)
    return cv2.warpPerspective(img, M, dsize=(hw[1], hw[0]), borderValue=fill)


def warp_boxes(boxes: np.ndarray, segments, M: np.ndarray, out_hw: Tuple[int, int]):
    """Push boxes (and polygons when there are any) through ``M``; nothing is dropped here.

    ``boxes``: (n, 4) pixel xyxy.  ``segments``: [] or n (k, 2) pixel polygons.  Returns
    ``(new_boxes, new_segments)``: (n, 4) float32 xyxy clipped to the (h, w) = ``out_hw`` image, and []
    or n (POLYGON_POINTS, 2) float32 warped polygons (points may lie outside the image).

    With polygons a box is the envelope of its resampled, warped polygon points that fall inside the
    image (all zeros when none does), which is tighter than warping the box under rotation.  Only the
    outline counts, as in YOLOv5: a polygon cut by two opposite image edges gets the box of the outline
    pieces left inside, not of its whole visible area.  Without polygons a box is the envelope of the
    four warped corners, clipped (loose for a rotated box cut by the border, as in YOLOv5).
    """
    h, w = out_hw
    n = len(boxes)
    new = np.zeros((n, 4), np.float64)
    new_segments = []
    if segments:
        for i, seg in enumerate(segments):
            xy = transform_points(resample_polygon(seg, POLYGON_POINTS), M)
            inside = (xy[:, 0] >= 0) & (xy[:, 1] >= 0) & (xy[:, 0] <= w) & (xy[:, 1] <= h)
            if inside.any():
                x, y = xy[inside, 0], xy[inside, 1]
                new[i] = x.min(), y.min(), x.max(), y.max()
            # not clamped: a mask filled from a clamped outline would gain a strip along the image edge
            # where the cut-off part was flattened (YOLOv5-seg leaves them unclamped too)
            new_segments.append(xy.astype(np.float32))
    elif n:
        xy = transform_points(box_corners(boxes).reshape(-1, 2), M).reshape(n, 4, 2)
        new = np.concatenate([xy.min(1), xy.max(1)], axis=1)
        new[:, [0, 2]] = new[:, [0, 2]].clip(0, w)
        new[:, [1, 3]] = new[:, [1, 3]].clip(0, h)
    return new.astype(np.float32), new_segments


def warp_sample(sample: Sample, M: np.ndarray, out_hw: Tuple[int, int], border_value: Optional[int] = None,
                scale: Optional[float] = None, warped_img: Optional[np.ndarray] = None,
                row_blocks: Optional[Sequence[Tuple[int, np.ndarray]]] = None) -> Sample:
    """Warp a sample by the (3, 3) ``M`` onto an ``out_hw`` (h, w) image and drop the boxes that
    ``box_candidates`` rejects, with their classes and polygons.

    ``scale``: the isotropic scale inside ``M`` (``PerspectiveParams.scale``), used by the area test;
    when None it is estimated as sqrt(|det|) of M's linear part.  The area threshold is 0.01 with
    polygons (their boxes are tight, so a small remainder is still a real object) and 0.1 without.
    The input sample is not modified.  ``warped_img``: the image already warped (see
    ``mosaic.mosaic4_resized``); only the boxes and polygons are then transformed.  ``row_blocks``:
    [(n, (3, 3) matrix), ...] when consecutive blocks of n boxes (with their polygons) moved by their
    own matrices instead of ``M`` (the tiles of ``mosaic4_resized``).
    """
    img = warp_image(sample.img, M, out_hw, border_value) if warped_img is None else warped_img
    if row_blocks is None:
        new_boxes, new_segments = warp_boxes(sample.boxes, sample.segments, M, out_hw)
        extras = sample.moved_extras(lambda p: transform_points(p, M), out_hw)
    elif not sample.segments and all(is_axis_aligned(m) for _, m in row_blocks):
        # boxes only, each block scaled and shifted: its corners' envelope is the box moved (cheaper)
        counts = [n for n, _ in row_blocks]
        k = np.repeat([[m[0, 0], m[1, 1], m[0, 0], m[1, 1]] for _, m in row_blocks], counts, axis=0)
        t = np.repeat([[m[0, 2], m[1, 2], m[0, 2], m[1, 2]] for _, m in row_blocks], counts, axis=0)
        new = sample.boxes.astype(np.float64).reshape(-1, 4) * k.reshape(-1, 4) + t.reshape(-1, 4)
        new_boxes = clip_xyxy(new, out_hw[1], out_hw[0]).astype(np.float32)
        new_segments = []
        extras = _blocks_moved(sample, row_blocks, out_hw)
    else:
        new_boxes, new_segments, start = [np.zeros((0, 4), np.float32)], [], 0
        for n, block_matrix in row_blocks:
            rows = slice(start, start + n)
            b, segs = warp_boxes(sample.boxes[rows], sample.segments[rows] if sample.segments else [],
                                 block_matrix, out_hw)
            new_boxes.append(b)
            new_segments += segs
            start += n
        new_boxes = np.concatenate(new_boxes)
        extras = _blocks_moved(sample, row_blocks, out_hw)
    out = Sample(img, sample.cls.copy(), new_boxes, new_segments, extras)
    if not len(out):
        return out
    if scale is None:
        scale = math.sqrt(abs(np.linalg.det(M[:2, :2] / M[2, 2])))
    before = np.stack([sample.boxes[:, 2] - sample.boxes[:, 0], sample.boxes[:, 3] - sample.boxes[:, 1]], 1)
    keep = box_candidates(before * scale, new_boxes, area_thr=0.01 if sample.segments else 0.1)
    return out.select(keep)


def _blocks_moved(sample: Sample, row_blocks, out_hw: Tuple[int, int]):
    """The sample's extras, each block of rows moved by its own matrix (see warp_sample)."""
    parts, start = [], 0
    for n, m in row_blocks:
        rows = np.arange(start, start + n)
        parts.append({k: e.select(rows).moved(lambda p, m=m: transform_points(p, m), out_hw)
                      for k, e in sample.extras.items()})
        start += n
    return join_extras(parts) if sample.extras else {}


def random_perspective(sample: Sample, rng: np.random.Generator, degrees: float = 10.0,
                       translate: float = 0.1, scale: float = 0.1, shear: float = 10.0,
                       perspective: float = 0.0, border: Tuple[int, int] = (0, 0)) -> Sample:
    """Draw, build and apply one random perspective (YOLOv5's ``random_perspective``).

    ``border``: (bh, bw) pixels added on each side of the output; a mosaic passes (-s//2, -s//2) so
    its (2s, 2s) canvas comes out (s, s).  Returns a new Sample of shape (H + 2 bh, W + 2 bw, C).
    """
    in_hw = sample.img.shape[:2]
    out_hw = (in_hw[0] + 2 * border[0], in_hw[1] + 2 * border[1])
    params = draw_perspective(rng, degrees, translate, scale, shear, perspective)
    M = perspective_matrix(params, in_hw, out_hw)
    return warp_sample(sample, M, out_hw, scale=params.scale)


def flip_lr(sample: Sample) -> Sample:
    """Mirror left-right: image, xyxy boxes and polygons.  Pixel column c goes to W-1-c, which in
    edge coordinates (pixel c spans [c, c+1]) is x -> W - x.  The image is a view (flips come last and
    to_tensors copies it once anyway); boxes and polygons are new arrays."""
    w = sample.img.shape[1]
    boxes = sample.boxes.copy()
    boxes[:, 0], boxes[:, 2] = w - sample.boxes[:, 2], w - sample.boxes[:, 0]
    segments = [np.stack([w - s[:, 0], s[:, 1]], 1).astype(np.float32) for s in sample.segments]
    return Sample(sample.img[:, ::-1], sample.cls.copy(), boxes, segments, sample.mirrored_extras(w))


def flip_ud(sample: Sample) -> Sample:
    """Mirror top-bottom: image (a view), xyxy boxes and polygons (y -> H - y)."""
    h = sample.img.shape[0]
    boxes = sample.boxes.copy()
    boxes[:, 1], boxes[:, 3] = h - sample.boxes[:, 3], h - sample.boxes[:, 1]
    segments = [np.stack([s[:, 0], h - s[:, 1]], 1).astype(np.float32) for s in sample.segments]
    extras = sample.moved_extras(lambda p: p * (1, -1) + (0, h), sample.img.shape[:2])
    return Sample(sample.img[::-1], sample.cls.copy(), boxes, segments, extras)
