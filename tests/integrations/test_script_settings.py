"""What a training script sets on a dataset while training (``dataset.hyp``, ``dataset.mosaic``,
``close_mosaic()``) and the seeds it passes: honoured from the next pass on with 0 and 2 persistent
workers alike, and the same batches whatever the number of workers."""
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import make_dataset
from yolo_data import create_dataloader
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.sampling.sampler import YoloSampler
from yolo_data.sampling.seeds import check_seed, seed_entropy

HIGH = yaml.safe_load((Path(__file__).resolve().parents[2] / "data" / "hyps" / "hyp.scratch-high.yaml").read_text())
NO_MOSAIC = {"mosaic": 0.0, "mixup": 0.0, "copy_paste": 0.0}
BRIGHT = {**HIGH, "hsv_v": 0.0, "hsv_s": 0.0, "hsv_h": 0.0, "scale": 0.2, "fliplr": 0.0}  # no mosaic change


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    items = [(f"{i:02d}.jpg", (64, 48), f"{i % 2} 0.5 0.5 0.2 0.2\n") for i in range(12)]
    return str(make_dataset(tmp_path_factory.mktemp("settings"), items, names=("a", "b")))


def make(data, workers, hyp, **kwargs):
    loader, ds = create_dataloader(data, 64, 4, 32, augment=True, hyp=hyp, shuffle=True, workers=workers,
                                   split="train", **kwargs)
    assert loader.num_workers == workers and loader.persistent_workers == (workers > 0)
    return loader, ds


def one_pass(loader):
    """[(paths, pixel digest, mosaics in the batch)] of the next pass (shapes are None for mosaics)."""
    return [(paths, imgs.numpy().tobytes().__hash__(), sum(s is None for s in shapes))
            for imgs, _, paths, shapes in loader]


def mosaics(p):
    return sum(m for _, _, m in p)


# what a script does between passes, and how many of the next pass's items are mosaics ("all": 12)
STEPS = [
    ("dataset.hyp = a dict without mosaic", lambda ds: setattr(ds, "hyp", {**HIGH, **NO_MOSAIC}), 0),
    ("dataset.hyp = the first dict again", lambda ds: setattr(ds, "hyp", dict(HIGH)), 12),
    ("dataset.mosaic = False", lambda ds: setattr(ds, "mosaic", False), 0),
    ("dataset.mosaic = True", lambda ds: setattr(ds, "mosaic", True), 12),
    ("close_mosaic()", lambda ds: ds.close_mosaic(), 0),
    ("dataset.mosaic = True after close_mosaic()", lambda ds: setattr(ds, "mosaic", True), 12),
    ("dataset.hyp['mosaic'] = 0 (in place)", lambda ds: ds.hyp.update(mosaic=0.0), 0),
]


def test_hyp_and_mosaic_set_between_passes_reach_persistent_workers(data):
    """Before: assigning dataset.hyp or dataset.mosaic changed nothing, even with 0 workers.  Each step's
    next pass has the mosaics its settings ask for, with workers forked before every change."""
    runs = {}
    for workers in (0, 2):
        loader, ds = make(data, workers, dict(HIGH))
        got = [one_pass(loader)]
        for _, step, _ in STEPS:
            step(ds)
            got.append(one_pass(loader))
        runs[workers] = got
        assert [mosaics(p) for p in got] == [12] + [m for _, _, m in STEPS], workers
    assert runs[0] == runs[2]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_hyp_gives_the_items_of_a_dataset_built_with_it(data, workers):
    """Pass 1 after ``dataset.hyp = BRIGHT`` (no photometric or flip augmentation, a smaller scale: the
    mosaic decision is unchanged, only the pixels) equals pass 1 of a loader built with BRIGHT."""
    loader, ds = make(data, workers, dict(HIGH))
    first = one_pass(loader)
    ds.hyp = dict(BRIGHT)
    assert ds.cfg.hsv_v == 0.0 and ds.cfg.scale == 0.2
    changed = one_pass(loader)
    ref, _ = make(data, 0, dict(BRIGHT))
    one_pass(ref)
    expected = one_pass(ref)
    assert changed == expected
    kept, _ = make(data, 0, dict(HIGH))
    one_pass(kept)
    assert changed != one_pass(kept) and first != expected


def test_mosaic_cannot_be_turned_on_where_the_dataset_was_built_without_it(data):
    for kwargs in ({"augment": False}, {"augment": True, "rect": True}):
        ds = LoadImagesAndLabels(data, 64, 4, split="train", **kwargs)
        assert ds.mosaic is False
        ds.mosaic = False  # what closing scripts do on any dataset: fine
        with pytest.raises(ValueError, match="built without mosaic"):
            ds.mosaic = True


# -- seeds ----------------------------------------------------------------------------------------------
def seeded(data, seed, workers):
    """Two epochs of a quad loader (sampler order, item augmentation and the quad coin all use the seed)."""
    loader, _ = make(data, workers, dict(HIGH), seed=seed, quad=True)
    return [one_pass(loader) for _ in range(2)]


def test_a_negative_seed_gives_reproducible_batches_of_its_own(data):
    """Before: seed=-1 failed at the first batch with NumPy's 'expected non-negative integer'."""
    minus = seeded(data, -1, 0)
    assert seeded(data, -1, 2) == minus  # the same on any number of workers
    assert seeded(data, -1, 0) == minus  # and from one run to the next
    for other in (0, 1, -2):
        assert seeded(data, other, 0) != minus, other
    assert seed_entropy(-1) == 2**64 - 1 and seed_entropy(5) == 5  # seeds >= 0 keep their batches


@pytest.mark.parametrize("seed", [1.5, 2.0, "1", True, None])
def test_a_seed_that_is_not_an_integer_is_refused_naming_the_argument(data, seed):
    with pytest.raises(TypeError, match=r"^seed must be an integer"):
        make(data, 0, None, seed=seed)
    with pytest.raises(TypeError, match=r"^seed must be an integer"):
        YoloSampler(12, 4, seed=seed)
    assert check_seed(np.int64(-3)) == -3


def test_albumentations_switched_on_by_a_new_hyp_reaches_persistent_workers(data, monkeypatch):
    """Workers forked while the hyp had no Albumentations make the step themselves when it is switched on."""
    from crafting import fake_albumentations
    fake_albumentations(monkeypatch)  # installed: importable in every process
    runs = {}
    for workers in (0, 2):
        loader, ds = make(data, workers, dict(HIGH))
        one_pass(loader)
        ds.hyp = {**HIGH, "albumentations": True}
        runs[workers] = one_pass(loader)
    plain, _ = make(data, 0, dict(HIGH))
    one_pass(plain)
    assert runs[0] == runs[2] != one_pass(plain)


def test_albumentations_without_the_package_is_refused_at_the_assignment(data, monkeypatch):
    _, ds = make(data, 0, dict(HIGH))
    monkeypatch.setitem(sys.modules, "albumentations", None)
    with pytest.raises(ImportError, match="pip install albumentations"):
        ds.hyp = {**HIGH, "albumentations": True}  # here, not in a worker at its next item
    assert ds.cfg.albumentations is False and ds.hyp == HIGH
