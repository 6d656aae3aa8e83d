"""Pure array math on boxes, letterbox shapes and masks: no files, no randomness.

Modules, in the order data flows through them:

    boxes   box formats (pixel xyxy inside, normalised xywh at the edges), IoA, polygons, corners
    shapes  letterbox plans and rectangular batch shapes
    masks   instance and overlap masks from polygons (YOLOv5-seg's batch format)
"""
from .boxes import (bbox_ioa, box_corners, clip_xyxy, polygon_to_xyxy, resample_polygon, transform_points,
    xywhn_to_xyxy, xyxy_to_xywh, xyxy_to_xywhn)
from .masks import MaskSpec, instance_masks, overlap_mask, polygon_mask, resample_outline, with_masks
from .shapes import LetterboxPlan, letterbox, letterbox_image, letterbox_plan, rect_max_side, rect_plan, resize_to

__all__ = ["bbox_ioa", "box_corners", "clip_xyxy", "polygon_to_xyxy", "resample_polygon", "transform_points",
           "xywhn_to_xyxy", "xyxy_to_xywh", "xyxy_to_xywhn", "LetterboxPlan", "letterbox",
           "letterbox_image", "letterbox_plan", "rect_max_side", "rect_plan", "resize_to", "MaskSpec",
           "instance_masks", "overlap_mask", "polygon_mask", "resample_outline", "with_masks"]
