"""Batches of images with any number of channels: (B, C, H, W) tensors, bands in their stored order (RGB
planes only for 3-channel BGR images), HSV drawn but not applied, and buffers sized by C."""
import dataclasses

import numpy as np
import pytest
import torch

from yolo_data.augment.layout import Layout, placed
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.device.render import made
from yolo_data.geometry.shapes import letterbox_image, letterbox_plan
from yolo_data.loading.batchmemory import BatchPool
from yolo_data.loading.collate import collate_fn
from yolo_data.loading.tensors import BatchImages, write_letterboxed, write_rgb
from yolo_data.runtime.room import shm_bytes_for_batches


@pytest.mark.parametrize("bands", (1, 4, 10))
@pytest.mark.parametrize("flips", [(False, False), (True, False), (False, True), (True, True)])
def test_write_rgb_keeps_the_bands_in_order_flips_them_and_applies_no_hsv(bands, flips):
    img = np.random.default_rng(bands).integers(0, 256, (23, 31, bands), dtype=np.uint8)
    before = img.copy()
    out = np.zeros((bands, 23, 31), np.uint8)
    write_rgb(img, out, np.array([1.3, 0.6, 1.2]), *flips)
    expect = img[::-1 if flips[0] else 1, ::-1 if flips[1] else 1].transpose(2, 0, 1)
    assert np.array_equal(out, expect) and np.array_equal(img, before)


def test_write_rgb_of_three_channels_is_still_rgb_and_refuses_a_misfit():
    img = np.random.default_rng(0).integers(0, 256, (5, 6, 3), dtype=np.uint8)
    out = np.zeros((3, 5, 6), np.uint8)
    write_rgb(img, out)
    assert np.array_equal(out, img.transpose(2, 0, 1)[::-1])
    with pytest.raises(ValueError):
        write_rgb(img, np.zeros((10, 5, 6), np.uint8))


@pytest.mark.parametrize("bands", (1, 4, 10))
def test_write_letterboxed_of_bands(bands):
    img = np.random.default_rng(bands).integers(0, 256, (45, 70, bands), dtype=np.uint8)
    plan = letterbox_plan((45, 70), (64, 96), auto=False)
    out = np.zeros((bands,) + plan.shape, np.uint8)
    write_letterboxed(img, plan, out)
    assert np.array_equal(out, letterbox_image(img, plan).transpose(2, 0, 1))


@pytest.mark.parametrize("bands", (1, 10))
def test_batch_images_and_pool_buffers_take_the_channels(bands):
    images = BatchImages(3)
    slots = [images.write(k, (4, 5), lambda out, k=k: out.fill(k), bands) for k in range(3)]
    assert images.images.shape == (3, bands, 4, 5) and all(s.shape == (bands, 4, 5) for s in slots)
    assert images.write(0, (4, 5), lambda out: out.fill(9)).shape == (3, 4, 5)  # 3 channels: its own tensor
    assert BatchPool(2).take(2, 4, 5, bands).shape == (2, bands, 4, 5)
    assert shm_bytes_for_batches(2, 8, 640, 32, channels=bands) * 3 == shm_bytes_for_batches(2, 8, 640, 32) * bands


class Banded:
    """An ImageSource whose images have ``bands`` channels made from the BGR ones (band c: a mix of B, G
    and R that differs per band), or one band of those repeated 3 times (``only``)."""

    def __init__(self, images, bands, only=None):
        self.images, self.bands, self.only = images, bands, only

    def __call__(self, i):
        li = self.images(i)
        bgr = li.img.astype(np.uint16)
        img = np.stack([((bgr[..., 0] * (c + 1) + bgr[..., 1] * 3 + bgr[..., 2] * c) % 256).astype(np.uint8)
                        for c in range(self.bands)], -1)
        if self.only is not None:
            img = np.repeat(img[..., self.only:self.only + 1], 3, axis=2)
        return dataclasses.replace(li, img=img)

    def __getattr__(self, name):
        return getattr(self.images, name)


def banded_batch(root, tmp_path, bands, only=None, **kwargs):
    ds = LoadImagesAndLabels(str(root), 64, 4, split="train", cache_dir=tmp_path, seed=3, **kwargs)
    ds.mapper.images = Banded(ds.mapper.images, bands, only)
    return collate_fn(ds.__getitems__([0, 1, 2, 3]))


@pytest.mark.parametrize("bands", (1, 10))
@pytest.mark.parametrize("augment", [False, True])
def test_a_batch_of_banded_images_has_every_band(small_dataset, tmp_path, bands, augment):
    """Training (mosaic, mixup, perspective, flips) and evaluation batches of 1 and 10 bands: (B, C, H, W),
    band b what the same items give for band b as a 3-channel image, the same targets (HSV off, so the
    3-channel run keeps its grey pixels; HSV gains drawn or not change no other draw)."""
    hyp = dict(hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, mixup=0.5, flipud=0.5)
    kw = dict(augment=augment, hyp=hyp) if augment else dict(augment=False)
    imgs, targets, _, _ = banded_batch(small_dataset, tmp_path, bands, **kw)
    assert imgs.shape[:2] == (4, bands) and imgs.dtype == torch.uint8
    for b in range(bands):
        ref, ref_targets, _, _ = banded_batch(small_dataset, tmp_path, bands, only=b, **kw)
        assert torch.equal(imgs[:, b], ref[:, 0]), b
        assert torch.equal(targets, ref_targets)


def test_hsv_gains_are_drawn_for_every_channel_count(small_dataset, tmp_path):
    """With HSV on, 10 bands get the targets of 3 (the same draws after the gains: flips, mixup)."""
    hyp = dict(mixup=0.5, flipud=0.5)
    imgs10, targets10, _, _ = banded_batch(small_dataset, tmp_path, 10, augment=True, hyp=hyp)
    imgs3, targets3, _, _ = banded_batch(small_dataset, tmp_path, 3, augment=True, hyp=hyp)
    assert imgs10.shape[:2] == (4, 10) and imgs3.shape[:2] == (4, 3)
    assert torch.equal(targets10, targets3)


@pytest.mark.parametrize("bands", (1, 4, 10))
def test_device_layouts_make_every_band_as_alone(bands):
    """render.made: tiles resized onto a canvas, warped, blended and flipped, band by band."""
    rng = np.random.default_rng(bands)
    pixels = {i: torch.from_numpy(rng.uniform(-114, 141, (bands, 40 + i, 50)).round().astype(np.float32))
              for i in range(3)}

    def layout(i, channels):
        return Layout.image(i, (40 + i, 50), channels=channels)

    def made_of(channels):
        a = placed((80, 90), [(layout(0, channels), (0, 0, 50, 40), (0, 0, 70, 55)),
                              (layout(1, channels), (5, 3, 45, 41), (60, 40, 90, 80))])
        a = a.warped(np.array([[0.8, 0.1, 3.0], [0.05, 0.7, 2.0], [0.0, 0.0, 1.0]]), (48, 56))
        b = placed((48, 56), [(layout(2, channels), (0, 0, 50, 42), (3, 2, 53, 44))])
        return a.blended(b, 0.6)[::-1]
    lay = made_of(bands)
    assert lay.shape == (48, 56, bands)
    out = made([lay], pixels)
    assert out.shape == (1, bands, 48, 56)
    for b in range(bands):
        alone = made([made_of(1)], {i: p[b:b + 1] for i, p in pixels.items()})
        assert torch.equal(out[:, b], alone[:, 0])
