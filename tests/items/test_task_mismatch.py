"""Label rows read for another task than they were written for: what each case gives, as docs/tasks.md's
table says (Ultralytics 8.4's reading where it makes sense, else a refusal that names the dataset, its
kpt_shape and the task), never rows silently read as something else.

The expected readings were checked against Ultralytics 8.4's own verify_image_label on the same rows.
"""
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from yolo_data import Settings, YoloDataset
from yolo_data.report.compose import ReportOptions, read_splits
from yolo_data.items.task import polygons_of
from yolo_data.formats.yolotxt import YoloReader

from conftest import SHARED, make_dataset

# two objects of 3 keypoints each: 11 columns a row, which an odd count >= 7 would make a 5-point polygon
POSE_ROWS = ("0 0.3 0.5 0.2 0.4 0.25 0.35 0.9 0.9 0.05 0.6\n"
             "1 0.7 0.5 0.3 0.2 0.6 0.45 0.8 0.55 0.7 0.5\n")
POSE_BOXES = np.array([[0, 0.3, 0.5, 0.2, 0.4], [1, 0.7, 0.5, 0.3, 0.2]], np.float32)


def pose_yaml(root: Path, rows: str = POSE_ROWS, kpt_shape="[3, 2]", n: int = 3) -> Path:
    yaml = make_dataset(root, [(f"p{k}.png", (100, 80), rows) for k in range(n)], names=("a", "b"))
    if kpt_shape:
        yaml.write_text(yaml.read_text() + f"kpt_shape: {kpt_shape}\n")
    return yaml


def read(yaml, **fields) -> YoloDataset:
    return YoloDataset(str(yaml), Settings.evaluation(split="train", **fields))


def test_a_pose_dataset_read_for_segment_keeps_each_rows_box_and_says_so(tmp_path, caplog):
    yaml = pose_yaml(tmp_path)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        seg = read(yaml, task="segment")
    detect = read(yaml, task="detect")
    assert seg.task.name == "segment" and len(seg) == len(detect) == 3
    for i in range(3):
        np.testing.assert_array_equal(seg.labels[i], POSE_BOXES)
        np.testing.assert_array_equal(seg.labels[i], detect.labels[i])
        assert seg.store.segments_of(i) == []  # no polygon made of the keypoints
        masks = polygons_of(seg.task, seg.store, i)  # each mask is its box's rectangle
        np.testing.assert_allclose(masks[0], [[0.2, 0.3], [0.4, 0.3], [0.4, 0.7], [0.2, 0.7]], atol=1e-6)
    said = [r.getMessage() for r in caplog.records if "kpt_shape" in r.getMessage()]
    assert said == [f"{yaml}: task 'segment', but kpt_shape [3, 2] makes it a pose dataset (each object a box and "
                    "3 keypoints; a YOLO row of 11 numbers), without polygons: each object is read for its box, and "
                    "its mask is the box's rectangle (task 'pose' reads the keypoints)"]
    assert {p.reason for p in seg.split_labels.problems} == \
        {"2 rows are boxes without a polygon (2 pose rows read for their boxes): each one's mask is its box"}


def test_kpt_shape_given_in_the_settings_reads_pose_rows_for_segment_as_the_plugin_does(tmp_path):
    # the Ultralytics plug-in passes the data dict's kpt_shape in the settings beside the model's task
    yaml = pose_yaml(tmp_path, kpt_shape=None)
    seg = read(yaml, task="segment", kpt_shape=[3, 2])
    assert [seg.labels[i].tolist() for i in range(3)] == [POSE_BOXES.tolist()] * 3
    assert seg.split_labels.cache_file.name == "train.segment.yolo_data.cache"


def test_the_ultralytics_plugin_with_a_seg_model_reads_a_pose_dataset_by_its_boxes(tmp_path):
    from types import SimpleNamespace

    from yolo_data.integrations.ultralytics_args import loader_settings
    from yolo_data.integrations.ultralytics_loader import create_loader
    pose_yaml(tmp_path)
    data = {"kpt_shape": [3, 2]}  # the trainer's data dict: Ultralytics hands the loader the split's folder
    seg = SimpleNamespace(imgsz=128, seed=0, task="segment")
    loader = create_loader(str(tmp_path / "images" / "train"), loader_settings(seg, "val", 3, 32, workers=0, data=data))
    assert all(np.array_equal(loader.dataset.store.labels_of(i), POSE_BOXES) for i in range(3))
    with pytest.raises(ValueError, match=r"task 'obb' reads the 4 corners of rotated boxes, but kpt_shape \[3, 2\]"):
        obb = SimpleNamespace(imgsz=128, seed=0, task="obb")
        create_loader(str(tmp_path / "images" / "train"), loader_settings(obb, "val", 3, 32, workers=0, data=data))


def test_the_report_reads_a_pose_dataset_for_segment_by_its_boxes(tmp_path):
    yaml = pose_yaml(tmp_path)
    splits, names, task, spec = read_splits(yaml, ReportOptions(task="segment", cache_dir=str(tmp_path / "c"),
                                                                workers=1, progress=False))
    store = splits[0].labels.store
    assert task.name == "segment" and len(store) == 3
    assert all(np.array_equal(store.labels_of(i), POSE_BOXES) and store.segments_of(i) == [] for i in range(3))


def test_a_pose_dataset_is_refused_for_obb_naming_the_yaml_its_kpt_shape_and_the_task(tmp_path):
    yaml = pose_yaml(tmp_path)
    message = (f"{yaml}: task 'obb' reads the 4 corners of rotated boxes, but kpt_shape [3, 2] makes it a pose "
               "dataset (each object a box and 3 keypoints; a YOLO row of 11 numbers): read it with task 'pose' "
               "or 'detect'")
    with pytest.raises(ValueError) as e:
        read(yaml, task="obb")
    assert str(e.value) == message
    with pytest.raises(ValueError) as e:  # yolo-data report --task obb
        read_splits(yaml, ReportOptions(task="obb", cache_dir=str(tmp_path / "c"), workers=1, progress=False))
    assert str(e.value) == message


def test_a_pose_row_of_7_numbers_is_a_box_not_a_triangle(tmp_path):
    # kpt_shape [1, 2]: 5 + 2 numbers, as many as a 3-point polygon; the yaml says pose rows (so Ultralytics)
    yaml = pose_yaml(tmp_path, rows="0 0.5 0.5 0.2 0.4 0.9 0.1\n", kpt_shape="[1, 2]", n=1)
    for task in ("detect", "segment"):
        ds = read(yaml, task=task)
        assert ds.labels[0].tolist() == [[0, 0.5, 0.5, np.float32(0.2), np.float32(0.4)]] and \
            ds.store.segments_of(0) == []


def test_oriented_box_rows_read_for_detect_give_their_envelope_also_past_the_edge(tmp_path):
    rows = ("0 0.2 0.3 0.4 0.1 0.5 0.4 0.3 0.6\n"
            "1 0.9 0.2 1.02 0.3 0.95 0.5 0.83 0.4\n")  # a corner 2% past the right edge, kept by Ultralytics
    yaml = make_dataset(tmp_path, [("o.png", (100, 80), rows)], names=("a", "b"))
    ds = read(yaml)
    assert len(ds) == 1 and not ds.split_labels.problems
    np.testing.assert_allclose(ds.labels[0], [[0, 0.35, 0.35, 0.3, 0.5], [1, 0.915, 0.35, 0.17, 0.3]], atol=1e-6)
    assert [len(s) for s in ds.store.segments_of(0)] == [4, 4]


@pytest.mark.parametrize("task,kpt_shape,row,reason", [
    ("pose", (3, 2), "0 0.1 0.1 0.3 0.1 0.2 0.3", "line 1: 7 columns (pose rows with kpt_shape [3, 2] are class x y "
                                                  "w h and 3 keypoints x y: 11 columns)"),
    ("pose", (3, 3), "0 0.5 0.5 0.2 0.2", "line 1: 5 columns (pose rows with kpt_shape [3, 3] are class x y w h and "
                                          "3 keypoints x y visibility: 14 columns)"),
    ("obb", None, "0 0.5 0.5 0.2 0.2", "line 1: 5 columns (an oriented box row is a class and its 4 corners "
                                       "x1 y1 x2 y2 x3 y3 x4 y4: 9 columns)"),
    ("obb", None, "0 0.1 0.1 0.3 0.1 0.2 0.3", "line 1: 7 columns (an oriented box row is a class and its 4 "
                                               "corners x1 y1 x2 y2 x3 y3 x4 y4: 9 columns)"),
    ("detect", None, "0 0.5 0.5 0.2 0.2 0.9", "line 1: 6 columns (expected 5: class x y w h, or a class and 3 or "
                                              "more x y points)"),
    # a pose dataset's rows are pose rows or boxes: a row that lacks its visibilities is no polygon
    ("segment", (3, 3), "0 0.5 0.5 0.2 0.2 0.1 0.1 0.2 0.2 0.3 0.3", "line 1: 11 columns (pose rows with kpt_shape "
     "[3, 3] are class x y w h and 3 keypoints x y visibility: 14 columns; a box row has 5)"),
    ("detect", (3, 2), "0 0.1 0.1 0.3 0.1 0.2 0.3", "line 1: 7 columns (pose rows with kpt_shape [3, 2] are class x y "
                                                    "w h and 3 keypoints x y: 11 columns; a box row has 5)"),
])
def test_rows_that_fit_no_reading_of_the_task_are_named_and_their_image_left_out(tmp_path, task, kpt_shape, row,
                                                                                 reason):
    lb = tmp_path / "a.txt"
    lb.write_text(row + "\n")
    with pytest.raises(Exception) as e:
        YoloReader(2, task, kpt_shape).read(str(lb), (80, 100))
    assert str(e.value) == reason


def test_a_polygon_dataset_read_for_pose_is_refused_naming_the_dataset_and_kpt_shape(tmp_path):
    yaml = pose_yaml(tmp_path, rows="0 0.1 0.1 0.3 0.1 0.2 0.3\n")
    with pytest.raises(RuntimeError) as e:
        read(yaml)  # kpt_shape in the yaml: task pose
    assert str(e.value).startswith(f"no usable images in {yaml}: ")
    assert "line 1: 7 columns (pose rows with kpt_shape [3, 2] are class x y w h and 3 keypoints x y: 11 columns)" \
        in str(e.value)


@pytest.mark.skipif(not (SHARED / "tiger-pose").is_dir(), reason="../shared/datasets is not beside the project")
def test_tiger_pose_read_for_segment_has_the_boxes_of_detect_and_no_polygons(tmp_path):
    root = tmp_path / "tiger-pose"
    shutil.copytree(SHARED / "tiger-pose", root)
    yaml = root / "data.yaml"
    seg = YoloDataset(str(yaml), Settings.evaluation(task="segment"))  # val2017
    detect = YoloDataset(str(yaml), Settings.evaluation(task="detect"))
    assert len(seg) == len(detect) == 53 and list(seg.im_files) == list(detect.im_files)
    assert all(np.array_equal(a, b) for a, b in zip(seg.labels, detect.labels))
    assert all(seg.store.segments_of(i) == [] for i in range(53))
    assert not any(p.dropped for p in seg.split_labels.problems)
