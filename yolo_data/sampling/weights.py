"""Class and image weights for ``image_weights=True`` (YOLOv5's rule: images holding rare classes are
drawn more often)."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def labels_to_class_weights(labels: Sequence[np.ndarray], nc: int) -> np.ndarray:
    """YOLOv5's class weights: rare classes weigh more.

    Args:
        labels: per image an (n, 5) array [class, x, y, w, h] (only the class column is read).
        nc: the number of classes.

    Returns:
        (nc,) float64 weights proportional to 1 / class frequency (classes never seen count once),
        summing to 1.
    """
    classes = np.concatenate([np.asarray(lb)[:, 0] for lb in labels] + [np.zeros(0)]).astype(np.int64)
    counts = np.bincount(classes, minlength=nc).astype(np.float64)
    counts[counts == 0] = 1
    w = 1 / counts
    return w / w.sum()


def labels_to_image_weights(labels: Sequence[np.ndarray], nc: int,
                            class_weights: Optional[np.ndarray] = None) -> np.ndarray:
    """YOLOv5's image weights: the sum over each image's boxes of their class weight.

    YOLOv5's train.py passes ``class_weights = model.class_weights * (1 - maps) ** 2 / nc`` to favour
    classes the model is bad at; by default the weights are ``labels_to_class_weights``.

    Args:
        labels: per image an (n, 5) array [class, x, y, w, h] (only the class column is read).
        nc: the number of classes.
        class_weights: (nc,) weight of each class; None: ``labels_to_class_weights(labels, nc)``.

    Returns:
        (number of images,) float64 weights (0 for an image without boxes), for
        ``YoloSampler.set_weights`` or ``dataset.indices`` as YOLOv5's train.py draws them.
    """
    cw = labels_to_class_weights(labels, nc) if class_weights is None else np.asarray(class_weights, np.float64)
    lengths = [len(lb) for lb in labels]
    classes = np.concatenate([np.asarray(lb)[:, 0] for lb in labels] + [np.zeros(0)]).astype(np.int64)
    image = np.repeat(np.arange(len(lengths)), lengths)
    # one weight per box, summed per image: no (n, nc) matrix, so a million images stay cheap
    return np.bincount(image, weights=cw[classes], minlength=len(lengths))
