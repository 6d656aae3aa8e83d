"""Label reading by task (pose keypoints, oriented boxes, segment polygons), checked against pixels.

Fixtures draw what the labels say: coloured dots at keypoints, filled rotated rectangles at oriented
boxes.  Wherever an item's keypoint is visible the output image must show its dot's colour there (the
colour of the keypoint flip_idx puts in its place after a left-right flip); an oriented box's corners
must enclose its rectangle's pixels after mosaic, rotation and flips.
"""
import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from yolo_data import Settings, YoloDataset, create_dataloader
from yolo_data.formats.datayaml import load_dataset_yaml
from yolo_data.settings import TargetSettings
from yolo_data.items.task import polygons_of, resolve_task
from yolo_data.formats.yolotxt import YoloReader

from taskdata import COLOURS, FLIP_IDX, obb_dataset, pose_dataset, write_yaml

QUIET = {"hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "flipud": 0.0, "mixup": 0.0, "copy_paste": 0.0}
SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"


def training(yaml, size=128, workers=0, task=None, **hyp):
    return create_dataloader(str(yaml), size, 4, 32, augment=True, workers=workers, settings=Settings(task=task),
                             hyp={**QUIET, "mosaic": 1.0, "degrees": 20.0, "scale": 0.3, **hyp})


def rgb_at(img: torch.Tensor, x: float, y: float) -> np.ndarray:
    return img[:, int(y), int(x)].numpy().astype(int)


def check_dots(imgs, targets, kps, flipped: bool):
    """Every visible keypoint sits on a dot of its own colour (of its flip partner's when flipped)."""
    checked = 0
    size = imgs.shape[-1]
    for row, kp in zip(targets, kps):
        img = imgs[int(row[0])]
        for j, (x, y, v) in enumerate(kp.numpy() * (size, size, 1)):
            if v == 0 or not (3 <= x < size - 3 and 3 <= y < size - 3):
                continue
            b, g, r = COLOURS[FLIP_IDX[j] if flipped else j]
            assert np.abs(rgb_at(img, x, y) - (r, g, b)).max() < 60, (j, x, y, rgb_at(img, x, y))
            checked += 1
    return checked


# -- reading -----------------------------------------------------------------------------------------------
def test_a_yaml_with_kpt_shape_is_read_as_pose_with_visibility_made_when_absent(tmp_path):
    yaml = pose_dataset(tmp_path, n=2, ndim=2)
    ds = YoloDataset(str(yaml), Settings.evaluation(split="train", img_size=128))
    assert ds.task.name == "pose" and ds.task.kpt_shape == (3, 2) and ds.task.flip_idx == tuple(FLIP_IDX)
    kp = ds.keypoints[0]
    assert kp.shape == (2, 3, 3) and (kp[..., 2] == 1).all()
    rows = np.loadtxt(tmp_path / "labels" / "train" / "p0.txt")
    np.testing.assert_allclose(kp[..., :2].reshape(2, -1), rows[:, 5:], atol=1e-6)


def test_the_visibility_column_is_kept_and_rows_that_do_not_fit_are_named(tmp_path):
    yaml = pose_dataset(tmp_path, n=3, ndim=3)
    bad = tmp_path / "labels" / "train" / "p1.txt"
    bad.write_text("0 0.5 0.5 0.2 0.2 0.5 0.5 2 0.4 0.4 2\n")  # 2 keypoints, not 3
    ds = YoloDataset(str(yaml), Settings.evaluation(split="train", img_size=128))
    assert len(ds) == 2 and (ds.keypoints[0][..., 2] == 2).all()
    problem = next(p for p in ds.split_labels.problems if "p1.txt" in str(p))
    assert "line 1: 11 columns (pose rows with kpt_shape [3, 3] are class x y w h and 3 keypoints " \
           "x y visibility: 14 columns)" in str(problem)


def test_detection_of_a_pose_dataset_keeps_the_boxes(tmp_path):
    yaml = pose_dataset(tmp_path, n=2)
    ds = YoloDataset(str(yaml), Settings.evaluation(split="train", img_size=128, task="detect"))
    assert ds.task.name == "detect" and len(ds.labels[0]) == 2 and ds.keypoints[0].shape == (2, 0, 3)
    item = ds[0]
    assert len(item) == 4  # detection items carry no extras
    assert ds.split_labels.cache_file.name == "train.detect.yolo_data.cache"


def test_oriented_box_rows_must_have_four_corners_and_may_reach_past_the_edge(tmp_path):
    lb = tmp_path / "a.txt"
    reader = YoloReader(2, "obb")
    lb.write_text("0 0.5 0.5 0.2 0.2\n")
    with pytest.raises(Exception, match=r"5 columns \(an oriented box row is a class and its 4 corners"):
        reader.read(str(lb), (100, 100))
    lb.write_text("1 -0.005 0.2 0.4 0.1 0.5 0.3 0.1 0.4\n")  # a corner 0.5% past the left edge
    labels, segments, status, warnings = reader.read(str(lb), (100, 100))
    assert status == "ok" and segments[0][0, 0] == np.float32(-0.005)  # the corner as written
    assert labels[0, 1] - labels[0, 3] / 2 == pytest.approx(0.0)  # its box clipped to the image
    lb.write_text("1 -0.05 0.2 0.4 0.1 0.5 0.3 0.1 0.4\n")  # 5% past: its envelope (centre 0.225) is inside
    assert reader.read(str(lb), (100, 100))[2] == "ok"
    lb.write_text("1 0.9 0.2 1.2 0.1 1.25 0.3 0.95 0.4\n")  # the envelope's centre 1.075 is past 1.01
    with pytest.raises(Exception, match="normalised"):
        reader.read(str(lb), (100, 100))


def test_a_segment_task_gives_box_rows_their_rectangle_with_a_warning(tmp_path):
    yaml = write_yaml(tmp_path)
    for folder in ("images", "labels"):
        (tmp_path / folder / "train").mkdir(parents=True)
    for name, text in (("a", "0 0.5 0.5 0.2 0.4\n1 0.1 0.1 0.3 0.1 0.2 0.3\n"), ("b", "1 0.25 0.5 0.5 0.2\n")):
        cv2.imwrite(str(tmp_path / "images" / "train" / f"{name}.png"), np.zeros((100, 100, 3), np.uint8))
        (tmp_path / "labels" / "train" / f"{name}.txt").write_text(text)
    ds = YoloDataset(str(yaml), Settings.evaluation(split="train", task="segment"))
    assert [(Path(p.file).name, p.reason, p.dropped) for p in ds.split_labels.problems] == \
        [(f"{n}.txt", "1 rows are boxes without a polygon: each one's mask is its box", False) for n in "ab"]
    rectangle = [[0.4, 0.3], [0.6, 0.3], [0.6, 0.7], [0.4, 0.7]]
    a, b = (polygons_of(ds.task, ds.store, i) for i in range(2))
    np.testing.assert_allclose(a[0], rectangle, atol=1e-6)  # beside a polygon
    assert len(a[1]) == 3
    np.testing.assert_allclose(b[0], [[0, 0.4], [0.5, 0.4], [0.5, 0.6], [0, 0.6]], atol=1e-6)  # alone
    detect = YoloDataset(str(yaml), Settings.evaluation(split="train"))
    assert polygons_of(detect.task, detect.store, 1) == [] and detect.split_labels.problems == []


def test_pose_needs_kpt_shape_and_a_flip_idx_that_fits(tmp_path):
    with pytest.raises(ValueError, match="task 'pose' needs the keypoints per object"):
        resolve_task(TargetSettings(task="pose"), None, None, "x.yaml")
    with pytest.raises(ValueError, match="flip_idx must list each of the 3 keypoints once"):
        resolve_task(TargetSettings(flip_idx=[0, 0, 1]), (3, 2), None, "x.yaml")
    for text, message in (("kpt_shape: [3, 4]\n", "'kpt_shape' must be"),
                          ("kpt_shape: [3, 2]\nflip_idx: [0, 1]\n", "'flip_idx' must list each of the 3"),
                          ("flip_idx: [0, 1]\n", "'flip_idx' without 'kpt_shape'")):
        with pytest.raises(ValueError, match=message):
            load_dataset_yaml(write_yaml(tmp_path, text))
    with pytest.raises(ValueError, match="task must be one of detect, segment, pose, obb"):
        Settings(task="classify")


def test_each_task_has_its_own_cache_and_the_fingerprint_covers_kpt_shape(tmp_path):
    yaml = pose_dataset(tmp_path, n=2)
    pose = YoloDataset(str(yaml), Settings.evaluation(split="train", img_size=128))
    assert pose.split_labels.cache_file.name == "train.pose.yolo_data.cache" and pose.split_labels.built
    again = YoloDataset(str(yaml), Settings.evaluation(split="train", img_size=128))
    assert not again.split_labels.built  # read back from the cache, keypoints included
    assert all(np.array_equal(pose.keypoints[i], again.keypoints[i]) for i in range(2))
    text = yaml.read_text().replace("kpt_shape: [3, 2]", "kpt_shape: [2, 3]").replace("flip_idx: [1, 0, 2]\n", "")
    yaml.write_text(text)  # the same 11 columns now read as 2 keypoints with visibility
    other = YoloDataset(str(yaml), Settings.evaluation(split="train", img_size=128))
    assert other.split_labels.built and other.keypoints[0].shape == (2, 2, 3)


# -- keypoints against their dots -----------------------------------------------------------------------------
def test_keypoints_sit_on_their_dots_after_letterbox(tmp_path):
    yaml = pose_dataset(tmp_path)
    loader, ds = create_dataloader(str(yaml), 128, 3, 32, augment=False, workers=0, settings=Settings(split="train"))
    checked = 0
    for imgs, targets, paths, shapes, extras in loader:
        assert extras["keypoints"].shape == (len(targets), 3, 3)
        checked += check_dots(imgs, targets, extras["keypoints"], flipped=False)
    assert checked == 6 * 2 * 3


@pytest.mark.parametrize("fliplr", [0.0, 1.0])
def test_keypoints_sit_on_their_dots_after_mosaic_rotation_and_flips(tmp_path, fliplr):
    loader, _ = training(pose_dataset(tmp_path), fliplr=fliplr)
    checked = 0
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for imgs, targets, paths, shapes, extras in loader:
            checked += check_dots(imgs, targets, extras["keypoints"], flipped=fliplr == 1.0)
    assert checked > 40


def test_without_flip_idx_pose_images_are_not_flipped_left_right(tmp_path, caplog):
    yaml = pose_dataset(tmp_path, flip_idx=None)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        loader, _ = training(yaml, fliplr=1.0)
    assert "no flip_idx for the keypoints" in caplog.text
    checked = sum(check_dots(imgs, targets, extras["keypoints"], flipped=False)
                  for imgs, targets, paths, shapes, extras in loader)
    assert checked > 20


def test_pose_batches_are_the_same_with_0_and_2_workers(tmp_path):
    yaml = pose_dataset(tmp_path)
    batches = []
    for workers in (0, 2):
        loader, _ = training(yaml, workers=workers, fliplr=0.5)
        batches.append([(imgs.clone(), targets.clone(), extras["keypoints"].clone())
                        for imgs, targets, paths, shapes, extras in loader])
    for a, b in zip(*batches):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


# -- oriented boxes against their rectangles ---------------------------------------------------------------------
def _obb_overlap(img: torch.Tensor, corners: np.ndarray, colour) -> float:
    """IoU of the rectangle ``corners`` (pixels) with the pixels of ``colour`` around it (within 4 px of
    its envelope: another object of that colour elsewhere does not count)."""
    h, w = img.shape[1:]
    want = np.zeros((h, w), np.uint8)
    cv2.fillPoly(want, [np.round(corners).astype(np.int32)], 1)
    b, g, r = colour
    rgb = img.permute(1, 2, 0).numpy().astype(int)
    have = (np.abs(rgb - (r, g, b)).max(-1) < 80).astype(np.uint8)
    (x1, y1), (x2, y2) = np.floor(corners.min(0) - 4).astype(int), np.ceil(corners.max(0) + 4).astype(int)
    window = np.zeros_like(want)
    window[max(y1, 0):max(y2, 0), max(x1, 0):max(x2, 0)] = 1
    have &= window
    return (want & have).sum() / max((want | have).sum(), 1)


def test_oriented_boxes_are_their_drawn_corners_after_letterbox(tmp_path):
    yaml = obb_dataset(tmp_path)
    settings = Settings(split="train", task="obb")
    loader, ds = create_dataloader(str(yaml), 160, 2, 32, augment=False, workers=0, settings=settings)
    for imgs, targets, paths, shapes, extras in loader:
        for row, corners in zip(targets, extras["corners"]):
            px = corners.numpy() * 160
            assert _obb_overlap(imgs[int(row[0])], px, COLOURS[int(row[1])]) > 0.75
            # the box is the corners' envelope
            x, y, w, h = row[2:].numpy() * 160
            np.testing.assert_allclose([x - w / 2, y - h / 2, x + w / 2, y + h / 2],
                                       [*px.min(0), *px.max(0)], atol=0.05)


def test_oriented_boxes_enclose_their_rectangles_after_mosaic_rotation_and_flips(tmp_path):
    loader, _ = training(obb_dataset(tmp_path), size=160, task="obb", degrees=45.0, fliplr=0.5, flipud=0.5)
    ious = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for imgs, targets, paths, shapes, extras in loader:
            for row, corners in zip(targets, extras["corners"]):
                px = corners.numpy() * 160
                x, y, w, h = row[2:].numpy() * 160
                if min(px.min(), 160 - px.max()) < 2 or w * h < 100:
                    continue  # cut by the image's edge: the visible part only
                ious.append(_obb_overlap(imgs[int(row[0])], px, COLOURS[int(row[1])]))
    assert len(ious) > 10 and np.median(ious) > 0.75 and min(ious) > 0.5, ious


@pytest.mark.skipif(not (SHARED / "pen-obb").is_dir(), reason="../shared/datasets is not beside the project")
def test_pen_obb_keeps_the_corners_ultralytics_keeps(tmp_path):
    import shutil
    root = tmp_path / "pen-obb"
    shutil.copytree(SHARED / "pen-obb", root)
    loader, ds = create_dataloader(str(root / "data.yaml"), 320, 4, 32, augment=False, workers=0,
                                   settings=Settings(task="obb"))
    # corners past the edge, up to 1.027, are kept as Ultralytics keeps them (their envelope's centre and
    # size lie within 1% of [0, 1]); so are they when the rows are read for their boxes
    assert len(ds) == 13 and not ds.split_labels.problems
    assert len(YoloDataset(str(root / "data.yaml"), Settings.evaluation(split="train", task="detect"))) == 102
    assert json.loads(json.dumps(ds.task.name)) == "obb" and len(next(iter(loader))) == 5


# -- COCO keypoints ------------------------------------------------------------------------------------------
def coco_pose(root: Path) -> Path:
    """The pose fixture's objects as a COCO JSON with keypoints (pixels, visibility 2; the first
    object's last keypoint marked 0, not labelled), beside a yaml with kpt_shape [3, 3]."""
    pose_dataset(root)
    images, anns = [], []
    for k, lb in enumerate(sorted((root / "labels" / "train").glob("*.txt"))):
        h, w = cv2.imread(str(root / "images" / "train" / f"{lb.stem}.png")).shape[:2]
        images.append({"id": k, "file_name": f"images/train/{lb.stem}.png", "width": w, "height": h})
        for j, row in enumerate(np.loadtxt(lb, ndmin=2)):
            x, y, bw, bh = row[1:5] * (w, h, w, h)
            kp = np.concatenate([row[5:].reshape(3, 2) * (w, h), np.full((3, 1), 2.0)], 1)
            if j == 0:
                kp[2] = 0  # COCO writes an unlabelled keypoint as 0 0 0
            anns.append({"id": len(anns) + 1, "image_id": k, "category_id": int(row[0]) + 1, "iscrowd": 0,
                         "bbox": [x - bw / 2, y - bh / 2, bw, bh], "keypoints": kp.reshape(-1).tolist()})
    cats = [{"id": c + 1, "name": n, "keypoints": ["left", "right", "nose"]} for c, n in enumerate("ab")]
    (root / "pose.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    import shutil
    shutil.rmtree(root / "labels")
    yaml = root / "coco.yaml"
    yaml.write_text(f"path: .\ntrain: pose.json\nval: pose.json\nkpt_shape: [3, 3]\nflip_idx: {FLIP_IDX}\n"
                    "names: ['a', 'b']\n")
    return yaml


def test_coco_keypoints_become_pose_labels_on_their_dots(tmp_path):
    yaml = coco_pose(tmp_path)
    loader, ds = create_dataloader(str(yaml), 128, 3, 32, augment=False, workers=0, settings=Settings(split="train"))
    assert ds.task.name == "pose" and len(ds) == 6 and ds.split_labels.kind == "coco"
    kp = ds.keypoints[0]
    assert kp.shape == (2, 3, 3) and kp[0, 2, 2] == 0 and (kp[1, :, 2] == 2).all()
    checked = sum(check_dots(imgs, targets, extras["keypoints"], flipped=False)
                  for imgs, targets, paths, shapes, extras in loader)
    assert checked == 6 * (2 * 3 - 1)
    loader, _ = training(yaml, fliplr=1.0)
    assert sum(check_dots(imgs, targets, extras["keypoints"], flipped=True)
               for imgs, targets, paths, shapes, extras in loader) > 20


def test_a_coco_annotation_without_its_keypoints_is_named_and_left_out(tmp_path):
    yaml = coco_pose(tmp_path)
    data = json.loads((tmp_path / "pose.json").read_text())
    data["annotations"][0]["keypoints"] = data["annotations"][0]["keypoints"][:6]
    del data["annotations"][1]["keypoints"]
    (tmp_path / "pose.json").write_text(json.dumps(data))
    ds = YoloDataset(str(yaml), Settings.evaluation(split="train"))
    reasons = [p.reason for p in ds.split_labels.problems]
    assert reasons[0].startswith("annotation 1: keypoints [") and reasons[0].endswith(
        "are not 3 keypoints x y visibility (9 numbers); left out")
    assert reasons[1] == "annotation 2: keypoints none are not 3 keypoints x y visibility (9 numbers); left out"
    assert len(ds.labels[0]) == 0 and len(ds.labels[1]) == 2


def test_a_format_without_keypoints_or_corners_refuses_those_tasks(tmp_path):
    coco = coco_pose(tmp_path)
    plain = tmp_path / "plain.yaml"  # the same annotations without kpt_shape (with it, obb is refused first)
    plain.write_text("path: .\ntrain: pose.json\nval: pose.json\nnames: ['a', 'b']\n")
    with pytest.raises(ValueError, match=r"coco annotations cannot be read for task 'obb' \(they hold what task "
                                         r"'detect' or 'segment' or 'pose' needs\)"):
        YoloDataset(str(plain), Settings.evaluation(split="train", task="obb"))
    with pytest.raises(ValueError, match=r"coco.yaml: task 'obb' reads the 4 corners of rotated boxes, but kpt_shape"):
        YoloDataset(str(coco), Settings.evaluation(split="train", task="obb"))
    boxes = YoloDataset(str(coco), Settings.evaluation(split="train", task="detect"))
    assert len(boxes.labels[0]) == 2 and len(boxes[0]) == 4


def test_target_settings_refuse_what_cannot_be_meant(tmp_path):
    for fields, message in ((dict(kpt_shape=[17, 4]), "kpt_shape must be"), (dict(mask_ratio=0), "mask_ratio must be"),
                            (dict(mask_ratio=2.5), "mask_ratio must be"), (dict(mask_rule="v8"), "mask_rule must be")):
        with pytest.raises(ValueError, match=message):
            Settings(**fields)
    assert Settings(kpt_shape=[17, 3], flip_idx=range(17)).targets.kpt_shape == (17, 3)


def test_a_negative_visibility_is_named(tmp_path):
    lb = tmp_path / "a.txt"
    lb.write_text("0 0.5 0.5 0.2 0.2 0.5 0.5 -1\n")
    with pytest.raises(Exception, match="line 1: negative keypoint visibility -1"):
        YoloReader(1, "pose", (1, 3)).read(str(lb), (10, 10))
