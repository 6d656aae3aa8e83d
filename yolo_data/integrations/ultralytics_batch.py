"""yolo_data's batches and labels in the form Ultralytics' trainer and validator read.

Pure: never imports ultralytics.

    our batch (imgs, targets, paths, shapes[, extras])  ->  to_batch_dict  ->  {'img', 'cls', 'bboxes',
                                                   'batch_idx', 'im_file', 'ori_shape', 'resized_shape',
                                                   'ratio_pad'[, 'keypoints']} (obb: 'bboxes' xywhr)
    our LabelStore                            ->  LabelDicts      ->  dataset.labels (list of dicts)
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import torch

from ..labels.store import LazySequence
from ..loading.collate import collate_fn


def whole_pixel_pad(pad: Tuple[float, float]) -> Tuple[int, int]:
    """YOLOv5's (padw, padh), half the padding and possibly .5, -> the (left, top) whole pixels of
    border the letterbox put before the content, which is what Ultralytics' ``ratio_pad[1]`` holds
    and its ``scale_boxes`` subtracts.  The letterbox rounds ``pad - 0.1`` (an odd padding puts the
    extra pixel bottom/right), so the same rounding here gives its exact offset."""
    return int(round(pad[0] - 0.1)), int(round(pad[1] - 0.1))


def snap_boxes_to_border(targets: torch.Tensor, shapes, hw: Tuple[int, int], extras: Optional[dict] = None) -> None:
    """Move each image's boxes (in place) from YOLOv5's half-padding offset to the whole-pixel border
    the content really starts at: with an odd padding YOLOv5 puts boxes half a pixel lower/right
    than the pixels (padh 26.5 where the image starts at row 26); Ultralytics puts them on the pixels.
    ``targets`` float32 (N, 6) [image, class, x, y, w, h] normalised to ``hw`` (H, W); ``extras``:
    the batch's per-object points, moved alike (``keypoints`` (N, K, 3), ``corners`` (N, 4, 2))."""
    H, W = hw
    points = [extras[k] for k in ("keypoints", "corners") if extras and k in extras]
    for i, s in enumerate(shapes):
        padw, padh = s[1][1]
        left, top = whole_pixel_pad((padw, padh))
        if left != padw or top != padh:
            rows = targets[:, 0] == i
            targets[rows, 2] += (left - padw) / W
            targets[rows, 3] += (top - padh) / H
            for p in points:
                p[rows, :, 0] += (left - padw) / W
                p[rows, :, 1] += (top - padh) / H


def oriented_boxes(corners: torch.Tensor, hw: Tuple[int, int], to_xywhr: Callable) -> torch.Tensor:
    """(N, 4, 2) corners normalised to an (H, W) image -> (N, 5) float32 [x, y, w, h, angle] with x, w
    over W and y, h over H and the angle in radians, as Ultralytics' OBB batches hold them.
    ``to_xywhr``: the installed Ultralytics' own conversion of pixel corners (its angle convention)."""
    H, W = hw
    if not len(corners):
        return torch.zeros((0, 5), dtype=torch.float32)
    pixels = corners.double() * torch.tensor([W, H], dtype=torch.float64)
    xywhr = torch.as_tensor(to_xywhr(pixels.numpy())).to(torch.float32)
    return xywhr / torch.tensor([W, H, W, H, 1.0], dtype=torch.float32)


def semantic_masks(masks: torch.Tensor, targets: torch.Tensor, batch_size: int, overlap: bool) -> torch.Tensor:
    """(B, h, w) float32 class of the instance covering each mask pixel (the smallest where several
    do; 0 where none does), as Ultralytics' segment batches carry for their semantic head.  ``masks``:
    ``overlap`` (B, h, w), each pixel the 1-based index of its instance among its image's target rows,
    else (N, h, w) 0/1 per target row; ``targets`` (N, 6) [image, class, ...].  (Ultralytics' loss reads
    it only where an instance covers the pixel.)"""
    h, w = masks.shape[-2:]
    out = torch.zeros((batch_size, h, w), dtype=torch.float32)
    image, cls = targets[:, 0].long(), targets[:, 1].float()
    for i in range(batch_size):
        rows = torch.nonzero(image == i).flatten()
        if not len(rows):
            continue
        if overlap:  # index 0 (no instance) -> class 0
            out[i] = torch.cat([torch.zeros(1), cls[rows]])[masks[i].long()]
        else:
            covered = masks[rows].bool()
            area = covered.sum((1, 2))
            smallest = torch.where(covered, area[:, None, None], int(area.max()) + 1).argmin(0)
            out[i] = torch.where(covered.any(0), cls[rows][smallest], torch.zeros(()))
    return out


def to_batch_dict(imgs: torch.Tensor, targets: torch.Tensor, paths, shapes,
                  with_ratio_pad: Optional[bool] = None, extras: Optional[dict] = None,
                  to_xywhr: Optional[Callable] = None, overlap_mask: bool = True) -> Dict[str, Any]:
    """Ultralytics' batch dict from one of our batches.

    In: ``imgs`` uint8 (B, C, H, W) (RGB at C = 3); ``targets`` float32 (N, 6) [image index, class, x, y, w, h]
    normalised xywh; ``paths`` B strings; ``shapes`` per image ``((h0, w0), ((h / h0, w / w0),
    (padw, padh)))`` or None (a mosaic).

    Out: ``img`` the same uint8 tensor (no copy); ``batch_idx`` float32 (N,); ``cls`` float32 (N, 1);
    ``bboxes`` float32 (N, 4) normalised xywh (views of ``targets``); ``im_file`` tuple of B str;
    ``ori_shape`` tuple of B (h0, w0) (the batch's (H, W) for a mosaic); ``resized_shape`` tuple of B
    (H, W), the letterboxed size each image was fed at; ``ratio_pad`` tuple of B ((h / h0, w / w0),
    (left, top)) with whole-pixel offsets (see ``whole_pixel_pad``), present when ``with_ratio_pad``
    (None: when no image of the batch is a mosaic).  Ultralytics' validator scales predictions back to
    ``ori_shape`` with ``ratio_pad``; its metrics compare boxes on the letterboxed image.

    ``extras`` (the batch's fifth part): ``keypoints`` (N, K, 3) normalised become ``keypoints``;
    ``corners`` (N, 4, 2) normalised become ``bboxes`` (N, 5) xywhr by ``to_xywhr`` (oriented_boxes);
    ``masks`` (masks.py; ``overlap_mask``: one per image) stay ``masks``, with ``sem_masks`` beside them
    (semantic_masks)."""
    hw = (int(imgs.shape[2]), int(imgs.shape[3]))
    if with_ratio_pad is None:
        with_ratio_pad = all(s is not None for s in shapes)
    out = {
        "img": imgs,
        "batch_idx": targets[:, 0],
        "cls": targets[:, 1:2],
        "bboxes": targets[:, 2:6],
        "im_file": tuple(paths),
        "ori_shape": tuple(hw if s is None else (int(s[0][0]), int(s[0][1])) for s in shapes),
        "resized_shape": tuple(hw for _ in shapes),
    }
    if extras and "keypoints" in extras:
        out["keypoints"] = extras["keypoints"]
    if extras and "masks" in extras:
        out["masks"] = extras["masks"]
        out["sem_masks"] = semantic_masks(extras["masks"], targets, len(paths), overlap_mask)
    if extras and "corners" in extras:
        if to_xywhr is None:
            raise ValueError("oriented boxes need to_xywhr, the installed Ultralytics' corner conversion")
        out["bboxes"] = oriented_boxes(extras["corners"], hw, to_xywhr)
    if with_ratio_pad:
        if any(s is None for s in shapes):
            raise ValueError("ratio_pad asked for a batch with mosaics (they have no original shape)")
        out["ratio_pad"] = tuple(((float(s[1][0][0]), float(s[1][0][1])), whole_pixel_pad(s[1][1]))
                                 for s in shapes)
    return out


class DictCollate:
    """A collate function: ``inner`` (our ``collate_fn`` or ``QuadCollate``) and then ``to_batch_dict``.
    Runs inside DataLoader workers, so the dict crosses to the main process as Ultralytics' loaders
    hand theirs.  ``evaluation``: every item has its shapes (ratio_pad is given) and boxes are snapped
    to the whole-pixel border (``snap_boxes_to_border``), so they equal Ultralytics' own."""

    def __init__(self, inner: Callable = collate_fn, evaluation: bool = False, to_xywhr: Optional[Callable] = None,
                 overlap_mask: bool = True):
        self.inner, self.evaluation, self.to_xywhr, self.overlap_mask = inner, evaluation, to_xywhr, overlap_mask

    def __call__(self, items):
        imgs, targets, paths, shapes, *extras = self.inner(items)
        extras = extras[0] if extras else None
        if self.evaluation:
            snap_boxes_to_border(targets, shapes, tuple(imgs.shape[2:]), extras)
        return to_batch_dict(imgs, targets, paths, shapes, with_ratio_pad=True if self.evaluation else None,
                             extras=extras, to_xywhr=self.to_xywhr, overlap_mask=self.overlap_mask)


class LabelDicts(LazySequence):
    """``dataset.labels`` as Ultralytics' datasets hold it, built on access from a LabelStore (no
    Python object per image is kept, so forked workers share the store's pages).

    Item i: ``{'im_file': str, 'shape': (h, w) int of the stored image, 'cls': float32 (n, 1),
    'bboxes': float32 (n, 4) normalised xywh, 'segments': list of float32 (k, 2) normalised polygons
    (empty when the image has none), 'keypoints': float32 (n, K, 3) [x, y, visibility] x and y
    normalised, or None without keypoints, 'normalized': True, 'bbox_format': 'xywh'}``.
    The arrays are copies: Ultralytics' code may edit them in place, the store is read-only."""

    def _item(self, i: int) -> dict:
        labels = self._store.labels_of(i)
        h, w = (int(v) for v in self._store.shapes_hw[i])
        return {
            "im_file": self._store.im_file(i),
            "shape": (h, w),
            "cls": labels[:, 0:1].copy(),
            "bboxes": labels[:, 1:5].copy(),
            "segments": [s.copy() for s in self._store.segments_of(i)],
            "keypoints": self._store.keypoints_of(i).copy() if self._store.kpt_count else None,
            "normalized": True,
            "bbox_format": "xywh",
        }
