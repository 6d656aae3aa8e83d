"""Images of any number of channels through every pixel step of training and evaluation.

For C in 1, 4 and 10 (and 2, 5 where OpenCV's warps change their rounding), each step gives C bands,
band b being what the same step gives on the 3-channel image whose three channels are band b (the
3-channel path is the oracle), and the boxes, classes and polygons of the 3-channel run under the same
generator.  3 channels give the bytes they gave before images of other channels existed: the hashes
below were taken from that code on these inputs.
"""
import hashlib

import cv2
import numpy as np
import pytest
import torch

from yolo_data.augment.hyp import AugmentConfig
from yolo_data.augment.mosaic import copy_paste, cutmix, mixup, mosaic4, mosaic4_resized, mosaic9, paste_objects
from yolo_data.augment.perspective import band_groups, flip_lr, flip_ud, random_perspective, warp_image
from yolo_data.augment.photometric import augment_hsv
from yolo_data.augment.pipeline import mosaic_with_mixup
from yolo_data.augment.sample import Sample
from yolo_data.geometry.shapes import letterbox, letterbox_image, letterbox_plan
from yolo_data.loading.tensors import write_letterboxed, write_rgb

S = 64  # mosaic tile long side
CHANNELS = (1, 4, 10)
AFFINE = np.array([[1.1, 0.12, -9.0], [0.07, 0.9, 4.0], [0.0, 0.0, 1.0]])
PERSPECTIVE = np.array([[1.1, 0.12, -9.0], [0.07, 0.9, 4.0], [4e-4, -3e-4, 1.0]])


# ----------------------------------------------------------------------------- inputs
def geometry(n, seed, square=False):
    """n tiles' (h, w), classes, pixel xyxy boxes and octagon polygons inside them."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        short = S if square else int(rng.integers(S // 2, S + 1))
        h, w = (S, short) if rng.random() < 0.5 else (short, S)
        xy = rng.uniform(0, [w - 12, h - 12], (3, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(8, 12, (3, 2))], 1).astype(np.float32)
        t = np.linspace(0, 2 * np.pi, 8, endpoint=False)
        segments = [np.stack([(b[0] + b[2]) / 2 + (b[2] - b[0]) / 2 * np.cos(t),
                              (b[1] + b[3]) / 2 + (b[3] - b[1]) / 2 * np.sin(t)], 1).astype(np.float32) for b in boxes]
        out.append(((h, w), rng.integers(0, 5, 3).astype(np.float32), boxes, segments))
    return out


def pixels(geo, bands, seed):
    """Random (h, w, bands) uint8 images for the tiles of ``geo`` (noise: any rounding shows)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, hw + (bands,), dtype=np.uint8) for hw, *_ in geo]


def samples(geo, imgs, polygons=True):
    return [Sample(img, cls.copy(), boxes.copy(), [s.copy() for s in segs] if polygons else [])
            for img, (_, cls, boxes, segs) in zip(imgs, geo)]


def band(imgs, b):
    """Band b of each image as a 3-channel image (the oracle's input)."""
    return [np.repeat(img[..., b:b + 1], 3, axis=2) for img in imgs]


def assert_every_band(step, geo, bands, seed=7, polygons=True):
    """``step`` (list of Samples -> Sample) on C-band tiles: C bands, each equal to channel 0 of the step on
    that band as a 3-channel image, and the boxes of that run."""
    imgs = pixels(geo, bands, seed)
    out = step(samples(geo, imgs, polygons))
    assert out.img.shape[2] == bands and out.img.dtype == np.uint8
    for b in range(bands):
        ref = step(samples(geo, band(imgs, b), polygons))
        assert np.array_equal(out.img[..., b], ref.img[..., 0]), b
    assert np.array_equal(out.boxes, ref.boxes) and np.array_equal(out.cls, ref.cls)
    assert len(out.segments) == len(ref.segments)
    assert all(np.array_equal(a, c) for a, c in zip(out.segments, ref.segments))
    return out


# ----------------------------------------------------------------------------- every band, as alone
def test_band_groups_cover_every_band_once_in_runs_opencv_rounds_as_single_bands():
    for bands in range(1, 14):
        runs = band_groups(bands)
        assert [c for a, b in runs for c in range(a, b)] == list(range(bands))
        assert all(b - a in (1, 3, 4) for a, b in runs)


@pytest.mark.parametrize("bands", (1, 2, 4, 5, 10))
@pytest.mark.parametrize("M", [AFFINE, PERSPECTIVE], ids=["affine", "perspective"])
def test_warp_image_warps_each_band_as_alone_with_the_pad_value_in_every_band(bands, M):
    """OpenCV warps 2 and more than 4 channels with other rounding (one level here and there): each band
    must be what it is alone, whatever the image's other bands."""
    img = np.random.default_rng(bands).integers(0, 256, (57, 83, bands), dtype=np.uint8)
    out = warp_image(img, M, (70, 61))
    assert out.shape == (70, 61, bands)
    for b in range(bands):
        alone = cv2.warpAffine(img[..., b], M[:2], (61, 70), borderValue=114) if M[2, 0] == 0 else \
            cv2.warpPerspective(img[..., b], M, (61, 70), borderValue=114)
        assert np.array_equal(out[..., b], alone), b
    empty = warp_image(np.zeros((8, 8, bands), np.uint8), np.array([[1, 0, 100], [0, 1, 0], [0, 0, 1.0]]), (8, 8))
    assert (empty == 114).all()


@pytest.mark.parametrize("bands", CHANNELS)
def test_mosaic4_and_mosaic9(bands):
    assert_every_band(lambda parts: mosaic4(parts, S, (70, 50)), geometry(4, 1), bands)
    assert_every_band(lambda parts: mosaic9(parts, S, np.random.default_rng(2)), geometry(9, 2), bands)


@pytest.mark.parametrize("bands", CHANNELS)
def test_mosaic4_resized(bands):
    M = np.array([[0.55, 0.0, -13.0], [0.0, 0.45, -7.0], [0.0, 0.0, 1.0]])
    out = assert_every_band(lambda parts: mosaic4_resized(parts, S, (61, 70), M)[0], geometry(4, 3), bands)
    assert out.img.shape == (S, S, bands)


@pytest.mark.parametrize("bands", CHANNELS)
@pytest.mark.parametrize("perspective", [0.0, 5e-4])
def test_random_perspective_of_a_mosaic_and_of_one_image(bands, perspective):
    def step(parts, mosaic):
        sample = mosaic4(parts, S, (58, 66)) if mosaic else parts[0]
        return random_perspective(sample, np.random.default_rng(4), 10, 0.1, 0.5, 5, perspective,
                                  border=(-S // 2, -S // 2) if mosaic else (0, 0))
    assert_every_band(lambda parts: step(parts, True), geometry(4, 4), bands)
    assert_every_band(lambda parts: step(parts, False), geometry(1, 5), bands)


@pytest.mark.parametrize("bands", CHANNELS)
def test_mixup_copy_paste_and_cutmix(bands):
    geo = geometry(2, 6, square=True)
    assert_every_band(lambda p: mixup(p[0], p[1], np.random.default_rng(5)), geo, bands)
    assert_every_band(lambda p: copy_paste(p[0], 0.9, np.random.default_rng(6)), geo, bands)
    assert_every_band(lambda p: paste_objects(p[0], 0.9), geo, bands)
    assert_every_band(lambda p: paste_objects(p[0], 0.9, p[1]), geo, bands)
    assert_every_band(lambda p: cutmix(p[0], p[1], np.random.default_rng(8)), geo, bands)
    assert_every_band(lambda p: flip_ud(flip_lr(p[0])), geo, bands)


@pytest.mark.parametrize("bands", CHANNELS)
def test_letterbox_pads_every_band_with_114(bands):
    for shape, new_shape in [((45, 70), (64, 96)), ((64, 40), (64, 64)), ((33, 50), (32, 96))]:
        img = np.random.default_rng(bands).integers(0, 256, shape + (bands,), dtype=np.uint8)
        plan = letterbox_plan(shape, new_shape, auto=False)
        out = letterbox_image(img, plan)
        assert out.shape == plan.shape + (bands,)
        for b in range(bands):
            alone = letterbox_image(np.repeat(img[..., b:b + 1], 3, 2), plan)[..., 0]
            assert np.array_equal(out[..., b], alone)
        lb = letterbox(img, new_shape, auto=False)
        assert np.array_equal(lb.img, out) and lb.ratio == plan.ratio and lb.pad == plan.pad
    assert (letterbox_image(img, plan, color=(7,) * bands)[: plan.top] == 7).all()
    if bands != 3:
        with pytest.raises(ValueError):
            letterbox_image(img, plan, color=(1, 2, 3))


PIPELINE_HYPS = {
    "canvas": dict(mosaic=1.0, mixup=1.0, cutmix=1.0, copy_paste=0.5, degrees=5.0, shear=2.0),
    "resized": dict(mosaic=1.0, degrees=0.0, shear=0.0, perspective=0.0, scale=0.5),
    "mosaic9": dict(mosaic=1.0, mosaic9=1.0, mixup=1.0, degrees=5.0),
}


@pytest.mark.parametrize("bands", CHANNELS)
@pytest.mark.parametrize("hyp", PIPELINE_HYPS)
def test_the_mosaic_pipeline_keeps_every_band(bands, hyp):
    """Whole mosaics with their partners (mixup, cutmix, copy-paste): 4 bands stay 4 (a BGR mosaic's
    canvas is BGRA, and its alpha is dropped: a 4-band image must keep its fourth band)."""
    geo = geometry(6, 9)
    cfg = AugmentConfig(**PIPELINE_HYPS[hyp])

    def step(parts):
        return mosaic_with_mixup(lambda i: parts[i], range(len(parts)), 0, S, cfg, np.random.default_rng(10))
    out = assert_every_band(step, geo, bands)
    assert out.img.shape == (S, S, bands)


@pytest.mark.parametrize("bands", (1, 4, 10))
def test_hsv_is_drawn_but_applied_to_colour_images_only(bands):
    img = np.random.default_rng(0).integers(0, 256, (16, 16, bands), dtype=np.uint8)
    rng, same = np.random.default_rng(1), np.random.default_rng(1)
    assert augment_hsv(img, rng, channels=bands) is img
    augment_hsv(img[..., :3].copy() if bands >= 3 else np.repeat(img, 3, 2), same)
    assert rng.random() == same.random()  # the generator moved as for a colour image


# ----------------------------------------------------------------------------- 3 channels: as before
def three_channel_outputs():
    """name -> array (pixels, or a pipeline's boxes) made by the 3-channel paths from fixed inputs."""
    out = {}
    geo4, geo9, geo2 = geometry(4, 1), geometry(9, 2), geometry(2, 6, square=True)
    p4, p9, p2 = pixels(geo4, 3, 7), pixels(geo9, 3, 7), pixels(geo2, 3, 7)
    out["mosaic4"] = mosaic4(samples(geo4, p4), S, (70, 50)).img
    out["mosaic9"] = mosaic9(samples(geo9, p9), S, np.random.default_rng(2)).img
    M = np.array([[0.55, 0.0, -13.0], [0.0, 0.45, -7.0], [0.0, 0.0, 1.0]])
    out["mosaic4_resized"] = mosaic4_resized(samples(geo4, p4), S, (61, 70), M)[0].img
    for name, m in (("affine", AFFINE), ("perspective", PERSPECTIVE)):
        out[f"warp_{name}"] = warp_image(p4[0], m, (70, 61))
        out[f"warp_bgra_{name}"] = warp_image(out["mosaic4"], m, (70, 61))
    out["perspective"] = random_perspective(mosaic4(samples(geo4, p4), S, (58, 66)), np.random.default_rng(4), 10, 0.1,
                                            0.5, 5, 5e-4, border=(-S // 2, -S // 2)).img
    a, b = samples(geo2, p2)
    out["mixup"] = mixup(a, b, np.random.default_rng(5)).img
    out["copy_paste"] = copy_paste(a, 0.9, np.random.default_rng(6)).img
    out["paste_objects"] = paste_objects(a, 0.9, b).img
    out["cutmix"] = cutmix(a, b, np.random.default_rng(8)).img
    out["letterbox"] = letterbox_image(p4[1], letterbox_plan(p4[1].shape[:2], (96, 80), auto=False))
    for hyp in PIPELINE_HYPS:
        parts = samples(geometry(6, 9), pixels(geometry(6, 9), 3, 7))
        made = mosaic_with_mixup(lambda i: parts[i], range(6), 0, S, AugmentConfig(**PIPELINE_HYPS[hyp]),
                                 np.random.default_rng(10))
        out[f"pipeline_{hyp}"], out[f"pipeline_{hyp}_boxes"] = made.img, made.boxes
    planes = np.zeros((3, S, S), np.uint8)
    write_rgb(out["pipeline_canvas"], planes, np.array([1.2, 0.7, 1.1]), True, True)
    out["write_rgb"] = planes.copy()
    plan = letterbox_plan(p4[1].shape[:2], (96, 80), auto=False)
    planes = np.zeros((3,) + plan.shape, np.uint8)
    write_letterboxed(p4[1], plan, planes)
    out["write_letterboxed"] = planes
    return out


#: sha256 (first 16 hex digits) of each output, taken from the code before images of other than 3
#: channels were handled, with opencv-python 5.0.0 on x86-64 (other builds may round otherwise)
GOLDEN = {
    "mosaic4": "a9477f7f514a6f04",
    "mosaic9": "bc19409e6f259638",
    "mosaic4_resized": "b54bfccdca035224",
    "warp_affine": "993b8b09a6696203",
    "warp_bgra_affine": "263a8faf4e52fb93",
    "warp_perspective": "64c490ae81f318f9",
    "warp_bgra_perspective": "e71f0354c78b1253",
    "perspective": "65617438c1024ad8",
    "mixup": "c4464b43ef39378d",
    "copy_paste": "9c930d945d2ea054",
    "paste_objects": "d6abab25dacda721",
    "cutmix": "a0bcf024a77dd8ec",
    "letterbox": "851bbb8cc59604ee",
    "pipeline_canvas": "36edfd48ac0f48b1",
    "pipeline_canvas_boxes": "92421fd0d87f7993",
    "pipeline_resized": "a2b224976b5b4211",
    "pipeline_resized_boxes": "45f54c56e8cbdaed",
    "pipeline_mosaic9": "345802f057910414",
    "pipeline_mosaic9_boxes": "9871b6e66890c926",
    "write_rgb": "035c60196008e6a6",
    "write_letterboxed": "432aa169a485a3ce",
}


def test_three_channels_give_the_bytes_they_gave():
    if not cv2.__version__.startswith("5.0."):
        pytest.skip(f"hashes taken with OpenCV 5.0, not {cv2.__version__}")
    got = {k: hashlib.sha256(np.ascontiguousarray(v).tobytes() + str(v.shape).encode()).hexdigest()[:16]
           for k, v in three_channel_outputs().items()}
    assert got == GOLDEN
