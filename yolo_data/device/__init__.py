"""The device stage: training batches decoded and augmented on the device the training step runs on
(torch ops; CUDA or CPU).

``colour``: YOLOv5's HSV gains on a batch of RGB images, and the per-band gains and offsets of images of
other than 3 channels, with the CPU path's pixels.
"""
from .colour import apply_band_gains, apply_hsv

__all__ = ["apply_band_gains", "apply_hsv"]
