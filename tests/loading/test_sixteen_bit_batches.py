"""Batches of 16-bit images (Settings.images.keep16): the batch tensor, its pooled shared buffers and
their hand-over to the training process keep uint16; padding is YOLOv5's grey at full scale; HSV is not
applied; /dev/shm is sized at 2 bytes a sample; quad batches stay uint16."""
import gc
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from torch.multiprocessing.reductions import shared_cache

import yolo_data.loading.batchmemory as bm
from yolo_data.geometry.shapes import PAD_VALUE, letterbox_plan, pad_value
from yolo_data.loading.collate import QuadCollate
from yolo_data.loading.tensors import BatchImages, Scratch, write_letterboxed, write_rgb
from yolo_data.runtime.room import shm_bytes_for_batches
from yolo_data.sampling.runstate import SharedEpoch


def _sent(images):
    """``images`` as the training process receives it (see test_batch_memory._sent)."""
    before = dict(shared_cache)
    data = ForkingPickler.dumps(images)
    for key in [k for k, v in shared_cache.items() if before.get(k) is not v]:
        del shared_cache[key]
    return pickle.loads(data)


def _u16(shape, seed=0):
    """uint16 values whose low byte is used (a path through 8 bits would lose it)."""
    return np.random.default_rng(seed).integers(0, 65536, shape, dtype=np.uint16)


def test_the_pad_grey_is_114_at_full_scale():
    assert pad_value(np.uint8) == PAD_VALUE == 114 and pad_value(np.uint16) == 29298 == 114 * 257
    assert pad_value(np.uint16) >> 8 == 114


@pytest.mark.parametrize("bands", (1, 3, 4, 10))
def test_a_slot_of_16_bits_is_a_uint16_tensor_with_every_bit(bands):
    img = _u16((9, 11, bands), bands)
    images = BatchImages(2)
    slot = images.write(1, (9, 11), lambda out: write_rgb(img, out, np.array([1.3, 0.6, 1.2]), True, True),
                        bands, img.dtype)
    assert images.images.dtype == torch.uint16 and slot.dtype == torch.uint16
    expect = img[::-1, ::-1].transpose(2, 0, 1)  # flipped, no HSV (an 8-bit table)
    expect = expect[::-1] if bands == 3 else expect  # BGR -> RGB planes
    assert np.array_equal(slot.numpy(), expect)


def test_a_16_bit_colour_image_gets_no_hsv_and_keeps_its_low_bytes():
    img = _u16((7, 8, 4))  # a BGRA mosaic canvas
    out = np.zeros((3, 7, 8), np.uint16)
    write_rgb(img, out, np.array([1.5, 0.5, 1.5]), scratch=Scratch())
    assert np.array_equal(out, img[..., 2::-1].transpose(2, 0, 1))


@pytest.mark.parametrize("bands", (1, 3, 10))
def test_letterboxed_16_bit_planes_are_padded_with_29298(bands):
    img = _u16((45, 70, bands), bands)
    plan = letterbox_plan((45, 70), (64, 96), auto=False, scaleup=False)
    out = np.zeros((bands,) + plan.shape, np.uint16)
    write_letterboxed(img, plan, out)
    inside = out[:, plan.top:plan.top + 45, plan.left:plan.left + 70]
    assert np.array_equal(inside, (img[..., ::-1] if bands == 3 else img).transpose(2, 0, 1))
    assert (out[:, :plan.top] == 29298).all() and (out[:, :, :plan.left] == 29298).all()


def test_pooled_16_bit_buffers_reach_the_training_process_as_uint16():
    pool = bm.BatchPool(2)
    images = pool.take(2, 4, 5, 3, torch.uint16)
    assert images.dtype == torch.uint16 and images.shape == (2, 3, 4, 5)
    assert pool.buffers[0].capacity == 2 * 3 * 4 * 5 * 2  # two bytes a sample
    images.copy_(torch.from_numpy(_u16((2, 3, 4, 5))))
    received = _sent(pool.transport(images))
    assert received.dtype == torch.uint16 and torch.equal(received, images)
    del received
    gc.collect()
    assert [int(b.state[0]) for b in pool.buffers] == [bm.FREE]
    again = pool.take(2, 4, 5, 3)  # an 8-bit batch reuses the same buffer
    assert again.dtype == torch.uint8 and again.untyped_storage().data_ptr() == images.untyped_storage().data_ptr()


def test_shared_memory_for_16_bit_batches_counts_two_bytes_a_sample():
    assert shm_bytes_for_batches(2, 8, 640, 32, channels=4, sample_bytes=2) == \
        2 * shm_bytes_for_batches(2, 8, 640, 32, channels=4)


def test_quad_batches_of_16_bits_stay_uint16_and_unclipped():
    ims = [torch.from_numpy(_u16((1, 4, 4), k)) for k in range(4)]
    items = [(im, torch.zeros((0, 6)), f"{k}.png", None) for k, im in enumerate(ims)]
    seen = set()
    for seed in range(12):  # both of the coin's sides: upsampled and tiled
        out = QuadCollate(seed, SharedEpoch())(items)[0]
        assert out.dtype == torch.uint16 and out.shape == (1, 1, 8, 8)
        assert int(out.int().max()) > 255  # not clamped to 8 bits
        seen.add(torch.equal(out[0, :, :4, :4], ims[0]))  # tiled, else upsampled
    assert seen == {True, False}
