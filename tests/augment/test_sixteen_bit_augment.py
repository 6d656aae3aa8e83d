"""16-bit images (Settings.images.keep16) through every pixel step of training: mosaics 4 and 9, the
resized mosaic, random perspective, flips, mixup, copy-paste and CutMix keep uint16 and every bit, and
pad with YOLOv5's grey at full scale (114 * 257 = 29298).

Steps that only move pixels are checked byte by byte: since 29298 is 114 in both of its bytes (and a
BGRA canvas's alpha 65535 is 255 in both), such a step's high and low bytes are what the same step
makes of the high and low bytes as 8-bit images.  Steps that interpolate are checked against OpenCV's
own uint16 warp, or within a level of the 8-bit step.
"""
import cv2
import numpy as np
import pytest

from yolo_data.augment.hyp import AugmentConfig
from yolo_data.augment.mosaic import copy_paste, cutmix, mixup, mosaic4, mosaic4_resized, mosaic9, paste_objects
from yolo_data.augment.perspective import flip_lr, flip_ud, warp_image, warp_sample
from yolo_data.augment.pipeline import mosaic_with_mixup
from yolo_data.augment.sample import Sample
from yolo_data.geometry.shapes import letterbox_image, letterbox_plan

S = 48
AFFINE = np.array([[1.1, 0.12, -9.0], [0.07, 0.9, 4.0], [0.0, 0.0, 1.0]])
PERSPECTIVE = np.array([[1.1, 0.12, -9.0], [0.07, 0.9, 4.0], [4e-4, -3e-4, 1.0]])


def tiles(n, bands, seed=0):
    """n Samples of random uint16 pixels (every bit used), sizes up to S, three boxes with polygons."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h, w = int(rng.integers(S // 2, S + 1)), int(rng.integers(S // 2, S + 1))
        xy = rng.uniform(0, [w - 12, h - 12], (3, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(8, 12, (3, 2))], 1).astype(np.float32)
        segments = [np.array([[b[0], b[1]], [b[2], b[1]], [b[2], b[3]], [b[0], b[3]]], np.float32) for b in boxes]
        img = rng.integers(0, 65536, (h, w, bands), dtype=np.uint16)
        out.append(Sample(img, rng.integers(0, 5, 3).astype(np.float32), boxes, segments))
    return out


def part(samples, f):
    """The samples with their images mapped by ``f`` (their high or low bytes as uint8)."""
    return [Sample(f(s.img), s.cls.copy(), s.boxes.copy(), [g.copy() for g in s.segments]) for s in samples]


def high(img):
    return (img >> 8).astype(np.uint8)


def low(img):
    return (img & 255).astype(np.uint8)


def assert_bytewise(step, parts):
    """``step`` on uint16 samples: uint16, and its high and low bytes the step's 8-bit results."""
    out = step(parts)
    assert out.img.dtype == np.uint16
    hi, lo = step(part(parts, high)), step(part(parts, low))
    assert np.array_equal(high(out.img), hi.img) and np.array_equal(low(out.img), lo.img)
    assert np.array_equal(out.boxes, hi.boxes) and np.array_equal(out.cls, hi.cls)
    return out


@pytest.mark.parametrize("bands", (1, 3, 4, 10))
def test_mosaics_move_16_bit_pixels_whole(bands):
    out = assert_bytewise(lambda p: mosaic4(p, S, (50, 40)), tiles(4, bands, bands))
    assert out.img.shape[2] == (4 if bands == 3 else bands)  # the BGRA canvas of BGR tiles
    assert (out.img[0, 0, :bands] == 29298).all() or (out.img[-1, -1, :bands] == 29298).all()
    assert_bytewise(lambda p: mosaic9(p, S, np.random.default_rng(2)), tiles(9, bands, bands))


@pytest.mark.parametrize("bands", (1, 4, 10))
def test_copy_paste_cutmix_and_flips_keep_16_bits(bands):
    assert_bytewise(lambda p: copy_paste(p[0], 1.0, np.random.default_rng(1)), tiles(1, bands))
    assert_bytewise(lambda p: paste_objects(p[0], 1.0), tiles(1, bands))
    same = [Sample(t.img[:S // 2, :S // 2], t.cls, t.boxes.clip(0, S // 2), []) for t in tiles(2, bands, 5)]
    assert_bytewise(lambda p: cutmix(p[0], p[1], np.random.default_rng(3), areas=8), same)
    assert_bytewise(lambda p: flip_ud(flip_lr(p[0])), tiles(1, bands))


@pytest.mark.parametrize("bands", (1, 3, 4, 10))
@pytest.mark.parametrize("M", [AFFINE, PERSPECTIVE], ids=["affine", "perspective"])
def test_a_16_bit_warp_is_opencvs_with_the_grey_at_full_scale(bands, M):
    img = tiles(1, bands)[0].img
    out = warp_image(img, M, (40, 44))
    assert out.dtype == np.uint16 and out.shape == (40, 44, bands)
    warp = cv2.warpAffine if M is AFFINE else cv2.warpPerspective
    for b in range(bands):  # OpenCV's warps move each band of up to 4 as it moves a band alone
        ref = warp(np.ascontiguousarray(img[..., b]), M[:2] if M is AFFINE else M, dsize=(44, 40),
                   borderValue=(29298,))
        assert np.array_equal(out[..., b], ref), b
    assert (out == 29298).any() and (out & 255).any()


def test_a_16_bit_sample_warped_off_its_canvas_is_padded_with_29298():
    sample = tiles(1, 3)[0]
    shift = np.array([[1.0, 0.0, 30.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    out = warp_sample(sample, shift, sample.img.shape[:2])
    assert out.img.dtype == np.uint16 and (out.img[:, :30] == 29298).all()
    assert np.array_equal(out.img[:, 30:], sample.img[:, :-30])


@pytest.mark.parametrize("bands", (1, 4))
def test_the_resized_mosaic_of_16_bits_is_within_a_level_of_the_8_bit_one(bands):
    M = np.array([[0.55, 0.0, -13.0], [0.0, 0.45, -7.0], [0.0, 0.0, 1.0]])
    parts = tiles(4, bands, 9)
    out = mosaic4_resized(parts, S, (51, 44), M)[0].img
    ref = mosaic4_resized(part(parts, high), S, (51, 44), M)[0].img
    assert out.dtype == np.uint16 and out.shape == (S, S, bands)
    assert np.abs(out / 257.0 - ref).max() <= 1.5
    assert len(np.unique(out & 255)) > 200  # the low bytes are there


def test_mixup_of_16_bits_truncates_as_the_8_bit_blend_does():
    a, b = (Sample(t.img[:S // 2, :S // 2], t.cls, t.boxes, []) for t in tiles(2, 4, 11))
    r = np.random.default_rng(4).beta(32.0, 32.0)
    out = mixup(a, b, np.random.default_rng(4))
    assert out.img.dtype == np.uint16 and len(out) == len(a) + len(b)
    assert np.array_equal(out.img, (a.img * r + b.img * (1 - r)).astype(np.uint16))


@pytest.mark.parametrize("bands", (1, 3, 10))
def test_a_letterbox_of_16_bits_pads_with_the_grey_given(bands):
    img = tiles(1, bands)[0].img
    plan = letterbox_plan(img.shape[:2], (64, 64), auto=False, scaleup=False)
    out = letterbox_image(img, plan, (29298,) * 3)
    assert out.dtype == np.uint16 and (out[:plan.top] == 29298).all() and (out[:, :plan.left] == 29298).all()


@pytest.mark.parametrize("bands", (1, 3, 10))
def test_the_training_pipeline_keeps_16_bits_and_the_bands(bands):
    cfg = AugmentConfig(mixup=1.0, degrees=10.0, shear=2.0, copy_paste=0.5)
    loaded = tiles(6, bands, 21)
    out = mosaic_with_mixup(lambda i: loaded[i], range(6), 0, S, cfg, np.random.default_rng(0))
    again = mosaic_with_mixup(lambda i: loaded[i], range(6), 0, S, cfg, np.random.default_rng(0))
    assert out.img.dtype == np.uint16 and out.img.shape == (S, S, bands)
    assert np.array_equal(out.img, again.img) and (out.img & 255).any()
