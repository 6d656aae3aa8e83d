"""Ultralytics' arguments in the plug-in: every key of its default.yaml in one group (mapped, warned about,
refused, or not read by a data pipeline), ``classes`` and ``remap_classes``, and the refusals.

Without Ultralytics (pure functions of ultralytics_args); the key census reads the installed
Ultralytics' default.yaml without importing it, and is skipped where Ultralytics is not installed (the
compatibility suite's environment always has it).  A training run with ``classes`` and the remap:
benchmarks/compat/ultralytics_classes.py.
"""
import importlib.util
import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
import yaml

from yolo_data.integrations.ultralytics_args import (MAPPING, NO_EQUIVALENT, NOT_DATA, OWN_ARGS, REFUSED,
                                                     check_arguments, class_subset, data_channels,
                                                     ignored_arguments, loader_settings, names_differ,
                                                     remote_dataset, take_own_args, validation_classes)
from yolo_data.integrations.ultralytics_loader import create_loader

ROOT = Path(__file__).resolve().parents[2]
GROUPS = {"MAPPING": MAPPING, "NO_EQUIVALENT": NO_EQUIVALENT, "REFUSED": REFUSED, "NOT_DATA": NOT_DATA}


def installed_default_yaml() -> Path:
    spec = importlib.util.find_spec("ultralytics")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("Ultralytics is not installed here (the compatibility suite's environment has it)")
    return Path(list(spec.submodule_search_locations)[0]) / "cfg" / "default.yaml"


def test_every_key_of_ultralytics_default_yaml_is_in_one_group():
    keys = yaml.safe_load(installed_default_yaml().read_text())
    placed = {key: [g for g, table in GROUPS.items() if key in table] for key in keys}
    assert {k: g for k, g in placed.items() if len(g) != 1} == {}, "each key in exactly one group"


def test_groups_do_not_overlap_and_the_docs_list_every_key():
    seen = {}
    for group, table in GROUPS.items():
        for key in table:
            assert key not in seen, f"{key} in {seen.get(key)} and {group}"
            seen[key] = group
    assert not set(OWN_ARGS) & set(seen)  # yolo_data's own keys are not Ultralytics'
    doc = (ROOT / "docs" / "ultralytics.md").read_text()
    for key in list(seen) + list(OWN_ARGS):
        assert f"`{key}`" in doc, key


def test_classes_and_the_remap_reach_both_loaders():
    for mode in ("train", "val"):
        s = loader_settings({"classes": [3, 1]}, mode, 8, 32, remap_classes=True)
        assert (s.index.classes, s.index.remap_classes) == ((3, 1), True)
        s = loader_settings({"classes": 2}, mode, 8, 32)  # Ultralytics' `classes=2`
        assert (s.index.classes, s.index.remap_classes) == ((2,), False)
        assert loader_settings({}, mode, 8, 32).index.classes is None
    with pytest.raises(ValueError, match="settings: classes must be a class id or a list"):
        loader_settings({"classes": "person, bus"}, "train", 8, 32)  # YOLOE's text prompts
    with pytest.raises(ValueError, match="remap_classes=True needs classes"):
        loader_settings({}, "train", 8, 32, remap_classes=True)
    rest, own = take_own_args({"data": "x.yaml", "classes": [0], "remap_classes": True})
    assert rest == {"data": "x.yaml", "classes": [0]} and own == {"remap_classes": True}
    with pytest.raises(ValueError, match="remap_classes must be True or False"):
        take_own_args({"remap_classes": "yes"})


def test_the_model_is_made_from_the_kept_names():
    data = {"yaml_file": "coco.yaml", "names": {0: "person", 1: "bicycle", 2: "car"}, "nc": 3, "train": "t"}
    assert class_subset(data, [2, 0], remap=True) == {**data, "names": {0: "car", 1: "person"}, "nc": 2}
    assert class_subset(data, [2, 0]) is data and class_subset(data, None) is data  # ids and names as they are
    assert data["nc"] == 3  # the dict handed in is left as it was
    single = {**data, "names": {0: "item"}, "nc": 1}
    assert class_subset(single, [2], remap=True, single_cls=True) is single
    with pytest.raises(ValueError, match=r"classes=\[0, 7\]: coco.yaml has 3 classes \(ids 0\.\.2\); 7 is not one"):
        class_subset(data, [0, 7])
    with pytest.raises(ValueError, match="remap_classes=True needs classes"):
        class_subset(data, None, remap=True)


def test_a_validator_leaves_out_the_labels_a_smaller_model_cannot_predict():
    # as Ultralytics' validator: labels of class ids >= the model's nc are dropped
    assert validation_classes(None, False, 80, 80) == (None, False)
    assert validation_classes(None, False, 80, 3) == ((0, 1, 2), False)
    assert validation_classes([5, 1, 0], False, 80, 3) == ((1, 0), False)
    assert validation_classes([5, 1], True, 80, 2) == ((5, 1), True)  # a model trained with the remap
    assert validation_classes([5, 1, 7], True, 80, 2) == ((5, 1), True)
    assert validation_classes(None, False, 80, 1, single_cls=True) == (None, False)
    assert validation_classes(None, False, 80, None) == (None, False)  # no model names yet
    with pytest.raises(ValueError, match=r"classes=\[5, 7\]: the model has 3 classes .* remap_classes=True"):
        validation_classes([5, 7], False, 80, 3)


def test_a_model_validated_without_its_remap_is_named():
    data = {0: "person", 1: "bicycle", 2: "car"}
    trained = {0: "car", 1: "person"}  # classes=[2, 0], remap_classes=True
    assert names_differ(trained, data, [2, 0], True) == []
    assert names_differ(trained, data, [2, 0], False) == ["0: 'car' / 'person'", "1: 'person' / 'bicycle'"]
    assert names_differ(trained, data, [0, 2], True) == ["0: 'car' / 'person'", "1: 'person' / 'car'"]
    assert names_differ(data, ["person", "bicycle", "car"], None, False) == []


def test_what_cannot_be_done_is_refused_and_what_is_ignored_is_named_once(caplog):
    with pytest.raises(ValueError, match="augmentations=...: a list of Albumentations transforms"):
        check_arguments(SimpleNamespace(augmentations=[object()]))
    check_arguments({}, {"channels": 3})
    # a (min, max) pair of scale factors: taken where it is 1 -/+ a gain
    assert loader_settings({"scale": (0.5, 1.5)}, "train", 8, 32).fields()["hyp"].scale == 0.5
    with pytest.raises(ValueError, match=r"scale=\(0.5, 1.0\): yolo_data's random perspective"):
        loader_settings({"scale": (0.5, 1.0)}, "train", 8, 32)
    assert ignored_arguments({"bgr": 0.1}) == ["Ultralytics bgr=0.1: " + NO_EQUIVALENT["bgr"]]
    assert ignored_arguments({}) == []
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        loader_settings({"bgr": 0.1}, "train", 8, 32, warn=False)  # the trainer has named it already
        loader_settings({"bgr": 0.1}, "val", 8, 32)  # no augmentation in validation: nothing to ignore
    assert not [r for r in caplog.records if "bgr" in r.getMessage()]


def test_the_fraction_of_a_validation_split_is_the_entry_of_split(tmp_path):
    assert loader_settings({"fraction": [1.0, 0.5, 0.25]}, "val", 8, 32).source.fraction == 0.5
    assert loader_settings({"fraction": [1.0, 0.5, 0.25], "split": "test"}, "val", 8, 32).source.fraction == 0.25
    shutil.copytree(ROOT / "data", tmp_path / "data", symlinks=False)
    cfg = {"imgsz": 64, "classes": [2, 0], "fraction": [1.0, 0.5]}
    loader = create_loader(tmp_path / "data" / "sample.yaml",
                           loader_settings(cfg, "val", 4, 32, workers=0, remap_classes=True), split="val")
    ds = loader.dataset
    assert len(ds) == 4 and list(ds.names) == ["triangle", "circle"]
    labels = ds.labels
    assert all(set(lb["cls"][:, 0].tolist()) <= {0.0, 1.0} for lb in labels)
    seen = sum(len(b["cls"]) for b in loader)
    assert seen == sum(len(lb["cls"]) for lb in labels) == ds.store.num_boxes()
    loader.close()


def band_split(root: Path, channels: int, n: int = 6) -> Path:
    """A dataset of ``n`` images of ``channels`` bands (gray or BGRA PNGs, 10 bands as 10-page TIFFs),
    two boxes each, and a yaml saying ``channels``; returns the yaml."""
    rng = np.random.default_rng(channels)
    for i in range(n):
        img = rng.integers(0, 255, (40 + 4 * i, 56, channels), dtype=np.uint8)
        path = root / "images" / "train" / f"{i}.{'tif' if channels > 4 else 'png'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if channels > 4:
            assert cv2.imwritemulti(str(path), [img[:, :, k] for k in range(channels)])
        else:
            assert cv2.imwrite(str(path), img)
        (root / "labels" / "train").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "train" / f"{i}.txt").write_text("0 0.5 0.5 0.3 0.4\n1 0.3 0.3 0.2 0.2\n")
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/train\nnames: [a, b]\n"
                                    f"channels: {channels}\n")
    return root / "data.yaml"


@pytest.mark.parametrize("channels", [1, 4, 10])
def test_the_data_dicts_channels_are_the_bands_both_loaders_read_from_a_split_folder(tmp_path, channels):
    # Ultralytics hands the loaders a split's folder, not the yaml: the bands come from its data dict
    yaml_file = band_split(tmp_path, channels)
    data = {"yaml_file": str(yaml_file), "channels": channels, "names": {0: "a", 1: "b"}, "nc": 2}
    for mode in ("train", "val"):
        settings = loader_settings({"imgsz": 64}, mode, 3, 32, workers=0, data=data)
        assert settings.images.channels == channels
        loader = create_loader(tmp_path / "images" / "train", settings)
        b = next(iter(loader))
        assert b["img"].dtype == torch.uint8 and tuple(b["img"].shape[:2]) == (3, channels), mode
        assert len(loader.dataset) == 6 and (mode == "train" or len(b["cls"]) == 6)  # no image left out
        loader.close()
    # a data dict without the key (a dict of one's own): the loader's own rule, the yaml it reads, else 3
    assert loader_settings({}, "train", 8, 32, data={"names": {0: "a"}}).images.channels is None
    assert loader_settings({}, "val", 8, 32).images.channels is None


def test_channels_no_image_can_have_are_refused_naming_the_yaml():
    assert "channels" not in REFUSED
    for c in (1, 3, 4, 10):
        check_arguments({}, {"yaml_file": "bands.yaml", "channels": c})
        assert data_channels({"channels": c}) == c
    assert data_channels(None) is None and data_channels({}) is None
    for bad in (0, -1, "1", True, 2.0):
        with pytest.raises(ValueError, match=rf"bands.yaml: channels: {bad!r}: the bands of every image .* a whole "
                                             "number >= 1"):
            check_arguments({}, {"yaml_file": "bands.yaml", "channels": bad})
        with pytest.raises(ValueError, match=r"the data yaml: channels:"):
            loader_settings({}, "train", 8, 32, data={"channels": bad})


@pytest.mark.parametrize("channels", [1, 10, None])
def test_a_yaml_read_by_yolo_data_gives_the_trainer_its_channels(tmp_path, channels):
    # the data dict of a yaml Ultralytics cannot read (one in a bucket) is made by yolo_data: the model
    # is built for the yaml's channels, 3 without the key, as Ultralytics' check_det_dataset does
    yaml_file = band_split(tmp_path, channels or 3, n=1)
    if channels is None:
        yaml_file.write_text("\n".join(ln for ln in yaml_file.read_text().splitlines() if "channels" not in ln))
    assert remote_dataset(str(yaml_file))["channels"] == (channels or 3)
