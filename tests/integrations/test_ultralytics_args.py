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

import pytest
import yaml

from yolo_data.integrations.ultralytics_args import (MAPPING, NO_EQUIVALENT, NOT_DATA, OWN_ARGS, REFUSED,
                                                     check_arguments, class_subset, ignored_arguments,
                                                     loader_settings, names_differ, take_own_args,
                                                     validation_classes)
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
    with pytest.raises(ValueError, match="gray.yaml: channels: 1: yolo_data's batches are 3-channel RGB"):
        check_arguments({}, {"yaml_file": "gray.yaml", "channels": 1})
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
