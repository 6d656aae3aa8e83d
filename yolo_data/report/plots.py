"""Pictures of data: a batch as one grid (what YOLOv5 saves as train_batch0.jpg), and objects of one class
side by side (the dataset report)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import cv2
import numpy as np
import torch

_PALETTE = [(56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207), (10, 249, 72),
            (23, 204, 146), (134, 219, 61), (52, 147, 26), (187, 212, 0), (168, 153, 44), (255, 194, 0),
            (147, 69, 52), (255, 115, 100), (236, 24, 0), (255, 56, 132), (133, 0, 82), (255, 56, 203),
            (200, 149, 255), (199, 55, 255)]  # BGR


def class_colour(c: int):
    return _PALETTE[int(c) % len(_PALETTE)]


def draw_batch(imgs: torch.Tensor, targets: torch.Tensor, paths: Sequence[str], names: Optional[Sequence[str]] = None,
               max_side: int = 1920) -> np.ndarray:
    """imgs (B, C, H, W) uint8 (C = 3: RGB; see ``shown``); targets (N, 6) [image, class, x, y, w, h]
    normalised -> a BGR uint8 grid (about ``max_side`` px on its long side) with each image's boxes,
    class names and file name."""
    b, _, h, w = imgs.shape
    cols = math.ceil(math.sqrt(b))
    rows = math.ceil(b / cols)
    scale = min(1.0, max_side / max(cols * w, rows * h))
    th, tw = int(h * scale), int(w * scale)
    grid = np.full((rows * th, cols * tw, 3), 255, np.uint8)
    t = targets.cpu().numpy()
    for i in range(b):
        img = shown(imgs[i].cpu().numpy())
        img = cv2.resize(img, dsize=(tw, th), interpolation=cv2.INTER_AREA) if scale < 1 else img.copy()
        for _, cls, x, y, bw, bh in t[t[:, 0] == i]:
            x1, y1 = int((x - bw / 2) * tw), int((y - bh / 2) * th)
            x2, y2 = int((x + bw / 2) * tw), int((y + bh / 2) * th)
            colour = class_colour(cls)
            cv2.rectangle(img, (x1, y1), (x2, y2), colour, 2)
            label = names[int(cls)] if names and int(cls) < len(names) else str(int(cls))
            (lw, lh), _ = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
            ty = max(y1, lh + 4)
            cv2.rectangle(img, (x1, ty - lh - 4), (x1 + lw + 2, ty), colour, -1)
            cv2.putText(img, label, (x1 + 1, ty - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1,
                        cv2.LINE_AA)
        cv2.putText(img, Path(paths[i]).name[:40], (4, th - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1,
                    cv2.LINE_AA)
        cv2.rectangle(img, (0, 0), (tw - 1, th - 1), (255, 255, 255), 2)
        r, c = divmod(i, cols)
        grid[r * th:(r + 1) * th, c * tw:(c + 1) * tw] = img
    return grid


def shown(img: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 BGR to draw of a (C, H, W) uint8 batch image: RGB as it is, one band as gray,
    and of any other number the first three bands as blue, green and red (the order OpenCV stores
    colour in: a false-colour picture of a multi-band image), a single band twice more for two."""
    return np.ascontiguousarray(img[_picked(img.shape[0])].transpose(1, 2, 0))


def _picked(bands: int) -> list:
    """The bands shown as blue, green and red of a picture of an image of ``bands`` bands."""
    if bands == 3:
        return [2, 1, 0]  # RGB -> BGR
    return [min(k, bands - 1) if bands > 1 else 0 for k in (0, 1, 2)]


def shown_text(bands: int) -> str:
    """What a picture drawn by ``shown`` of an image of ``bands`` bands shows, in words: 'colour',
    'one band as gray', or e.g. 'false colour of 10 bands: band 1 as blue, band 2 as green, band 3 as
    red' (bands counted from 1)."""
    if bands == 3:
        return "colour"
    if bands == 1:
        return "one band as gray"
    picked = _picked(bands)
    colours = {}
    for band, colour in zip(picked, ("blue", "green", "red")):
        colours.setdefault(band, []).append(colour)
    return (f"false colour of {bands} bands: "
            + ", ".join(f"band {b + 1} as {' and '.join(c)}" for b, c in colours.items()))


def instance_strip(objects: Sequence, cls: int, tile: int = 112, margin: float = 0.15) -> Optional[np.ndarray]:
    """Objects of one class side by side: ``objects`` [(image path, (4,) [x, y, w, h] normalised)], each
    cropped from its image with ``margin`` of its size around it, drawn with its box, scaled to
    ``tile`` pixels high.  A BGR uint8 strip, or None when no image could be read (the report then
    leaves the picture out)."""
    from ..images.decode import ImageDecodeError, ImageReadError, imread_bgr
    tiles = []
    for path, (x, y, w, h) in objects:
        try:
            im = imread_bgr(path)
        except (ImageReadError, ImageDecodeError):
            continue
        ih, iw = im.shape[:2]
        bx1, by1, bx2, by2 = (x - w / 2) * iw, (y - h / 2) * ih, (x + w / 2) * iw, (y + h / 2) * ih
        mx, my = max(w * iw * margin, 4), max(h * ih * margin, 4)
        x1, y1 = int(max(bx1 - mx, 0)), int(max(by1 - my, 0))
        x2, y2 = int(min(bx2 + mx, iw)), int(min(by2 + my, ih))
        if x2 - x1 < 1 or y2 - y1 < 1:
            continue
        crop = im[y1:y2, x1:x2].copy()
        cv2.rectangle(crop, (int(bx1) - x1, int(by1) - y1), (int(bx2) - x1, int(by2) - y1), class_colour(cls),
                      max(1, round(max(crop.shape[:2]) / 100)))
        s = tile / crop.shape[0]
        width = min(max(1, round(crop.shape[1] * s)), 4 * tile)  # a very long object is squeezed, not a banner
        crop = cv2.resize(crop, (width, tile), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
        tiles.append(crop)
        tiles.append(np.full((tile, 4, 3), 255, np.uint8))
    return np.concatenate(tiles[:-1], axis=1) if tiles else None
