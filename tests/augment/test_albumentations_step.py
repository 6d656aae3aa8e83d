"""The optional Albumentations step: off by default, a clear error without the package, seeded per item."""
import sys
import types

import numpy as np
import pytest

from yolo_data.augment.albument import AlbumentationsStep
from yolo_data.augment.hyp import load_hyp
from yolo_data.augment.sample import Sample

from crafting import fake_albumentations


def sample():
    return Sample(np.zeros((8, 8, 3), np.uint8), np.array([1.0], np.float32), np.array([[1, 1, 4, 4]], np.float32))


def test_off_by_default_and_missing_package_is_a_clear_error(monkeypatch):
    assert load_hyp(None).albumentations is False
    assert load_hyp({"albumentations": True}).albumentations is True
    monkeypatch.setitem(sys.modules, "albumentations", None)
    with pytest.raises(ImportError, match="pip install albumentations"):
        AlbumentationsStep()


def test_seeded_from_the_item_generator_and_boxes_unchanged(monkeypatch):
    fake_albumentations(monkeypatch)
    step = AlbumentationsStep()
    a = step(sample(), np.random.default_rng([0, 0, 5]))
    b = step(sample(), np.random.default_rng([0, 0, 5]))
    c = step(sample(), np.random.default_rng([0, 0, 6]))
    assert np.array_equal(a.img, b.img) and not np.array_equal(a.img, c.img) and a.img.max() > 0
    assert np.array_equal(a.boxes, sample().boxes) and np.array_equal(a.cls, sample().cls)
