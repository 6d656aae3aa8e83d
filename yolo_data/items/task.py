"""The task a split is read for, decided once per dataset: what a label row holds, and what each item
carries besides its boxes.

    detect    boxes (polygon rows: their envelope)
    segment   boxes and a polygon each; items carry instance masks (masks.py)
    pose      boxes and K keypoints each (x, y, visibility); items carry ``keypoints`` (n, K, 3)
    obb       boxes and the 4 corners of a rotated box each, kept as a polygon; items carry ``corners``
              (n, 4, 2), each object's rotated rectangle after every geometric step

The task comes from the settings (``Settings.targets``), else from the dataset yaml: a ``kpt_shape``
there makes a pose dataset.  Nothing here reads files.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import cv2
import numpy as np

from ..augment.sample import Points, Sample, box_polygons
from ..geometry.boxes import xywhn_to_xyxy
from ..settings import TargetSettings

LOGGER = logging.getLogger("yolo_data")

@dataclass(frozen=True)
class LabelTask:
    """``name``: 'detect', 'segment', 'pose' or 'obb'.  ``kpt_shape``: (K, 2 or 3) for pose (also kept
    for detect and segment of a pose dataset, whose rows are then read for their boxes), else None.
    ``flip_idx``: per keypoint the one taking its place in a left-right flip, or None."""
    name: str = "detect"
    kpt_shape: Optional[Tuple[int, int]] = None
    flip_idx: Optional[Tuple[int, ...]] = None

    @property
    def polygons(self) -> bool:
        """Whether every object carries a polygon that the batch needs (masks, or rotated corners)."""
        return self.name in ("segment", "obb")

    @property
    def flips_lr(self) -> bool:
        """Whether left-right flips keep the labels right: not for keypoints without a flip_idx (a
        left eye would become a right one)."""
        return self.name != "pose" or self.flip_idx is not None


def warn_unflipped(task: LabelTask, fliplr: float, where: str) -> None:
    """Say once, when building, that left-right flips (probability ``fliplr``) are off for pose data
    without flip_idx (the mapper leaves them out)."""
    if fliplr and not task.flips_lr:
        LOGGER.warning(f"{where}: no flip_idx for the keypoints (which one takes each one's place in a mirror "
                       "image), so images are not flipped left-right; add flip_idx to the dataset yaml to flip them")


def resolve_task(targets: TargetSettings, kpt_shape=None, flip_idx=None, where: str = "") -> LabelTask:
    """The task of ``targets`` (TargetSettings), completed by the dataset yaml's ``kpt_shape`` and
    ``flip_idx`` (the settings' own win).  Raises ValueError when pose has no kpt_shape or a
    flip_idx does not fit it; ``where`` names the dataset in the message.

    A kpt_shape makes the rows pose rows whatever the task, as in Ultralytics: 'detect' and 'segment'
    read each one's box (segment with a warning: its mask is the box's rectangle; Ultralytics refuses a
    segment dataset without polygons), 'obb' is refused (the rows hold no rotated boxes; Ultralytics
    refuses it too).
    """
    shape = targets.kpt_shape or (tuple(kpt_shape) if kpt_shape else None)
    flip = targets.flip_idx or (tuple(flip_idx) if flip_idx else None)
    name = targets.task or ("pose" if shape else "detect")
    if name == "pose" and shape is None:
        raise ValueError(f"{where}: task 'pose' needs the keypoints per object: kpt_shape: [K, 2 or 3] in the "
                         "dataset yaml, or kpt_shape=[K, 2 or 3] in the settings")
    if name == "pose" and flip is not None and sorted(flip) != list(range(shape[0])):
        raise ValueError(f"{where}: flip_idx must list each of the {shape[0]} keypoints once, got {list(flip)}")
    if shape and name in ("segment", "obb"):
        rows = (f"kpt_shape {list(shape)} makes it a pose dataset (each object a box and {shape[0]} keypoints; "
                f"a YOLO row of {5 + shape[0] * shape[1]} numbers)")
        if name == "obb":
            raise ValueError(f"{where}: task 'obb' reads the 4 corners of rotated boxes, but {rows}: read it with "
                             "task 'pose' or 'detect'")
        LOGGER.warning(f"{where}: task 'segment', but {rows}, without polygons: each object is read for its box, "
                       "and its mask is the box's rectangle (task 'pose' reads the keypoints)")
    if name not in ("pose", "detect", "segment"):
        shape = flip = None
    return LabelTask(name, shape, flip if name == "pose" else None)


def polygons_of(task: LabelTask, store, i: int) -> List[np.ndarray]:
    """Image ``i``'s normalised (k, 2) polygons from ``store`` (store.LabelStore), one per object, or []
    when it has none and the task needs none.  A task that needs polygons (segment) gets each plain
    box's rectangle, so every object has a mask."""
    polygons = store.segments_of(i)
    if polygons or not task.polygons:
        return polygons
    return box_polygons(xywhn_to_xyxy(store.labels_of(i)[:, 1:], 1, 1))


def object_extras(task: LabelTask, keypoints: np.ndarray, hw: Tuple[float, float],
                  pad: Tuple[float, float] = (0.0, 0.0)) -> Dict[str, Points]:
    """The per-object extras of an image's objects for ``task`` (sample.Sample.extras): for pose,
    ``keypoints``: Points from (n, K, 3) normalised keypoints on an (h, w) image placed at ``pad``
    (x, y) pixels.  Empty for the other tasks."""
    if task.name != "pose":
        return {}
    xyv = np.array(keypoints, np.float32, copy=True)
    xyv[..., 0] = xyv[..., 0] * hw[1] + pad[0]
    xyv[..., 1] = xyv[..., 1] * hw[0] + pad[1]
    return {"keypoints": Points(xyv, task.flip_idx)}


def rotated_corners(segments: List[np.ndarray], hw: Tuple[int, int]) -> np.ndarray:
    """(n, 4, 2) float32 pixel corners of each object's rotated rectangle on an (h, w) image: a polygon
    of 4 points is its own corners (as read, even where a corner lies past the image's edge); a longer
    one, which a warp resampled (perspective.warp_boxes), gets the smallest rotated rectangle around
    its part inside the image (its points clipped to the image, then cv2.minAreaRect, as Ultralytics
    does after its warp)."""
    out = np.zeros((len(segments), 4, 2), np.float32)
    h, w = hw
    for k, seg in enumerate(segments):
        if len(seg) == 4:
            out[k] = seg
        elif len(seg):
            inside = np.stack([np.clip(seg[:, 0], 0, w), np.clip(seg[:, 1], 0, h)], 1).astype(np.float32)
            out[k] = cv2.boxPoints(cv2.minAreaRect(inside))
    return out


def batch_extras(task: LabelTask, sample: Sample, hw: Tuple[int, int]) -> Dict[str, np.ndarray]:
    """What the item carries besides its targets for ``task``, as float32 arrays normalised to an
    (h, w) image, row i beside target row i: ``keypoints`` (n, K, 3) for pose, ``corners`` (n, 4, 2)
    for obb.  (Masks are made by masks.py.)"""
    out = {k: e.normalised(hw) for k, e in sample.extras.items()}
    if task.name == "obb":
        corners = rotated_corners(sample.segments, hw) if sample.segments else np.zeros((len(sample), 4, 2), np.float32)
        corners[..., 0] /= hw[1]
        corners[..., 1] /= hw[0]
        out["corners"] = corners
    return out
