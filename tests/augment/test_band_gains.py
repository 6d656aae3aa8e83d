"""Per-band gain and offset (hyp ``band_gain``, ``band_offset``): the colour step of images of other than
3 channels, drawn per image and per band from the item's generator, last of its draws."""
from __future__ import annotations

import logging

import cv2
import numpy as np
import pytest
import torch
import yaml

from banddata import REPO, SCRATCH_LOW, assert_band_step_of, band_dataset, digests, training_batches
from yolo_data.augment.hyp import AugmentConfig, load_hyp
from yolo_data.augment.photometric import BandGains, apply_band_gains, band_tables, draw_band_gains
from yolo_data.augment.pipeline import draw_finish
from yolo_data.loading.tensors import write_rgb

#: sha256 (first 16 hex digits) of the first two training batches (images, targets) of ``band_dataset``
#: on the CPU path and on a device stage on the CPU, from the code before band_gain and band_offset
#: existed, with opencv-python 5.0.0 on x86-64 (other builds may round otherwise)
GOLDEN = {
    (1, None): ["0c1c4e3789604edc", "50cfd329c890ece1"],
    (1, "cpu"): ["d10cfe787b4ec666", "92d47a9ce5c10121"],
    (3, None): ["749ffc808c9d84a3", "9c7d426fb8940048"],
    (3, "cpu"): ["c6c86de92055f231", "cd3a69226c757ad2"],
    (10, None): ["82185ecc9adb8229", "27edd9814a71194d"],
    (10, "cpu"): ["1748d7924a38489f", "deaede07555c8601"],
}


@pytest.mark.parametrize("channels,device", list(GOLDEN), ids=[f"{c}ch-{d or 'workers'}" for c, d in GOLDEN])
def test_without_the_keys_or_at_zero_batches_are_the_bytes_they_were(tmp_path, channels, device):
    if not cv2.__version__.startswith("5.0."):
        pytest.skip(f"hashes taken with OpenCV 5.0, not {cv2.__version__}")
    data = band_dataset(tmp_path, channels)
    assert digests(data, device=device) == GOLDEN[channels, device]
    assert digests(data, device=device, hyp=dict(band_gain=0.0, band_offset=0.0)) == GOLDEN[channels, device]


# ----------------------------------------------------------------------------- the draws
def test_draws_span_their_ranges_band_by_band_independently():
    g, o, bands = 0.3, 0.08, 4
    draws = [draw_band_gains(np.random.default_rng(k), bands, g, o) for k in range(4000)]
    gains = np.stack([d.gains for d in draws])  # (n, bands)
    offsets = np.stack([d.offsets for d in draws])
    assert gains.min() >= 1 - g and gains.max() <= 1 + g and offsets.min() >= -o and offsets.max() <= o
    for b in range(bands):  # every band covers its whole range, evenly (uniform: mean 0, quartiles at half)
        assert gains[:, b].min() < 1 - 0.97 * g and gains[:, b].max() > 1 + 0.97 * g
        assert offsets[:, b].min() < -0.97 * o and offsets[:, b].max() > 0.97 * o
        assert abs(np.quantile(gains[:, b], 0.25) - (1 - g / 2)) < 0.03 * g
        assert abs(np.quantile(offsets[:, b], 0.75) - o / 2) < 0.03 * o
    together = np.corrcoef(np.concatenate([gains, offsets], 1), rowvar=False)  # bands and kinds independent
    assert np.abs(together - np.eye(2 * bands)).max() < 0.08


def test_nothing_is_drawn_at_zero_and_each_key_draws_alone():
    rng, same = np.random.default_rng(5), np.random.default_rng(5)
    assert draw_band_gains(rng, 10, 0.0, 0.0) is None
    assert rng.random() == same.random()  # the generator did not move
    only_offsets = draw_band_gains(np.random.default_rng(5), 10, 0.0, 0.1)
    assert np.all(only_offsets.gains == 1) and np.allclose(only_offsets.offsets,
                                                           np.random.default_rng(5).uniform(-0.1, 0.1, 10))
    only_gains = draw_band_gains(np.random.default_rng(5), 10, 0.2, 0.0)
    assert np.all(only_gains.offsets == 0) and np.allclose(only_gains.gains,
                                                           np.random.default_rng(5).uniform(0.8, 1.2, 10))


def test_finish_draws_band_gains_last_and_only_for_other_than_3_channels():
    cfg = AugmentConfig(band_gain=0.2, band_offset=0.1, flipud=0.5)
    plain = draw_finish(AugmentConfig(flipud=0.5), np.random.default_rng(3), 10)
    rng = np.random.default_rng(3)
    banded = draw_finish(cfg, rng, 10)
    assert np.array_equal(banded.hsv_gains, plain.hsv_gains)
    assert (banded.flip_ud, banded.flip_lr) == (plain.flip_ud, plain.flip_lr)
    assert banded.band_gains.gains.shape == banded.band_gains.offsets.shape == (10,)
    assert plain.band_gains is None and draw_finish(cfg, np.random.default_rng(3), 3).band_gains is None


# ----------------------------------------------------------------------------- the tables
def test_tables_round_half_to_even_and_clip_at_both_ends():
    t = band_tables(BandGains(np.array([1.5, 1.0, 0.5]), np.array([0.0, -0.125, 0.25])))
    assert t.shape == (3, 256) and t.dtype == np.uint8
    assert t[0, 1] == 2 and t[0, 3] == 4 and t[0, 5] == 8  # 1.5, 4.5, 7.5: half to even
    assert t[0, 170] == 255 and t[0, 255] == 255  # 255 and 382.5: clipped at the top
    assert t[1, 0] == t[1, 31] == 0 and t[1, 33] == 1 and t[1, 255] == 223  # offset -31.875: clipped at 0
    assert t[2, 0] == 64 and t[2, 1] == 64 and t[2, 255] == 191  # 63.75, 64.25, 191.25
    wide = band_tables(BandGains(np.array([1.0, 2.0]), np.array([0.01, 0.0])), np.uint16)
    assert wide.shape == (2, 65536) and wide.dtype == np.uint16  # the offset is of the full scale 65535
    assert wide[0, 0] == 655 and wide[0, 65535] == 65535 and wide[1, 40000] == 65535 and wide[1, 3] == 6


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_apply_band_gains_looks_each_band_up_in_place(dtype):
    rng = np.random.default_rng(0)
    planes = rng.integers(0, np.iinfo(dtype).max + 1, (5, 30, 40), dtype=dtype)
    draws = draw_band_gains(rng, 5, 0.4, 0.2)
    want = np.stack([band_tables(draws, dtype)[b][planes[b]] for b in range(5)])
    assert apply_band_gains(planes, draws) is planes and np.array_equal(planes, want)
    with pytest.raises(ValueError, match="do not fit"):
        apply_band_gains(planes[:4], draws)


@pytest.mark.parametrize("bands", [1, 4, 10])
def test_write_rgb_applies_the_bands_draws_after_the_flips_and_3_channels_ignore_them(bands):
    img = np.random.default_rng(1).integers(0, 256, (12, 16, bands), dtype=np.uint8)
    draws = draw_band_gains(np.random.default_rng(2), bands, 0.5, 0.2)
    got, plain = np.zeros((bands, 12, 16), np.uint8), np.zeros((bands, 12, 16), np.uint8)
    write_rgb(img, got, None, True, True, band_gains=draws)
    write_rgb(img, plain, None, True, True)
    assert np.array_equal(got, apply_band_gains(plain.copy(), draws)) and not np.array_equal(got, plain)


# ----------------------------------------------------------------------------- the hyp
def test_the_keys_load_from_a_hyp_and_a_hyp_without_them_loads(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="yolo_data"):
        cfg = load_hyp(REPO / "yolo_data/data/hyps/hyp.scratch-low.yaml")
    assert (cfg.band_gain, cfg.band_offset) == (0.0, 0.0) and "band_" not in caplog.text
    path = tmp_path / "hyp.yaml"
    path.write_text(yaml.safe_dump({**SCRATCH_LOW, "band_gain": 0.25, "band_offset": "0.05"}))
    cfg = load_hyp(path)
    assert (cfg.band_gain, cfg.band_offset) == (0.25, 0.05)
    assert AugmentConfig.from_numbers(cfg.as_numbers()) == cfg  # crosses to the workers in shared memory
    for bad in (dict(band_gain=1.5), dict(band_offset=-0.1)):
        with pytest.raises(ValueError, match="must be in"):
            load_hyp(bad)


def test_a_3_channel_dataset_warns_once_naming_the_keys_and_keeps_its_batches(tmp_path, caplog):
    data = band_dataset(tmp_path, 3, n=4)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        got = training_batches(data, n=1, hyp=dict(band_gain=0.3, band_offset=0.1))
    said = [r.getMessage() for r in caplog.records if "band_gain" in r.getMessage()]
    assert len(said) == 1 and "band_offset" in said[0] and "other than 3 channels" in said[0]
    want = training_batches(data, n=1)
    assert torch.equal(got[0][0], want[0][0]) and torch.equal(got[0][1], want[0][1])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        training_batches(band_dataset(tmp_path / "ten", 10, n=4), n=1, hyp=dict(band_gain=0.3))
    assert "band_gain" not in caplog.text


# ----------------------------------------------------------------------------- batches
def test_10_bands_get_the_step_and_every_other_draw_stays(tmp_path):
    data = band_dataset(tmp_path, 10)
    plain = training_batches(data)
    banded = training_batches(data, hyp=dict(band_gain=0.3, band_offset=0.1))
    for a, b in zip(plain, banded, strict=True):
        assert torch.equal(a[1], b[1]) and a[2] == b[2] and a[3] == b[3]  # boxes, files, shapes
        assert_band_step_of(a[0], b[0])
    gains = training_batches(data, hyp=dict(band_gain=0.3))
    assert_band_step_of(plain[0][0], gains[0][0])


def test_the_same_batches_on_0_and_2_workers(tmp_path):
    data = band_dataset(tmp_path, 10)
    hyp = dict(band_gain=0.3, band_offset=0.1)
    alone, pooled = training_batches(data, hyp=hyp), training_batches(data, workers=2, hyp=hyp)
    for a, b in zip(alone, pooled, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
