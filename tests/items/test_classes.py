"""``classes`` and ``remap_classes``: the label rows of some classes only, their ids remapped on request.

Tiny datasets written into tmp_path: what every item holds against the label files read by hand, the
polygons and keypoints that go with each row, the label cache left as the split's, and the loader's
batches, class balance and ``min_items`` agreeing with the filter.
"""
import hashlib
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from yolo_data.dataset import YoloDataset
from yolo_data.settings import Settings
from yolo_data.integrations.yolov5 import create_dataloader

from conftest import make_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from taskdata import pose_dataset  # noqa: E402

NAMES = ("a", "b", "c")
# each row a triangle whose first x tells the rows apart (class, then 0.1 * row number)
FILES = {
    "p0.jpg": [(0, 0.10), (1, 0.20), (2, 0.30)],
    "p1.jpg": [(1, 0.40), (0, 0.50)],
    "p2.jpg": [(1, 0.60)],              # nothing of classes 0 and 2: a background with classes=[2, 0]
    "p3.jpg": [(2, 0.70), (2, 0.75)],
    "p4.jpg": [],                       # a background already
}


def triangle(x: float):
    return np.array([[x, 0.2], [x + 0.1, 0.2], [x + 0.05, 0.4]], np.float32)


@pytest.fixture
def polygons(tmp_path):
    items = [(name, (64, 48), "".join(f"{c} " + " ".join(f"{v:.6f}" for v in triangle(x).ravel()) + "\n"
                                      for c, x in rows)) for name, rows in FILES.items()]
    return make_dataset(tmp_path / "ds", items, names=NAMES)


def expected(classes, remap=False):
    """{image name: [(class, first x), ...]} as Ultralytics keeps them: the rows of ``classes`` in file order."""
    new = {c: (k if remap else c) for k, c in enumerate(classes)}
    return {name: [(new[c], x) for c, x in rows if c in new] for name, rows in FILES.items()}


def held(ds):
    """{image name: [(class, first polygon x), ...]} the dataset's items hold, checking box = polygon envelope."""
    out = {}
    for i, f in enumerate(ds.im_files):
        labels, segments = ds.labels[i], ds.segments[i]
        assert len(segments) == len(labels)
        for row, seg in zip(labels, segments):
            lo, hi = seg.min(0), seg.max(0)
            np.testing.assert_allclose(row[1:], [*(lo + hi) / 2, *(hi - lo)], atol=1e-6)
        out[Path(f).name] = [(int(r[0]), round(float(s[0, 0]), 4)) for r, s in zip(labels, segments)]
    return out


def test_classes_keep_those_rows_with_their_polygons_and_every_image(polygons, caplog):
    full = YoloDataset(polygons, Settings(split="train", task="segment"))
    with caplog.at_level(logging.INFO, logger="yolo_data"):
        ds = YoloDataset(polygons, Settings(split="train", task="segment", classes=[2, 0]))
    assert held(full) == expected([0, 1, 2])
    assert held(ds) == expected([2, 0])  # p2 kept, without rows
    assert len(ds) == 5 and ds.store.num_backgrounds() == 2 and list(ds.names) == list(NAMES)
    said = [r.getMessage() for r in caplog.records if "classes=" in r.getMessage()]
    assert said == ["classes=[2, 0] (c, a): 5 of 8 labels kept; 1 of 5 images left without labels, kept as "
                    "backgrounds"]


def test_remap_gives_ids_in_the_order_of_classes_and_the_kept_names(polygons):
    ds = YoloDataset(polygons, Settings(split="train", task="segment", classes=[2, 0], remap_classes=True))
    assert held(ds) == expected([2, 0], remap=True)
    assert list(ds.names) == ["c", "a"] and ds.num_classes() == 2
    # a class kept with no label in the split is said, and still named
    ds = YoloDataset(polygons, Settings(split="train", classes=[1], remap_classes=True))
    assert list(ds.names) == ["b"] and {int(c) for lb in ds.labels for c in lb[:, 0]} == {0}


def test_keypoints_go_with_their_rows(tmp_path):
    yaml = pose_dataset(tmp_path / "pose")  # every image: one object of class 0, one of class 1
    full = YoloDataset(yaml, Settings(split="train"))
    ds = YoloDataset(yaml, Settings(split="train", classes=[1], remap_classes=True))
    assert len(ds) == len(full) == 6
    for i in range(len(ds)):
        j = list(full.im_files).index(ds.im_files[i])
        keep = full.labels[j][:, 0] == 1
        assert keep.sum() == 1
        np.testing.assert_array_equal(ds.labels[i][:, 1:], full.labels[j][keep, 1:])
        np.testing.assert_array_equal(ds.labels[i][:, 0], [0])
        np.testing.assert_array_equal(ds.keypoints[i], full.keypoints[j][keep])


def test_the_label_cache_stays_the_splits_own(polygons):
    YoloDataset(polygons, Settings(split="train"))
    cache = next((polygons.parent / "labels").glob("*.cache"))
    before = hashlib.sha256(cache.read_bytes()).hexdigest()
    ds = YoloDataset(polygons, Settings(split="train", classes=[0], remap_classes=True))
    assert not ds.split_labels.built and ds.split_labels.cache_file == cache  # read, not scanned again
    assert hashlib.sha256(cache.read_bytes()).hexdigest() == before
    assert [p.name for p in (polygons.parent / "labels").glob("*.cache")] == [cache.name]
    assert YoloDataset(polygons, Settings(split="train")).store.num_boxes() == 8  # the next run reads them all


def test_batches_min_items_and_single_cls_follow_the_filter(polygons):
    loader, ds = create_dataloader(str(polygons), 64, 5, 32, workers=0, split="train", classes=[2, 0],
                                   remap_classes=True)
    targets = np.concatenate([b[1].numpy() for b in loader])
    assert len(targets) == ds.store.num_boxes() == 5 and set(targets[:, 1].tolist()) == {0.0, 1.0}
    # min_items counts the rows an item keeps
    ds = YoloDataset(polygons, Settings(split="train", classes=[2], min_items=1))
    assert sorted(Path(f).name for f in ds.im_files) == ["p0.jpg", "p3.jpg"]
    ds = YoloDataset(polygons, Settings(split="train", classes=[2, 1], single_cls=True))
    assert held(ds)["p1.jpg"] == [(0, 0.4)] and ds.store.num_boxes() == 6


def test_class_balance_counts_the_kept_rows(tmp_path):
    # class 1 is rare (one image of 8); class 0 is in every image
    items = [(f"i{k}.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n" + ("1 0.2 0.2 0.1 0.1\n" if k == 0 else ""))
             for k in range(8)]
    yaml = make_dataset(tmp_path / "ds", items, names=("common", "rare"))
    hyp = {"mosaic": 0.0}
    loader, _ = create_dataloader(str(yaml), 32, 4, 32, augment=True, hyp=hyp, workers=0, class_balance=0.5)
    assert loader.sampler.repeat_factors.max() == 2.0  # sqrt(0.5 / (1/8))
    loader, _ = create_dataloader(str(yaml), 32, 4, 32, augment=True, hyp=hyp, workers=0, class_balance=0.5,
                                  classes=[0])
    assert np.all(loader.sampler.repeat_factors == 1.0) and len(loader) == 2


def test_classes_outside_the_names_and_bad_values_are_refused(polygons):
    with pytest.raises(ValueError, match=r"train: classes=\[0, 3\]: .*data\.yaml has 3 classes \(ids 0\.\.2\); "
                                         r"3 is not one of them"):
        YoloDataset(polygons, Settings(split="train", classes=[0, 3]), prefix="train: ")
    for bad, said in (([], "an empty list"), ([1, 1], "lists 1 more than once"), ([-1], "whole numbers >= 0"),
                      ("0,1", "a class id or a list"), ([0.5], "whole numbers"), (True, "whole numbers")):
        with pytest.raises(ValueError, match=f"settings: classes .*{said}"):
            Settings(classes=bad)
    with pytest.raises(ValueError, match="remap_classes=True needs classes"):
        Settings(remap_classes=True)
    with pytest.raises(ValueError, match="remap_classes must be True or False"):
        Settings(classes=[0], remap_classes="yes")
    assert Settings(classes=2).index.classes == (2,) and Settings(classes=np.array([3, 1])).index.classes == (3, 1)
    assert Settings().replace(classes=[1]).fields()["classes"] == (1,)
