"""The per-band gain and offset (hyp band_gain, band_offset) on the device: the CPU path's tables looked
up on the device give the CPU path's bytes; the device stage applies the draws the workers carry in
their plans.  Run on the CPU here and on every CUDA device a run has."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from banddata import assert_band_step_of, band_dataset, training_batches
from yolo_data.augment.photometric import apply_band_gains as cpu_band_gains
from yolo_data.augment.photometric import draw_band_gains
from yolo_data.build import build_loader
from yolo_data.device.colour import apply_band_gains
from yolo_data.device.plan import BatchPlan
from yolo_data.device.stage import DeviceStage
from yolo_data.settings import Settings

DEVICES = ["cpu"] + [f"cuda:{k}" for k in range(torch.cuda.device_count())]
BANDS = dict(band_gain=0.3, band_offset=0.1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_the_device_gives_the_cpu_paths_bytes(device, dtype):
    rng = np.random.default_rng(4)
    images = rng.integers(0, np.iinfo(dtype).max + 1, (3, 10, 33, 47), dtype=dtype)
    draws = [draw_band_gains(rng, 10, 0.5, 0.3) for _ in range(3)]
    got = apply_band_gains(torch.from_numpy(images).to(device), draws)
    assert got.device == torch.device(device) and got.dtype == torch.from_numpy(images).dtype
    want = np.stack([cpu_band_gains(image.copy(), d) for image, d in zip(images, draws)])
    assert np.array_equal(got.cpu().numpy(), want)
    with pytest.raises(ValueError, match="do not fit"):
        apply_band_gains(torch.from_numpy(images[:, :4]).to(device), draws)


def test_the_stage_applies_the_draws_the_plans_carry(tmp_path):
    settings = Settings.training(img_size=64, batch_size=4, workers=0, seed=3, hyp=BANDS, device="cpu",
                                 partner_group=4, cache_dir=str(tmp_path / "cache"))
    loader = build_loader(str(band_dataset(tmp_path, 10)), settings)
    plan = loader.collate_fn(loader.dataset.__getitems__([0, 1, 2, 3]))[0]
    assert isinstance(plan, BatchPlan) and all(item.band_gains is not None for item in plan.items)
    stage = DeviceStage("cpu")
    banded = stage.images(plan)
    bare = BatchPlan([dataclasses.replace(item, band_gains=None) for item in plan.items], plan.sources, plan.hw,
                     plan.blob)
    plain = stage.images(bare).numpy()
    want = np.stack([cpu_band_gains(image, item.band_gains) for image, item in zip(plain, plan.items)])
    assert banded.shape == (4, 10, 64, 64) and np.array_equal(banded.numpy(), want)


def test_10_band_device_batches_are_the_cpu_paths(tmp_path):
    """The device stage against the CPU path with the step on: the same targets, and the same bytes
    wherever the two paths made the same pixels before it (they may differ by interpolation rounding)."""
    data = band_dataset(tmp_path, 10)
    cpu, dev = training_batches(data, hyp=BANDS), training_batches(data, hyp=BANDS, device="cpu")
    cpu_plain, dev_plain = training_batches(data), training_batches(data, device="cpu")
    for a, b, a0, b0 in zip(cpu, dev, cpu_plain, dev_plain, strict=True):
        assert torch.equal(a[1], b[1]) and a[0].shape == b[0].shape
        same = a0[0] == b0[0]
        assert same.float().mean() > 0.75 and torch.equal(a[0][same], b[0][same])
        assert (a[0].int() - b[0].int()).abs().float().mean() <= 3.0
        assert_band_step_of(b0[0], b[0])


def test_plans_carry_the_draws_to_the_stage_from_2_workers(tmp_path):
    data = band_dataset(tmp_path, 10)
    alone = training_batches(data, hyp=BANDS, device="cpu")
    pooled = training_batches(data, workers=2, hyp=BANDS, device="cpu")
    for a, b in zip(alone, pooled, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
