"""The device stage: training batches decoded and augmented on the device the training step runs on
(torch ops; CUDA or CPU).

``colour``: YOLOv5's HSV gains on a batch of RGB images, with the CPU path's pixels.
"""
from .colour import apply_hsv

__all__ = ["apply_hsv"]
