"""Ultralytics' CutMix and copy-paste rule (mosaic.cutmix, mosaic.paste_objects), their place in the
pipeline, and the one field (AugmentConfig.copy_paste_rule) that picks YOLOv5's or Ultralytics' rule.

Pixels are checked against the partner's pixels, boxes against an area rule computed here from the
rectangle the pixels show, and the share rule against round(p * k) on objects built so that k and the
order of their overlaps are known.  Through the Ultralytics plug-in's loader, batches with cutmix and
'mixup'-mode copy-paste are the same with 0 and 2 workers."""
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from yolo_data.augment import pipeline
from yolo_data.augment.augstate import SharedSettings, TrainSettings
from yolo_data.augment.hyp import AugmentConfig, load_hyp
from yolo_data.integrations.ultralytics_args import loader_settings
from yolo_data.integrations.ultralytics_loader import create_loader
from yolo_data.augment.mosaic import cutmix, paste_objects
from yolo_data.augment.sample import Points, Sample, box_polygons

ROOT = Path(__file__).resolve().parents[2]


def corners(boxes: np.ndarray) -> Points:
    """Per box its 4 corners and centre, visible (v = 2)."""
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    xy = np.stack([np.stack(p, 1) for p in ((x1, y1), (x2, y1), (x2, y2), (x1, y2), ((x1 + x2) / 2, (y1 + y2) / 2))], 1)
    return Points(np.concatenate([xy, np.full(xy.shape[:2] + (1,), 2.0)], -1).astype(np.float32), (1, 0, 3, 2, 4))


def ioa_of(rect, box) -> float:
    """The share of ``box``'s area inside ``rect`` (both xyxy)."""
    iw = max(0.0, min(rect[2], box[2]) - max(rect[0], box[0]))
    ih = max(0.0, min(rect[3], box[3]) - max(rect[1], box[1]))
    return iw * ih / ((box[2] - box[0]) * (box[3] - box[1]))


def changed_rect(before: np.ndarray, after: np.ndarray):
    """(x1, y1, x2, y2) envelope of the pixels that differ, or None."""
    ys, xs = np.nonzero((before != after).any(2))
    return None if not len(xs) else (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)


# ----------------------------------------------------------------------------- cutmix
def partner(h=96, w=128, n=24, seed=1, extras=False, polygons=False):
    """A noisy image (no pixel value below 20) with n random boxes."""
    rng = np.random.default_rng(seed)
    img = rng.integers(20, 256, (h, w, 3), dtype=np.uint8)
    xy = rng.uniform(0, [w - 12, h - 12], (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(4, 30, (n, 2))], 1).clip(0, [w, h, w, h]).astype(np.float32)
    return Sample(img, np.arange(n, dtype=np.float32) % 5 + 10, boxes, box_polygons(boxes) if polygons else [],
                  {"kp": corners(boxes)} if extras else {})


@pytest.mark.parametrize("with_polygons", [False, True])
def test_cutmix_rectangle_holds_the_partner_and_keeps_its_boxes_by_their_share_inside(with_polygons):
    """The pasted rectangle is read off the pixels; it must touch none of the sample's boxes, hold the
    partner's pixels exactly, and add the partner's boxes with >= 1% of their area inside (10% when
    the sample has no polygons), clipped to it, in the partner's order."""
    h, w = 96, 128
    boxes = np.array([[0, 0, 30, 20], [100, 70, 128, 96]], np.float32)
    a = Sample(np.full((h, w, 3), 10, np.uint8), np.array([0, 1], np.float32), boxes,
               box_polygons(boxes) if with_polygons else [])
    b = partner(polygons=True)
    thr = 0.01 if with_polygons else 0.1
    applied = skipped = 0
    sides = []
    for seed in range(200):
        out = cutmix(a, b, np.random.default_rng(seed))
        rect = changed_rect(a.img, out.img)
        if rect is None:
            assert out is a
            skipped += 1
            continue
        applied += 1
        x1, y1, x2, y2 = rect
        sides.append(((x2 - x1) / w, (y2 - y1) / h))
        np.testing.assert_array_equal(out.img[y1:y2, x1:x2], b.img[y1:y2, x1:x2])
        assert all(ioa_of(rect, bx) == 0 for bx in boxes)  # the rectangle touches no box of the sample
        keep = [j for j in range(len(b)) if ioa_of(rect, b.boxes[j]) >= thr]
        assert keep
        np.testing.assert_array_equal(out.cls, np.concatenate([a.cls, b.cls[keep]]))
        want = b.boxes[keep].copy()
        want[:, [0, 2]] = want[:, [0, 2]].clip(x1, x2)
        want[:, [1, 3]] = want[:, [1, 3]].clip(y1, y2)
        np.testing.assert_allclose(out.boxes, np.concatenate([boxes, want]))
        assert len(out.segments) == len(out)  # b has polygons: every object keeps one
        for s in out.segments[len(a):]:
            assert (s >= [x1, y1]).all() and (s <= [x2, y2]).all()
    assert applied > 40 and skipped > 10  # both branches ran
    sides = np.array(sides)
    assert sides.min() < 0.3 and sides.max() > 0.7  # side sqrt(1 - U(0, 1)): small and large rectangles


def test_cutmix_skips_when_every_rectangle_touches_a_box_and_refuses_other_shapes():
    b = partner()
    whole = Sample(np.zeros_like(b.img), np.zeros(1, np.float32), np.array([[0, 0, 128, 96]], np.float32))
    for seed in range(30):
        assert cutmix(whole, b, np.random.default_rng(seed)) is whole
    with pytest.raises(ValueError, match="one shape"):
        cutmix(whole, partner(h=64), np.random.default_rng(0))


def test_cutmix_carries_extras_clipped_to_the_rectangle():
    """Keypoints of the added objects: those outside the rectangle invisible, all clipped into it."""
    b = partner(extras=True)
    a = Sample(np.full_like(b.img, 10), np.zeros(0, np.float32), np.zeros((0, 4), np.float32), [],
               {"kp": corners(np.zeros((0, 4), np.float32))})
    checked = 0
    for seed in range(40):
        out = cutmix(a, b, np.random.default_rng(seed))
        rect = changed_rect(a.img, out.img)
        if rect is None:
            continue
        x1, y1, x2, y2 = rect
        kp = out.extras["kp"].xyv
        assert len(kp) == len(out) > 0
        assert (kp[..., 0] >= x1).all() and (kp[..., 0] <= x2).all() and (kp[..., 1] >= y1).all() and (kp[..., 1] <= y2).all()
        keep = [j for j in range(len(b)) if ioa_of(rect, b.boxes[j]) >= 0.1]
        src = b.extras["kp"].xyv[keep]
        outside = (src[..., 0] < x1) | (src[..., 0] > x2) | (src[..., 1] < y1) | (src[..., 1] > y2)
        np.testing.assert_array_equal(kp[..., 2], np.where(outside, 0, 2))
        checked += 1
    assert checked > 5


# ----------------------------------------------------------------------------- Ultralytics' copy-paste rule
W = 100
# mirrors (x -> 100 - x): A's covers 50% of D and D's 50% of A (never candidates); B's covers 20% of E
# and E's 20% of B; C's and F's cover nothing.  Candidates, least overlapping first: C, F, B, E.
OBJECTS = {"A": [10, 10, 20, 20], "B": [10, 40, 20, 50], "C": [10, 70, 20, 80], "D": [85, 10, 95, 20],
           "E": [88, 40, 98, 50], "F": [30, 70, 40, 80]}


def crafted(extras=False):
    boxes = np.array(list(OBJECTS.values()), np.float32)
    img = np.random.default_rng(0).integers(0, 256, (90, W, 3), dtype=np.uint8)
    return Sample(img, np.arange(len(boxes), dtype=np.float32), boxes, box_polygons(boxes),
                  {"kp": corners(boxes)} if extras else {})


@pytest.mark.parametrize("p, pasted", [(1.0, "CFBE"), (0.75, "CFB"), (0.5, "CF"), (0.3, "C"), (0.1, "")])
def test_fraction_rule_pastes_round_p_k_least_overlapping_mirrors(p, pasted):
    s = crafted(extras=True)
    names = list(OBJECTS)
    out = paste_objects(s, p)
    assert len(out) - len(s) == round(p * 4) == len(pasted)
    idx = [names.index(c) for c in pasted]
    np.testing.assert_array_equal(out.cls, np.concatenate([s.cls, s.cls[idx]]))
    mirrored = s.boxes[idx][:, [2, 1, 0, 3]] * [-1, 1, -1, 1] + [W, 0, W, 0]
    np.testing.assert_allclose(out.boxes[len(s):], mirrored)
    np.testing.assert_allclose(out.extras["kp"].xyv[len(s):], s.extras["kp"].mirrored(W).xyv[idx])
    # pixels: inside each pasted mirror (integer corners, filled) from the mirrored image, nowhere else
    expect = s.img.copy()
    flipped = s.img[:, ::-1]
    for x1, y1, x2, y2 in mirrored.astype(int):
        expect[y1:y2 + 1, x1:x2 + 1] = flipped[y1:y2 + 1, x1:x2 + 1]
    np.testing.assert_array_equal(out.img, expect)
    if not pasted:
        assert out is s


def test_fraction_rule_from_another_sample_pastes_its_objects_and_pixels():
    """'mixup' mode: the source's objects, its pixels inside their polygons; its overlaps with the
    sample's boxes decide which."""
    s = crafted()
    src_boxes = np.array([[50, 5, 60, 15], [10, 12, 20, 22], [60, 60, 70, 70]], np.float32)  # 2nd hides A
    src = Sample(np.full_like(s.img, 7), np.array([20, 21, 22], np.float32), src_boxes, box_polygons(src_boxes))
    out = paste_objects(s, 1.0, src)
    np.testing.assert_array_equal(out.cls, np.concatenate([s.cls, [20, 22]]))
    np.testing.assert_allclose(out.boxes[len(s):], src_boxes[[0, 2]])
    expect = s.img.copy()
    for x1, y1, x2, y2 in src_boxes[[0, 2]].astype(int):
        expect[y1:y2 + 1, x1:x2 + 1] = 7
    np.testing.assert_array_equal(out.img, expect)
    no_polygons = Sample(s.img, s.cls, s.boxes)
    assert paste_objects(no_polygons, 1.0, src) is no_polygons  # Ultralytics pastes only into images with polygons


def test_rule_field_picks_the_copy_paste_and_entry_points_pick_the_rule(monkeypatch):
    """In a mosaic, copy_paste_rule 'yolov5' calls YOLOv5's copy_paste (random draws), 'ultralytics'
    paste_objects; YOLOv5's hyps load as 'yolov5', the plug-in's arguments as 'ultralytics'."""
    calls = []
    monkeypatch.setattr(pipeline, "copy_paste", lambda s, p, rng: calls.append("yolov5") or s)
    monkeypatch.setattr(pipeline, "paste_objects", lambda s, p, src=None: calls.append("ultralytics") or s)
    parts = {i: Sample(np.full((32, 32, 3), 50 * i, np.uint8), np.zeros(1, np.float32),
                       np.array([[4, 4, 12, 12]], np.float32), box_polygons(np.array([[4, 4, 12, 12]], np.float32)))
             for i in range(4)}
    for rule in ("yolov5", "ultralytics"):
        cfg = AugmentConfig(copy_paste=0.5, copy_paste_rule=rule)
        pipeline.mosaic_sample(parts.__getitem__, [0, 1, 2, 3], 0, 32, cfg, np.random.default_rng(0))
        pipeline.single_image_geometry(parts[0], cfg, np.random.default_rng(0))
    assert calls == ["yolov5", "ultralytics", "ultralytics"]  # YOLOv5 pastes into mosaics only
    assert load_hyp(ROOT / "data" / "hyps" / "hyp.scratch-high.yaml").copy_paste_rule == "yolov5"
    assert loader_settings(SimpleNamespace(copy_paste=0.3), "train", 8, 32).fields()["hyp"].copy_paste_rule == "ultralytics"


def test_choice_fields_cross_shared_memory_and_close_mosaic_stops_cutmix():
    cfg = AugmentConfig(cutmix=0.4, copy_paste=0.2, copy_paste_mode="mixup", copy_paste_rule="ultralytics")
    assert AugmentConfig.from_numbers(cfg.as_numbers()) == cfg
    shared = SharedSettings(TrainSettings(cfg, 64, True))
    assert shared.get().cfg == cfg
    shared.set(cfg, True, closed=True)
    closed = shared.get().cfg
    assert (closed.cutmix, closed.copy_paste, closed.copy_paste_mode) == (0.0, 0.0, "mixup")
    assert load_hyp({"copy_paste_mode": "mixup", "cutmix": "0.5"}).copy_paste_mode == "mixup"
    with pytest.raises(ValueError, match="copy_paste_rule"):
        AugmentConfig(copy_paste_rule="v8")


# ----------------------------------------------------------------------------- through the plug-in's loader
@pytest.fixture
def sample_yaml(tmp_path):
    """The bundled sample (polygons in most label files)."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    return tmp_path / "data" / "sample.yaml"


def batches(yaml, workers, **cfg):
    s = loader_settings(SimpleNamespace(imgsz=96, seed=5, **cfg), "train", 4, 32, workers=workers)
    loader = create_loader(yaml, s, split="train")
    out = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        out += [(b["img"].clone(), b["cls"].clone(), b["bboxes"].clone()) for b in loader]
    loader.close()
    return out


def test_cutmix_and_mixup_mode_copy_paste_are_the_same_with_0_and_2_workers(sample_yaml):
    hyp = dict(cutmix=1.0, copy_paste=1.0, copy_paste_mode="mixup", mixup=0.3)
    runs = [batches(sample_yaml, w, **hyp) for w in (0, 2)]
    assert len(runs[0]) == len(runs[1]) == 8
    for x, y in zip(*runs):
        assert all(torch.equal(u, v) for u, v in zip(x, y))
    plain = batches(sample_yaml, 0, mixup=0.3)
    for one in (dict(cutmix=1.0), dict(copy_paste=1.0, copy_paste_mode="mixup")):  # each step on its own
        run = batches(sample_yaml, 0, mixup=0.3, **one)
        assert any(not torch.equal(x[0], y[0]) for x, y in zip(run, plain)), one
        assert sum(len(x[1]) for x in run) > sum(len(x[1]) for x in plain), one  # it added objects
