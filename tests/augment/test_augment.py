"""Augmentation kernels: perspective (against an independent corner reference and against the pixels
themselves), flips, HSV, mosaic placement, mixup and copy-paste."""
import cv2
import numpy as np
import pytest

from yolo_data.geometry.boxes import resample_polygon, transform_points
from yolo_data.augment.mosaic import copy_paste, mixup, mosaic4, mosaic9, mosaic_border, mosaic_centre
from yolo_data.augment.perspective import (PerspectiveParams, box_candidates, draw_perspective, flip_lr, flip_ud,
                                   perspective_matrix, random_perspective, warp_boxes, warp_sample)
from yolo_data.augment.photometric import augment_hsv
from yolo_data.augment.sample import Sample, box_polygons

SCRATCH_LOW = dict(degrees=0.0, translate=0.1, scale=0.5, shear=0.0, perspective=0.0)
ROTATED = dict(degrees=10.0, translate=0.1, scale=0.5, shear=5.0, perspective=0.0)
# Eight colours with every channel 0 or 255: a bilinear blend of any of them with the background,
# the 114 padding or another colour only reproduces one of them where the blend weight rounds to 0/1,
# i.e. right on an edge.
COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [255, 0, 255], [0, 255, 255],
                    [255, 255, 255], [0, 0, 0]], np.uint8)
BACKGROUND = (40, 90, 160)


# ----------------------------------------------------------------------------- independent references
def reference_boxes(boxes, M, w, h, clip=True):
    """Corners through M with the perspective divide, their envelope, clipped to [0, w] x [0, h]:
    plain numpy, one box at a time, written independently of yolo_data."""
    if not clip:
        w = h = np.inf
    out = []
    for x1, y1, x2, y2 in np.asarray(boxes, np.float64):
        corners = np.array([[x1, y1, 1], [x2, y1, 1], [x2, y2, 1], [x1, y2, 1]]) @ M.T
        xy = corners[:, :2] / corners[:, 2:]
        env = [xy[:, 0].min(), xy[:, 1].min(), xy[:, 0].max(), xy[:, 1].max()]
        out.append(np.clip(env, 0, [w, h, w, h]) if clip else env)
    return np.array(out).reshape(-1, 4)


def reference_keep(before, after, scale, area_thr):
    keep = []
    for (a1, b1, a2, b2), (x1, y1, x2, y2) in zip(before, after):
        w0, h0, w, h = (a2 - a1) * scale, (b2 - b1) * scale, x2 - x1, y2 - y1
        keep.append(w > 2 and h > 2 and w * h / (w0 * h0) > area_thr and max(w / h, h / w) < 100)
    return np.array(keep, bool)


def random_boxes(rng, n, w, h, min_side=2.0):
    x1 = rng.uniform(0, w - min_side, n)
    y1 = rng.uniform(0, h - min_side, n)
    x2 = np.minimum(x1 + rng.uniform(min_side, w / 2, n), w)
    y2 = np.minimum(y1 + rng.uniform(min_side, h / 2, n), h)
    return np.stack([x1, y1, x2, y2], 1).astype(np.float32)


def assert_boxes_valid(sample):
    h, w = sample.img.shape[:2]
    b = sample.boxes
    assert b.dtype == np.float32 and sample.cls.dtype == np.float32 and b.shape == (len(sample.cls), 4)
    assert (b[:, [0, 2]] >= 0).all() and (b[:, [0, 2]] <= w).all()
    assert (b[:, [1, 3]] >= 0).all() and (b[:, [1, 3]] <= h).all()
    assert (b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all()
    assert not sample.segments or len(sample.segments) == len(b)


# ----------------------------------------------------------------------------- fixtures
def colour_part(h, w, first_colour, with_polygons=False):
    """A (h, w) image with two solid rectangles of colours first_colour and first_colour + 1."""
    img = np.empty((h, w, 3), np.uint8)
    img[:] = BACKGROUND
    rects = [(6, 8, 6 + int(0.4 * w), 8 + int(0.35 * h)), (int(0.5 * w), int(0.55 * h), w - 5, h - 7)]
    for k, (x1, y1, x2, y2) in enumerate(rects):
        img[y1:y2, x1:x2] = COLOURS[first_colour + k]
    boxes = np.array(rects, np.float32)
    segments = box_polygons(boxes) if with_polygons else []
    return Sample(img, np.array([first_colour, first_colour + 1], np.float32), boxes, segments)


def colour_parts(s, with_polygons=False):
    shapes = [(s, 3 * s // 4), (3 * s // 4, s), (s, s), (5 * s // 8, s)]
    return [colour_part(h, w, 2 * i, with_polygons) for i, (h, w) in enumerate(shapes)]


def coded_part(h, w, tag):
    """Every pixel says where it came from: (row, column, tag)."""
    yy, xx = np.mgrid[:h, :w]
    return np.stack([yy, xx, np.full_like(yy, tag)], -1).astype(np.uint8)


# ----------------------------------------------------------------------------- (i) warp vs reference
@pytest.mark.parametrize("perspective", [0.0, 5e-4])
def test_warped_boxes_match_corner_reference(perspective):
    for seed in range(60):
        rng = np.random.default_rng(seed)
        in_h, in_w = (int(v) for v in rng.integers(40, 160, 2))
        out_h, out_w = (int(v) for v in rng.integers(40, 160, 2))
        params = draw_perspective(rng, degrees=45, translate=0.2, scale=0.5, shear=10, perspective=perspective)
        M = perspective_matrix(params, (in_h, in_w), (out_h, out_w))
        assert M.shape == (3, 3) and M.dtype == np.float64
        boxes = random_boxes(rng, 12, in_w, in_h)
        ref = reference_boxes(boxes, M, out_w, out_h)
        # Without dropping anything: every box, exactly.
        new, segs = warp_boxes(boxes, [], M, (out_h, out_w))
        assert segs == [] and new.dtype == np.float32
        np.testing.assert_allclose(new, ref, atol=1e-3)
        # Through warp_sample: the kept boxes are the reference's survivors, with their own classes.
        sample = Sample(np.zeros((in_h, in_w, 3), np.uint8), np.arange(12, dtype=np.float32), boxes)
        out = warp_sample(sample, M, (out_h, out_w), scale=params.scale)
        assert out.img.shape == (out_h, out_w, 3)
        expect = reference_keep(boxes, ref, params.scale, 0.1)
        np.testing.assert_array_equal(out.cls, np.flatnonzero(expect))
        np.testing.assert_allclose(out.boxes, ref[expect], atol=1e-3)
        assert_boxes_valid(out)


@pytest.mark.parametrize("perspective", [0.0, 4e-4])
def test_image_moves_where_the_matrix_sends_points(perspective):
    """A small bright square lands where M sends its centre (OpenCV pixel-index coordinates)."""
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        img = np.zeros((120, 140, 3), np.uint8)
        cx, cy = (int(v) for v in rng.integers(40, 80, 2))
        img[cy - 2:cy + 3, cx - 2:cx + 3] = 255
        params = draw_perspective(rng, degrees=30, translate=0.1, scale=0.3, shear=5, perspective=perspective)
        M = perspective_matrix(params, (120, 140), (120, 140))
        empty = Sample(img, np.zeros(0, np.float32), np.zeros((0, 4), np.float32))
        warped = warp_sample(empty, M, (120, 140), border_value=0)
        weight = warped.img[..., 0].astype(np.float64)
        yy, xx = np.mgrid[:120, :140]
        got = np.array([(weight * xx).sum(), (weight * yy).sum()]) / weight.sum()
        p = M @ [cx, cy, 1.0]
        np.testing.assert_allclose(got, p[:2] / p[2], atol=0.5)


def test_identity_keeps_the_image_and_translation_moves_it():
    img = np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    sample = Sample(img, np.zeros(1, np.float32), np.array([[5, 5, 20, 25]], np.float32))
    same = warp_sample(sample, np.eye(3), (30, 40))
    assert same.img is img and np.array_equal(same.boxes, sample.boxes)
    M = np.array([[1.0, 0, 3], [0, 1, 2], [0, 0, 1]])
    moved = warp_sample(sample, M, (30, 40))
    assert np.array_equal(moved.img[2:, 3:], img[:-2, :-3]) and (moved.img[:2] == 114).all()
    np.testing.assert_allclose(moved.boxes, [[8, 7, 23, 27]])
    # The input sample was not touched.
    assert np.array_equal(sample.boxes, [[5, 5, 20, 25]]) and sample.img is img


# ----------------------------------------------------------------------------- (ii) polygons
def test_rectangle_polygons_give_the_corner_boxes():
    checked = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        params = draw_perspective(rng, degrees=[0, 30][seed % 2], translate=0.1, scale=0.5,
                                  shear=[0, 5][seed % 2], perspective=[0, 3e-4][seed % 4 == 3])
        M = perspective_matrix(params, (100, 120), (100, 120))
        boxes = random_boxes(rng, 10, 120, 100, min_side=4)
        by_corners, _ = warp_boxes(boxes, [], M, (100, 120))
        by_polygon, segs = warp_boxes(boxes, box_polygons(boxes), M, (100, 120))
        assert len(segs) == 10 and all(s.shape == (1000, 2) and s.dtype == np.float32 for s in segs)
        # polygons keep their whole warped outline (a mask is filled from it); boxes stay inside
        assert all(np.allclose(s, transform_points(resample_polygon(p, 1000), M), atol=1e-3)
                   for s, p in zip(segs, box_polygons(boxes)))
        assert (by_polygon[:, [0, 2]] <= 120).all() and (by_polygon[:, [1, 3]] <= 100).all() and (by_polygon >= 0).all()
        ref = reference_boxes(boxes, M, 120, 100)
        # A polygon cut by the border has a tighter box than its clipped corners (only the points of
        # its outline inside the image count), so compare where nothing is cut.
        unclipped = reference_boxes(boxes, M, 120, 100, clip=False)
        comparable = (unclipped[:, :2] >= 0).all(1) & (unclipped[:, 2] <= 120) & (unclipped[:, 3] <= 100)
        # Resampling to 1000 points along 5 vertex steps misses a corner by at most one step.
        side = np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) * params.scale * 1.5
        tol = (side * 4 / 999 + 1e-3)[:, None]
        assert (np.abs(by_polygon - by_corners)[comparable] <= tol[comparable]).all()
        assert (np.abs(by_polygon - ref)[comparable] <= tol[comparable]).all()
        checked += comparable.sum()
    assert checked > 150


def test_polygon_box_is_the_envelope_of_its_inside_part():
    # A diamond half outside the right edge: its box is cut at the edge, and its vertical extent is
    # that of the part still inside, not of the full diamond's corners.
    diamond = np.array([[50, 20], [70, 40], [50, 60], [30, 40]], np.float32)
    M = np.array([[1.0, 0, 20], [0, 1, 0], [0, 0, 1]])  # x + 20: the diamond spans 50..90 in a 70-wide image
    box, segs = warp_boxes(np.array([[30, 20, 70, 60]], np.float32), [diamond], M, (80, 70))
    np.testing.assert_allclose(box, [[50, 20, 70, 60]], atol=0.1)
    assert abs(segs[0][:, 0].max() - 90) < 0.1  # the outline is not cut (masks clip by filling; 1000 points miss the corner by < 1 step)


# ----------------------------------------------------------------------------- (iii) pixels vs boxes
def colour_extent(img, colour):
    mask = (img[..., :3] == colour).all(-1)  # a mosaic canvas carries a 4th (alpha) channel
    if not mask.any():
        return None, 0
    ys, xs = np.nonzero(mask)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float64), int(mask.sum())


@pytest.mark.parametrize("hyp,tol", [(SCRATCH_LOW, 2.0), (ROTATED, 2.5)])
@pytest.mark.parametrize("with_polygons", [False, True])
def test_boxes_follow_the_pixels_through_mosaic_and_perspective(hyp, tol, with_polygons):
    s = 128
    parts = colour_parts(s, with_polygons)
    orig_area = {int(c): (b[2] - b[0]) * (b[3] - b[1]) for p in parts for c, b in zip(p.cls, p.boxes)}
    survived = 0
    for seed in range(15):
        rng = np.random.default_rng(seed)
        mosaic = mosaic4(parts, s, mosaic_centre(rng, s))
        # The three explicit steps...
        border = mosaic_border(s)
        out_hw = (2 * s + 2 * border[0], 2 * s + 2 * border[1])
        params = draw_perspective(rng, **hyp)
        out = warp_sample(mosaic, perspective_matrix(params, (2 * s, 2 * s), out_hw), out_hw, scale=params.scale)
        # ...are what random_perspective does with the same generator state.
        rng2 = np.random.default_rng(seed)
        again = random_perspective(mosaic4(parts, s, mosaic_centre(rng2, s)), rng2, **hyp, border=border)
        assert np.array_equal(out.img, again.img) and np.array_equal(out.boxes, again.boxes)
        assert out.img.shape == (s, s, 4)  # BGRA until the photometric step
        assert_boxes_valid(out)
        for c, box in zip(out.cls.astype(int), out.boxes):
            extent, _ = colour_extent(out.img, COLOURS[c])
            assert extent is not None, f"seed {seed}: box of colour {c} kept but the colour is gone"
            # The colour's pixels are always inside the box...
            assert (box[:2] <= extent[:2] + 1).all() and (box[2:] >= extent[2:] - 1).all(), (seed, c, box, extent)
            # ...and the box is tight, except that without polygons a rotated box cut by the border
            # is the clipped envelope of all four corners, including the part outside (as YOLOv5).
            cut = box[0] == 0 or box[1] == 0 or box[2] == s or box[3] == s
            if with_polygons or hyp is SCRATCH_LOW or not cut:
                assert np.abs(box - extent).max() <= tol, (seed, c, box, extent)
            survived += 1
        # Conversely, a colour still largely visible must have kept its box.
        for c in range(8):
            extent, count = colour_extent(out.img, COLOURS[c])
            if extent is not None and min(extent[2:] - extent[:2]) >= 5 and \
                    count >= 0.3 * orig_area[c] * params.scale ** 2:
                assert c in out.cls, (seed, c)
    assert survived > 40


# ----------------------------------------------------------------------------- (iv, v) validity, dropping
def test_mosaic9_and_perspective_keep_boxes_inside():
    s = 96
    base = colour_parts(s, with_polygons=True)
    for seed in range(8):
        rng = np.random.default_rng(seed)
        parts = [base[i % 4] for i in rng.permutation(9)]
        mosaic = mosaic9(parts, s, rng)
        assert mosaic.img.shape == (2 * s, 2 * s, 4) and len(mosaic.segments) == len(mosaic)
        assert (mosaic.boxes >= 0).all() and (mosaic.boxes <= 2 * s).all()
        out = random_perspective(mosaic, rng, border=mosaic_border(s), **{**ROTATED, "perspective": 1e-4})
        assert out.img.shape == (s, s, 4)
        assert_boxes_valid(out)


@pytest.mark.parametrize("with_polygons", [False, True])
def test_degenerate_boxes_go_with_their_classes_and_segments(with_polygons):
    img = np.zeros((64, 64, 3), np.uint8)
    boxes = np.array([[10, 10, 11, 40],   # 1 px wide
                      [5, 5, 50, 50],
                      [20, 20, 60, 21],   # 1 px high
                      [0, 0, 30, 30],
                      [40, 40, 40, 40]],  # empty
                     np.float32)
    segments = box_polygons(boxes) if with_polygons else []
    sample = Sample(img, np.array([0, 1, 2, 3, 4], np.float32), boxes, segments)
    identity = dict(degrees=0, translate=0, scale=0, shear=0, perspective=0)
    out = random_perspective(sample, np.random.default_rng(0), **identity)
    assert out.img is img  # identity: nothing resampled
    np.testing.assert_array_equal(out.cls, [1, 3])
    assert len(out.boxes) == 2 and len(out.segments) == (2 if with_polygons else 0)
    np.testing.assert_allclose(out.boxes, boxes[[1, 3]], atol=0.2)
    for seg, box in zip(out.segments, out.boxes):
        np.testing.assert_allclose([seg[:, 0].min(), seg[:, 1].min(), seg[:, 0].max(), seg[:, 1].max()], box)
    # 45 px right: box 1 keeps 14 of its 45 px in x, box 3 19 of 30; both are cut at the edge.
    out = warp_sample(sample, np.array([[1.0, 0, 45], [0, 1, 0], [0, 0, 1]]), (64, 64))
    np.testing.assert_array_equal(out.cls, [1, 3])
    np.testing.assert_allclose(out.boxes, [[50, 5, 64, 50], [45, 0, 64, 30]], atol=0.2)
    # 55 px right: box 1 keeps 4 px (> 2), 4 * 45 / 45**2 = 8.9% of its area: below the 10% needed
    # for plain boxes, above the 1% for polygons.
    out = warp_sample(sample, np.array([[1.0, 0, 55], [0, 1, 0], [0, 0, 1]]), (64, 64))
    np.testing.assert_array_equal(out.cls, [1, 3] if with_polygons else [3])
    assert len(out.boxes) == len(out.cls) and len(out.segments) == (len(out.cls) if with_polygons else 0)


def test_box_candidates_rules():
    before = np.array([[10, 10]] * 5, np.float64)
    after = np.array([[0, 0, 10, 10],      # kept
                      [0, 0, 2, 10],       # width not > 2
                      [0, 0, 3.2, 3.2],    # area 10.24% of 100
                      [0, 0, 3.1, 3.1],    # area 9.6%
                      [0, 0, 300, 2.9]],   # aspect 103
                     np.float64)
    np.testing.assert_array_equal(box_candidates(before, after), [True, False, True, False, False])
    np.testing.assert_array_equal(box_candidates(before, after, area_thr=0.01), [True, False, True, True, False])


# ----------------------------------------------------------------------------- (vi) determinism
def pipeline(seed):
    rng = np.random.default_rng(seed)
    s = 64
    parts = colour_parts(s, with_polygons=True)
    sample = mosaic4(parts, s, mosaic_centre(rng, s))
    sample = copy_paste(sample, 0.5, rng)
    sample = random_perspective(sample, rng, border=mosaic_border(s), **{**ROTATED, "perspective": 1e-4})
    sample = Sample(augment_hsv(sample.img, rng, 0.015, 0.7, 0.4), sample.cls, sample.boxes, sample.segments)
    if rng.random() < 0.5:
        sample = flip_ud(sample)
    if rng.random() < 0.5:
        sample = flip_lr(sample)
    return sample


def test_same_seed_same_sample_other_seed_other_sample():
    a, b, c = pipeline(7), pipeline(7), pipeline(8)
    assert np.array_equal(a.img, b.img) and np.array_equal(a.boxes, b.boxes) and np.array_equal(a.cls, b.cls)
    assert len(a.segments) == len(b.segments) and all(np.array_equal(x, y) for x, y in zip(a.segments, b.segments))
    assert not np.array_equal(a.img, c.img)


def test_draws_follow_the_generator_only():
    p1 = draw_perspective(np.random.default_rng(3), 10, 0.1, 0.5, 5, 1e-3)
    np.random.seed(0)
    p2 = draw_perspective(np.random.default_rng(3), 10, 0.1, 0.5, 5, 1e-3)
    assert p1 == p2 and p1 != draw_perspective(np.random.default_rng(4), 10, 0.1, 0.5, 5, 1e-3)
    assert abs(p1.angle) <= 10 and 0.5 <= p1.scale <= 1.5 and abs(p1.perspective_x) <= 1e-3
    assert 0.4 <= p1.translate_x <= 0.6 and abs(p1.shear_y) <= 5
    assert draw_perspective(np.random.default_rng(0), 0, 0, 0, 0, 0) == PerspectiveParams()


def test_parameter_ranges_are_yolov5s():
    rng = np.random.default_rng(0)
    draws = [draw_perspective(rng, 10, 0.1, 0.5, 5, 1e-3) for _ in range(2000)]
    angle = np.array([d.angle for d in draws])
    scale = np.array([d.scale for d in draws])
    tx = np.array([d.translate_x for d in draws])
    assert angle.min() < -9.5 and angle.max() > 9.5 and abs(angle.mean()) < 0.5
    assert scale.min() < 0.52 and scale.max() > 1.48 and abs(scale.mean() - 1) < 0.03
    assert tx.min() < 0.41 and tx.max() > 0.59
    centres = np.array([mosaic_centre(rng, 64) for _ in range(2000)])
    assert centres.min() == 32 and centres.max() == 95 and centres.dtype.kind == "i"


# ----------------------------------------------------------------------------- (vii) HSV
def test_hsv_zero_gains_is_a_no_op_and_draws_nothing():
    img = np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8)
    before = img.copy()
    rng = np.random.default_rng(5)
    assert augment_hsv(img, rng, 0, 0, 0) is img
    assert np.array_equal(img, before)
    assert rng.random() == np.random.default_rng(5).random()


def test_hsv_hue_keeps_gray_gray_and_value_gain_scales_gray():
    gray = np.repeat(np.arange(0, 256, 1, dtype=np.uint8)[None, :, None], 3, axis=2).repeat(4, 0)
    colour = np.random.default_rng(1).integers(0, 255, (4, 256, 3), dtype=np.uint8)
    img = np.concatenate([gray, colour])
    before = img.copy()
    img = augment_hsv(img, np.random.default_rng(2), 0.5, 0, 0)
    assert np.array_equal(before, np.concatenate([gray, colour]))  # the input is not modified
    assert np.array_equal(img[:4], gray)  # no saturation: hue means nothing
    assert not np.array_equal(img[4:], colour)  # but colours did turn
    # Value only: gray v becomes trunc(clip(v * gain)), the gain being the generator's third draw.
    img = augment_hsv(before, np.random.default_rng(3), 0, 0, 0.4)
    gain = np.random.default_rng(3).uniform(-1, 1, 3)[2] * 0.4 + 1
    expect = np.clip(np.arange(256) * gain, 0, 255).astype(np.uint8)
    assert np.array_equal(img[:4, :, 0], np.broadcast_to(expect, (4, 256)))
    assert (img[:4, :, 0] == img[:4, :, 1]).all() and (img[:4, :, 1] == img[:4, :, 2]).all()


def test_hsv_same_result_for_a_strided_view_and_for_bgra():
    base = np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    view = base[:, ::-1]
    expect = augment_hsv(np.ascontiguousarray(view), np.random.default_rng(1), 0.1, 0.7, 0.4)
    assert np.array_equal(augment_hsv(view, np.random.default_rng(1), 0.1, 0.7, 0.4), expect)
    bgra = cv2.cvtColor(np.ascontiguousarray(view), cv2.COLOR_BGR2BGRA)
    assert np.array_equal(augment_hsv(bgra, np.random.default_rng(1), 0.1, 0.7, 0.4), expect)


# ----------------------------------------------------------------------------- (viii) flips
def test_flips_twice_give_the_original_and_move_pixels_with_boxes():
    sample = colour_part(60, 90, 0, with_polygons=True)
    for flip in (flip_lr, flip_ud):
        once, twice = flip(sample), flip(flip(sample))
        assert np.array_equal(twice.img, sample.img)
        np.testing.assert_allclose(twice.boxes, sample.boxes, atol=1e-4)
        for a, b in zip(twice.segments, sample.segments):
            np.testing.assert_allclose(a, b, atol=1e-4)
        for c, box in zip(once.cls.astype(int), once.boxes):
            extent, _ = colour_extent(once.img, COLOURS[c])
            np.testing.assert_array_equal(extent, box)  # integer boxes stay exact
        assert_boxes_valid(once)
    assert np.array_equal(flip_lr(sample).img[:, 0], sample.img[:, -1])
    assert np.array_equal(flip_ud(sample).img[0], sample.img[-1])
    np.testing.assert_array_equal(flip_lr(sample).boxes[0], [90 - 42, 8, 90 - 6, 29])


# ----------------------------------------------------------------------------- (ix) mixup
def test_mixup_ratio_is_beta_32_32_and_boxes_are_the_union():
    a = Sample(np.full((8, 8, 3), 200, np.uint8), np.array([0], np.float32), np.array([[0, 0, 4, 4]], np.float32))
    b = Sample(np.full((8, 8, 3), 100, np.uint8), np.array([1, 2], np.float32),
               np.array([[1, 1, 5, 5], [2, 2, 8, 8]], np.float32))
    ratios = []
    for seed in range(300):
        out = mixup(a, b, np.random.default_rng(seed))
        r = np.random.default_rng(seed).beta(32, 32)
        assert (out.img == np.uint8(200 * r + 100 * (1 - r))).all()
        ratios.append((int(out.img[0, 0, 0]) - 100) / 100)  # 100 + 100 r, truncated
        np.testing.assert_array_equal(out.cls, [0, 1, 2])
        np.testing.assert_array_equal(out.boxes, np.concatenate([a.boxes, b.boxes]))
    ratios = np.array(ratios)
    assert 0.2 < ratios.min() and ratios.max() < 0.8  # sd of Beta(32, 32) is 0.062
    assert abs(ratios.mean() + 0.005 - 0.5) < 0.02 and 0.04 < ratios.std() < 0.08
    assert a.img[0, 0, 0] == 200 and b.img[0, 0, 0] == 100
    with pytest.raises(ValueError):
        mixup(a, Sample(np.zeros((4, 8, 3), np.uint8), np.zeros(0, np.float32), np.zeros((0, 4), np.float32)),
              np.random.default_rng(0))


# ----------------------------------------------------------------------------- (x) copy-paste
@pytest.mark.parametrize("shape", ["rectangle", "triangle"])
def test_copy_paste_adds_the_mirror_with_mirrored_pixels(shape):
    h, w = 80, 100
    img = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    before = img.copy()
    if shape == "rectangle":
        poly = np.array([[10, 20], [30, 20], [30, 50], [10, 50]], np.float32)
        inside = lambda x, y: (x >= 11) & (x <= 29) & (y >= 21) & (y <= 49)  # noqa: E731 (margin 1 px)
        outside = lambda x, y: (x < 9) | (x > 31) | (y < 19) | (y > 51)  # noqa: E731
    else:
        poly = np.array([[10, 10], [40, 10], [10, 40]], np.float32)
        inside = lambda x, y: (x >= 11) & (y >= 11) & (x + y <= 48)  # noqa: E731
        outside = lambda x, y: (x < 9) | (y < 9) | (x + y > 52)  # noqa: E731
    box = np.array([[poly[:, 0].min(), poly[:, 1].min(), poly[:, 0].max(), poly[:, 1].max()]], np.float32)
    sample = Sample(img, np.array([3], np.float32), box, [poly])
    out = copy_paste(sample, 1.0, np.random.default_rng(0))
    assert np.array_equal(img, before) and len(sample) == 1  # input untouched
    np.testing.assert_array_equal(out.cls, [3, 3])
    np.testing.assert_allclose(out.boxes[1], [w - box[0, 2], box[0, 1], w - box[0, 0], box[0, 3]])
    np.testing.assert_allclose(out.segments[1], np.stack([w - poly[:, 0], poly[:, 1]], 1))
    yy, xx = np.mgrid[:h, :w]
    src_x = w - 1 - xx  # the pixel of the source that column xx mirrors
    pasted, untouched = inside(src_x, yy), outside(src_x, yy)
    assert pasted.sum() > 100
    assert np.array_equal(out.img[pasted], img[yy[pasted], src_x[pasted]])
    assert np.array_equal(out.img[untouched], img[untouched])


def test_copy_paste_skips_objects_whose_mirror_would_hide_others():
    img = np.zeros((40, 40, 3), np.uint8)
    boxes = np.array([[15, 5, 24, 15], [2, 25, 8, 35]], np.float32)  # first is symmetric about x = 20
    sample = Sample(img, np.array([0, 1], np.float32), boxes, box_polygons(boxes))
    out = copy_paste(sample, 1.0, np.random.default_rng(0))
    np.testing.assert_array_equal(out.cls, [0, 1, 1])
    np.testing.assert_allclose(out.boxes[2], [32, 25, 38, 35])
    assert copy_paste(sample, 0.0, np.random.default_rng(0)) is sample
    no_polygons = Sample(img, sample.cls, boxes)
    assert copy_paste(no_polygons, 1.0, np.random.default_rng(0)) is no_polygons


# ----------------------------------------------------------------------------- (xi) mosaic placement
@pytest.mark.parametrize("centre", [(50, 70), (100, 40), (64, 64), (33, 95)])
def test_mosaic4_tiles_land_around_the_centre(centre):
    s = 64
    shapes = [(64, 48), (40, 64), (64, 64), (50, 30)]
    parts = []
    for i, (h, w) in enumerate(shapes):
        boxes = np.array([[0, 0, w, h], [w / 4, h / 4, w / 2, h / 2]], np.float32)
        parts.append(Sample(coded_part(h, w, 50 * (i + 1)), np.array([i, i], np.float32), boxes))
    out = mosaic4(parts, s, centre)
    xc, yc = centre
    assert out.img.shape == (2 * s, 2 * s, 4) and out.img.dtype == np.uint8 and (out.img[..., 3] >= 114).all()
    # Each tile's top-left corner, written out per quadrant.
    (h0, w0), (h1, w1), (h2, w2), (h3, w3) = shapes
    origins = [(xc - w0, yc - h0), (xc, yc - h1), (xc - w2, yc), (xc, yc)]
    expect = np.full((2 * s, 2 * s, 3), 114, np.uint8)
    for y in range(2 * s):
        for x in range(2 * s):
            i = (0 if x < xc else 1) if y < yc else (2 if x < xc else 3)
            ox, oy = origins[i]
            h, w = shapes[i]
            if 0 <= x - ox < w and 0 <= y - oy < h:
                expect[y, x] = (y - oy, x - ox, 50 * (i + 1))
    assert np.array_equal(out.img[..., :3], expect)
    # The four pixels touching the centre are the inner corners of the four tiles.
    assert tuple(out.img[..., :3][yc - 1, xc - 1]) == (h0 - 1, w0 - 1, 50)
    assert tuple(out.img[..., :3][yc - 1, xc]) == (h1 - 1, 0, 100)
    assert tuple(out.img[..., :3][yc, xc - 1]) == (0, w2 - 1, 150)
    assert tuple(out.img[..., :3][yc, xc]) == (0, 0, 200)
    shifted = np.concatenate([p.boxes + [ox, oy, ox, oy] for p, (ox, oy) in zip(parts, origins)])
    np.testing.assert_array_equal(out.boxes, np.clip(shifted, 0, 2 * s).astype(np.float32))
    np.testing.assert_array_equal(out.cls, [0, 0, 1, 1, 2, 2, 3, 3])
    assert out.segments == []


def test_mosaic4_shifts_polygons_and_gives_plain_parts_rectangles():
    s = 32
    parts = [colour_part(32, 32, 0, with_polygons=bool(i % 2)) for i in range(4)]
    out = mosaic4(parts, s, (40, 20))
    assert len(out.segments) == 8
    for seg, box in zip(out.segments, out.boxes):
        np.testing.assert_allclose([seg[:, 0].min(), seg[:, 1].min(), seg[:, 0].max(), seg[:, 1].max()], box)
    np.testing.assert_allclose(out.segments[2], np.clip(parts[1].segments[0] + [40, 20 - 32], 0, 2 * s))


def test_mosaic9_layout_and_random_crop():
    s = 32
    parts = [Sample(coded_part(s, s, 20 * (i + 1)), np.array([i], np.float32),
                    np.array([[4, 4, 12, 20]], np.float32)) for i in range(9)]
    # Equal tiles fill the 3x3 grid: (column, row) of parts 0..8 clockwise from the centre's top.
    cells = [(1, 1), (1, 0), (2, 0), (2, 1), (2, 2), (1, 2), (0, 2), (0, 1), (0, 0)]
    for seed in range(5):
        out = mosaic9(parts, s, np.random.default_rng(seed))
        draw = np.random.default_rng(seed)
        yc, xc = int(draw.uniform(0, s)), int(draw.uniform(0, s))
        assert out.img.shape == (2 * s, 2 * s, 4)
        for i, (cx, cy) in enumerate(cells):
            ox, oy = cx * s - xc, cy * s - yc
            for y, x in [(0, 0), (5, 9), (s - 1, s - 1)]:
                if 0 <= oy + y < 2 * s and 0 <= ox + x < 2 * s:
                    assert tuple(out.img[oy + y, ox + x, :3]) == (y, x, 20 * (i + 1))
            expect = np.clip(np.array([4, 4, 12, 20]) + [ox, oy, ox, oy], 0, 2 * s)
            np.testing.assert_array_equal(out.boxes[i], expect)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("with_polygons", [False, True])
def test_resized_mosaic_keeps_boxes_on_their_pixels_and_near_the_canvas_warp(seed, with_polygons):
    from yolo_data.augment.mosaic import mosaic4_resized
    s = 128
    parts = colour_parts(s, with_polygons=with_polygons)
    rng = np.random.default_rng(seed)
    centre = mosaic_centre(rng, s)
    params = draw_perspective(rng, **SCRATCH_LOW)
    M = perspective_matrix(params, (2 * s, 2 * s), (s, s))
    slow = warp_sample(mosaic4(parts, s, centre), M, (s, s), scale=params.scale)
    on_canvas, blocks = mosaic4_resized(parts, s, centre, M)
    fast = warp_sample(on_canvas, M, (s, s), scale=params.scale, warped_img=on_canvas.img, row_blocks=blocks)
    assert fast.img.shape == (s, s, 3) and [n for n, _ in blocks] == [len(p) for p in parts]
    assert_boxes_valid(fast)
    # Each tile moves by its own matrix, within half a source pixel (<= 0.75 output px) of M's.
    assert np.array_equal(fast.cls, slow.cls)
    assert np.abs(fast.boxes - slow.boxes).max() <= 0.76, (seed, fast.boxes - slow.boxes)
    assert len(fast.segments) == len(slow.segments)
    # The pixels follow the tile's matrix, so every kept box is tight on its colour: within 1.25 px
    # of where the colour is unblended (over 80 draws: at most 1.20 here, 1.38 for the canvas warp).
    for c, box in zip(fast.cls.astype(int), fast.boxes):
        extent, _ = colour_extent(fast.img, COLOURS[c])
        assert extent is not None and np.abs(box - extent).max() <= 1.25, (seed, c, box, extent)


def test_resized_mosaic_tiles_share_their_seams_and_stay_near_the_matrix():
    from yolo_data.augment.mosaic import _span
    rng = np.random.default_rng(0)
    for _ in range(3000):
        a, b = rng.uniform(0.25, 1.5), rng.uniform(-300, 300)
        lo, mid, hi = np.sort(rng.choice(1280, 3, replace=False))
        left, right = _span(a, b, lo, mid, 640), _span(a, b, mid, hi, 640)
        if left and right:  # no gray line and no overlap between neighbours
            assert left[1] == right[0], (a, b, lo, mid, hi)
        for span, (x1, x2) in ((left, (lo, mid)), (right, (mid, hi))):
            if span is None:
                assert min(max(a * x2 + b, 0), 640) - min(max(a * x1 + b, 0), 640) < 1
                continue
            o1, o2, X1, X2, k, t = span
            assert 0 <= o1 < o2 <= 640 and x1 <= X1 < X2 <= x2
            assert abs(k * X1 + t - o1) < 1e-9 and abs(k * X2 + t - o2) < 1e-9  # resize: edges to edges
            # within half a source pixel (or half an output pixel at a clipped edge) of the matrix
            for X in (X1, X2):
                assert abs(k * X + t - (a * X + b)) <= max(0.5 * a, 0.5) + 1e-9, (a, b, lo, mid, hi, span)


def test_resized_mosaic_refuses_rotation():
    from yolo_data.augment.mosaic import mosaic4_resized
    parts = colour_parts(32)
    params = draw_perspective(np.random.default_rng(0), **ROTATED)
    with pytest.raises(ValueError, match="scale and translation only"):
        mosaic4_resized(parts, 32, (32, 32), perspective_matrix(params, (64, 64), (32, 32)))


def test_row_blocks_move_each_block_by_its_own_matrix():
    """warp_sample's shortcut for scaled-and-shifted blocks of plain boxes gives what pushing each
    block's corners through its matrix gives."""
    rng = np.random.default_rng(4)
    for trial in range(20):
        counts = [int(c) for c in rng.integers(0, 5, 4)]
        boxes = random_boxes(rng, sum(counts), 256, 256)
        mats = []
        for _ in counts:
            m = np.eye(3)
            m[0, 0], m[1, 1] = rng.uniform(0.3, 1.6, 2)
            m[:2, 2] = rng.uniform(-150, 100, 2)
            mats.append(m)
        sample = Sample(np.zeros((128, 128, 3), np.uint8), np.arange(len(boxes), dtype=np.float32), boxes)
        out = warp_sample(sample, mats[0], (128, 128), scale=1.0, warped_img=sample.img,
                          row_blocks=list(zip(counts, mats)))
        starts = np.cumsum([0] + counts)
        expect = np.concatenate([warp_boxes(boxes[a:b], [], m, (128, 128))[0]
                                 for a, b, m in zip(starts[:-1], starts[1:], mats)])
        keep = box_candidates(np.stack([boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], 1), expect)
        assert np.array_equal(out.boxes, expect[keep]) and np.array_equal(out.cls, np.flatnonzero(keep)), trial


def test_hsv_saturation_and_value_scaling_equals_its_lookup_table_on_both_paths():
    """photometric._scale_plane takes cv2.convertScaleAbs where that reproduces the truncating table
    exactly on all 256 levels, else the lookup: either way the plane is table[plane].  Gains from
    YOLOv5's ranges and beyond (negative gains clip to 0, which convertScaleAbs cannot do)."""
    from yolo_data.augment.photometric import _ALL_LEVELS, _scale_plane, hsv_tables
    levels = np.tile(np.arange(256, dtype=np.uint8), (3, 2))
    gains = np.concatenate([np.random.default_rng(0).uniform(-0.5, 2.0, 400), [1.0, 0.0, 255.0 / 254]])
    fast = 0
    for g in gains:
        table = hsv_tables(np.array([1.0, g, g]))[2]
        plane = levels.copy()
        _scale_plane(plane, table, g)
        assert np.array_equal(plane, table[levels]), g
        fast += np.array_equal(cv2.convertScaleAbs(_ALL_LEVELS, alpha=g, beta=-0.5 + 2.0 ** -16)[0], table)
    assert 300 < fast < len(gains)  # both paths ran
