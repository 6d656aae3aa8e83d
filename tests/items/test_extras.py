"""Per-object extras (sample.PerObject) ride with their boxes from the first sample to the batch.

The extras here are K = 5 points per object: the box's corners (top-left, top-right, bottom-right,
bottom-left) and its centre, with a flip_idx that swaps left and right.  Without polygons a warped
box is the envelope of its warped corners, so wherever an object's four corner points stay visible
their envelope must be its box: any step that moves, drops, adds or reorders boxes without doing the
same to the extras breaks that."""

import numpy as np
import pytest
import torch

from yolo_data import Settings, YoloDataset
from yolo_data.loading.collate import QuadCollate, collate_fn
from yolo_data.augment.mosaic import copy_paste, mixup
from yolo_data.augment.perspective import flip_lr, flip_ud, warp_sample
from yolo_data.augment.sample import Points, Sample, join_extras
from yolo_data.sampling.sampler import SharedEpoch
from conftest import make_dataset

FLIP = (1, 0, 3, 2, 4)  # TL <-> TR, BR <-> BL, the centre stays


def corners(boxes: np.ndarray, v: float = 2.0) -> Points:
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    xy = np.stack([np.stack([x1, y1], 1), np.stack([x2, y1], 1), np.stack([x2, y2], 1), np.stack([x1, y2], 1),
                   np.stack([(x1 + x2) / 2, (y1 + y2) / 2], 1)], 1)
    return Points(np.concatenate([xy, np.full(xy.shape[:2] + (1,), v)], -1).astype(np.float32), FLIP)


def with_corners(s: Sample) -> Sample:
    return Sample(s.img, s.cls, s.boxes, s.segments, {"kp": corners(s.boxes)})


@pytest.fixture
def dataset(tmp_path):
    rows = "0 0.3 0.3 0.2 0.3\n1 0.7 0.6 0.3 0.2\n2 0.5 0.5 0.1 0.1\n"
    return make_dataset(tmp_path, [(f"im{k}.jpg", (96 + 8 * k, 64 + 4 * k), rows) for k in range(8)])


def pose_dataset(yaml_file, **hyp):
    """A training dataset whose samples carry the corner points (the mapper's two sources wrapped)."""
    full = {"mosaic": 1.0, "mixup": 0.0, "degrees": 0.0, "shear": 0.0, "translate": 0.1, "scale": 0.5,
            "flipud": 0.0, "fliplr": 0.5, "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, **hyp}
    ds = YoloDataset(str(yaml_file), Settings.training(img_size=64, batch_size=4, hyp=full, batch_partners=False))
    resized, letterboxed = ds.mapper.resized, ds.mapper.letterboxed
    ds.mapper.resized = lambda i: with_corners(resized(i))
    ds.mapper.letterboxed = lambda i: (lambda s, shapes: (with_corners(s), shapes))(*letterboxed(i))
    return ds


def visible_rows(targets, kp, size=64):
    """(boxes xyxy of rows whose four corners are visible, their points) in pixels."""
    full = (kp[:, :4, 2] > 0).all(1)
    xywh = targets[full, 2:].numpy() * size
    boxes = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], 1)
    return boxes, kp[full].numpy() * (size, size, 1)


@pytest.mark.parametrize("hyp", [dict(degrees=15.0, shear=5.0, mixup=0.5, flipud=0.5),  # mosaics, rotated
                                 dict(mosaic=0.0, degrees=15.0, flipud=0.5)])  # single images
def test_points_stay_on_their_boxes_through_the_training_pipeline(dataset, hyp):
    ds = pose_dataset(dataset, **hyp)
    checked = 0
    for epoch in range(3):
        ds.set_epoch(epoch)
        imgs, targets, paths, shapes, extras = collate_fn([ds[i] for i in range(len(ds))])
        kp = extras["kp"]
        assert kp.shape == (len(targets), 5, 3) and kp.dtype == torch.float32
        boxes, pts = visible_rows(targets, kp)
        envelope = np.concatenate([pts[:, :4, :2].min(1), pts[:, :4, :2].max(1)], 1)
        np.testing.assert_allclose(envelope, boxes, atol=0.2)  # targets are clipped 1e-3 inside the image
        checked += len(boxes)
    assert checked > 20


def test_a_left_right_flip_swaps_points_by_flip_idx(dataset):
    """Unrotated, with every image mirrored: point 0 is still each box's top-left corner only because
    flip_idx moved the mirrored top-right point into its place."""
    ds = pose_dataset(dataset, fliplr=1.0)
    _, targets, _, _, extras = collate_fn([ds[i] for i in range(len(ds))])
    boxes, pts = visible_rows(targets, extras["kp"])
    assert len(boxes) > 10
    np.testing.assert_allclose(pts[:, 0, :2], boxes[:, :2], atol=0.2)  # top-left
    np.testing.assert_allclose(pts[:, 2, :2], boxes[:, 2:], atol=0.2)  # bottom-right
    mirrored = flip_lr(with_corners(Sample(np.zeros((10, 20, 3), np.uint8), np.zeros(1, np.float32),
                                           np.array([[2, 1, 6, 4]], np.float32))))
    np.testing.assert_array_equal(mirrored.extras["kp"].xyv[0, :, :2], [[14, 1], [18, 1], [18, 4], [14, 4], [16, 2.5]])


def test_points_moved_outside_the_image_become_invisible_and_dropped_boxes_take_theirs():
    s = with_corners(Sample(np.zeros((40, 40, 3), np.uint8), np.array([0, 1], np.float32),
                            np.array([[2, 2, 12, 12], [10, 20, 20, 30]], np.float32)))
    shift = np.array([[1, 0, 25], [0, 1, 0], [0, 0, 1]], np.float64)  # right by 25: the second box is cut
    out = warp_sample(s, shift, (40, 40))
    kp = out.extras["kp"].xyv
    assert len(out) == 2 and kp.shape == (2, 5, 3)
    np.testing.assert_array_equal(kp[0, :, 2], [2, 2, 2, 2, 2])  # 27..37: inside
    np.testing.assert_array_equal(kp[1, :, 2], [2, 0, 0, 2, 2])  # x 45 is outside, 35 and 40 inside
    gone = warp_sample(s, np.array([[1, 0, 32], [0, 1, 0], [0, 0, 1]], np.float64), (40, 40))
    assert len(gone) == 1 and len(gone.extras["kp"]) == 1  # the second box leaves, with its points
    np.testing.assert_array_equal(gone.extras["kp"].xyv[0, 0, :2], [34, 2])
    ud = flip_ud(s)
    np.testing.assert_array_equal(ud.extras["kp"].xyv[0, :, 1], [38, 38, 28, 28, 33])


def test_copy_paste_and_mixup_carry_the_extras_of_the_objects_they_add():
    boxes = np.array([[2, 2, 12, 12], [4, 24, 14, 34]], np.float32)
    s = Sample(np.zeros((40, 40, 3), np.uint8), np.array([0, 1], np.float32), boxes,
               [np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], np.float32) for x1, y1, x2, y2 in boxes],
               {"kp": corners(boxes)})
    pasted = copy_paste(s, 1.0, np.random.default_rng(0))
    assert len(pasted) == 4 and len(pasted.extras["kp"]) == 4
    np.testing.assert_array_equal(pasted.extras["kp"].xyv[2:, 0, :2], pasted.boxes[2:, :2])  # mirrored, reordered
    both = mixup(s, pasted, np.random.default_rng(0))
    assert len(both.extras["kp"]) == 6
    with pytest.raises(ValueError, match="samples carry different extras"):
        Sample.concat([s, Sample(s.img, s.cls, s.boxes)], s.img)
    with pytest.raises(ValueError, match="samples carry different extras"):
        join_extras([{}, {"kp": corners(boxes)}])


def test_collate_joins_extras_in_the_targets_order_and_quad_refuses_them():
    def item(n, offset):
        return (torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(n, 6), "x.jpg", None,
                {"kp": torch.arange(n * 2, dtype=torch.float32).reshape(n, 2) + offset})
    imgs, targets, _, _, extras = collate_fn([item(2, 0), item(1, 100)])
    assert targets[:, 0].tolist() == [0, 0, 1] and extras["kp"].tolist() == [[0, 1], [2, 3], [100, 101]]
    with pytest.raises(ValueError, match="carry different per-object extras"):
        collate_fn([item(1, 0), (torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(1, 6), "y", None, {})])
    with pytest.raises(ValueError, match="quad=True .* carry per-object extras"):
        QuadCollate(0, SharedEpoch())([item(1, 0)] * 4)
