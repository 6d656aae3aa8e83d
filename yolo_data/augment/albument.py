"""The optional Albumentations step (hyp key ``albumentations: true``; needs that package).

The same pixel-level transforms and probabilities YOLOv5 enables by default (blur, median blur, gray,
CLAHE, each 1%); none of them moves pixels, so boxes and polygons are unchanged.  The transform's own
random state is reseeded from the item's generator before each call, so the step stays reproducible.
"""
from __future__ import annotations

import logging

import numpy as np

from .sample import Sample

LOGGER = logging.getLogger("yolo_data")


class AlbumentationsStep:
    def __init__(self, p: float = 0.01):
        try:
            import albumentations as A
        except ImportError:
            raise ImportError("hyp 'albumentations: true' needs the albumentations package "
                              "(pip install albumentations); it is optional and off by default") from None
        self.transform = A.Compose([A.Blur(p=p), A.MedianBlur(p=p), A.ToGray(p=p), A.CLAHE(p=p)])
        self._seedable = hasattr(self.transform, "set_random_seed")
        if not self._seedable:
            LOGGER.warning("this albumentations version cannot be seeded per call: with the Albumentations "
                           "step on, batches may differ between runs and worker counts")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if self._seedable:
            self.transform.set_random_seed(int(rng.integers(0, 2**31 - 1)))
        img = self.transform(image=sample.img)["image"]
        return Sample(img, sample.cls, sample.boxes, sample.segments, sample.extras)
