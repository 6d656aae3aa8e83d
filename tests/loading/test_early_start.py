"""Workers start, and the first pass begins, when the loader is built (YOLOv5's InfiniteDataLoader does
too); what the first ``iter`` yields is exactly what it would have been without the early start."""
import multiprocessing
import random
from pathlib import Path

import pytest
import yaml

from conftest import make_dataset
from procs import count_calls
from yolo_data import create_dataloader
from yolo_data.dataset import YoloDataset
from yolo_data.sampling.weights import labels_to_image_weights

HIGH = Path(__file__).resolve().parents[2] / "data" / "hyps" / "hyp.scratch-high.yaml"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    items = [(f"{i:02d}.jpg", (64, 48), f"{i % 2} 0.5 0.5 0.2 0.2\n") for i in range(12)]
    return str(make_dataset(tmp_path_factory.mktemp("early"), items, names=("a", "b")))


def passes(loader, n=2):
    return [[(paths, imgs.sum().item(), mosaics(shapes)) for imgs, _, paths, shapes in loader] for _ in range(n)]


def mosaics(shapes):
    """How many items of a batch are mosaics (YOLOv5's shapes are None for them)."""
    return sum(s is None for s in shapes)


def make(data, workers, hyp=str(HIGH), **kwargs):
    return create_dataloader(data, 64, 4, 32, augment=True, hyp=hyp, shuffle=True, workers=workers,
                             split="train", **kwargs)


NO_MOSAIC = {"mosaic": 0.0, "mixup": 0.0, "copy_paste": 0.0, "scale": 0.2}  # also another scale than HIGH's


def in_place(ds):
    """As a script may do with the dict it passed: change it, without assigning dataset.hyp."""
    ds.hyp.update(NO_MOSAIC)


# what a training script may do between building the loader and its first pass
CHANGES = {
    "nothing": lambda loader, ds: None,
    "set_epoch to the same epoch": lambda loader, ds: loader.sampler.set_epoch(0),
    "set_epoch to another epoch": lambda loader, ds: loader.sampler.set_epoch(3),
    "set_weights": lambda loader, ds: loader.sampler.set_weights(labels_to_image_weights(ds.labels, 2)),
    "dataset.indices (YOLOv5's --image-weights)": lambda loader, ds: setattr(
        ds, "indices", random.Random(0).choices(range(ds.n), k=ds.n)),
    "close_mosaic (closed at epoch 0, or resumed in the closed phase)": lambda loader, ds: ds.close_mosaic(),
    "dataset.mosaic = False (YOLOv5-style and Ultralytics' closing step)": lambda loader, ds: setattr(
        ds, "mosaic", False),
    "dataset.hyp = a new dict": lambda loader, ds: setattr(ds, "hyp", {**ds.hyp, **NO_MOSAIC}),
    "dataset.hyp dict changed in place": lambda loader, ds: in_place(ds),
}
# changes after which no item of the first passes is a mosaic
UNMOSAIC = {k for k in CHANGES if "mosaic" in k or "hyp" in k}


def made_in_workers(monkeypatch):
    """The batches made so far, counted in the loader's workers (forked after this patch)."""
    return count_calls(monkeypatch, YoloDataset, "__getitems__")


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_first_passes_equal_those_of_a_loader_without_workers(data, change, monkeypatch):
    """Workers=0 never starts early: the reference for every change a script makes before its first pass,
    made once the workers have made the whole early pass (3 batches, within 2 workers x 2 prefetched)."""
    hyp = yaml.safe_load(HIGH.read_text())  # a dict: the in-place change needs one
    batches = made_in_workers(monkeypatch)
    early, ds_e = make(data, 2, hyp=dict(hyp))
    batches.wait(len(early), timeout=120, what="batches of the early pass made before the first iter")
    plain, ds_p = make(data, 0, hyp=dict(hyp))
    CHANGES[change](early, ds_e)
    CHANGES[change](plain, ds_p)
    got = passes(early)
    assert got == passes(plain)
    made = sum(m for p in got for _, _, m in p)
    assert (made == 0) if change in UNMOSAIC else (made > 0), made  # HIGH: every item a mosaic


def test_workers_make_the_first_pass_before_the_first_iter(data, monkeypatch):
    """The whole first pass is made with no ``iter`` (while the training script builds its model), and
    that pass is what the first ``iter`` hands out: no batch is made on demand, none twice."""
    batches = made_in_workers(monkeypatch)
    before = {p.pid for p in multiprocessing.active_children()}
    loader, _ = make(data, 2)
    started = {p.pid for p in multiprocessing.active_children()} - before
    assert len(started) == 2 and loader._iterator is not None
    batches.wait(len(loader), timeout=120, what="batches made before the first iter")
    got = [paths for _, _, paths, _ in loader]
    assert len(got) == len(loader) == 3 and batches.count == 3, f"{batches.count} batches made for a pass of 3"


@pytest.mark.parametrize("batch_partners", [True, False])
@pytest.mark.parametrize("how", ["sampler weights", "dataset.indices"])
def test_an_image_drawn_twice_in_an_epoch_is_augmented_independently(data, batch_partners, how):
    """Before: randomness was keyed by the image, so repeats of an image in one epoch came out
    pixel-identical (all of them without batch partners).  Now each draw is keyed by its place in the
    epoch too, and the batches still do not depend on the number of workers."""
    epochs = {}
    for workers in (0, 2):
        loader, ds = create_dataloader(data, 64, 4, 32, augment=True, hyp=str(HIGH), shuffle=True, workers=workers,
                                       image_weights=True, split="train", batch_partners=batch_partners)
        if how == "sampler weights":
            loader.sampler.set_weights([1.0] * 3 + [0.0] * 9)  # 12 draws from 3 images
        else:
            ds.indices = [k % 3 for k in range(12)]
        epochs[workers] = [(p, imgs[k].numpy().tobytes()) for imgs, _, paths, _ in loader for k, p in enumerate(paths)]
    assert epochs[0] == epochs[2]
    by_image = {}
    for path, pixels in epochs[0]:
        by_image.setdefault(path, []).append(pixels)
    repeats = sum(len(v) - 1 for v in by_image.values())
    identical = sum(len(v) - len(set(v)) for v in by_image.values())
    assert repeats >= 9 and identical == 0, (repeats, identical)


def test_early_start_off_starts_the_workers_at_the_first_iter(data):
    before = {p.pid for p in multiprocessing.active_children()}
    loader, _ = make(data, 2, early_start=False)
    assert {p.pid for p in multiprocessing.active_children()} == before and loader._iterator is None
    plain, _ = make(data, 0)
    assert passes(loader) == passes(plain)  # the same batches; the workers exist now
    assert len({p.pid for p in multiprocessing.active_children()} - before) == 2
