"""The plain reference of an item's last training step, which the library fuses into writing the batch
tensor (tensors.write_rgb): the tests check the fused step against this one."""
import cv2

from yolo_data.augment.photometric import apply_hsv
from yolo_data.augment.pipeline import draw_finish, flip_boxes
from yolo_data.augment.sample import Sample


def finish(sample: Sample, cfg, rng, extra=None) -> Sample:
    """Photometric steps and flips after the geometry, as a Sample with an (H, W, 3) uint8 BGR image,
    drawing from ``rng`` what the library draws (pipeline.draw_finish).  ``extra``: an optional
    callable (sample, rng) -> sample applied first (the Albumentations step)."""
    if extra is not None:
        sample = extra(sample, rng)
    draws = draw_finish(cfg, rng)
    img = sample.img if draws.hsv_gains is None else apply_hsv(sample.img, draws.hsv_gains)
    if img.shape[2] == 4:  # a mosaic canvas is BGRA (see mosaic._canvas) and HSV was off
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
    return flip_boxes(Sample(img, sample.cls, sample.boxes, sample.segments, sample.extras), draws)
