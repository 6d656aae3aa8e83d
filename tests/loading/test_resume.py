"""loader.state_dict() / load_state_dict(): resume mid-epoch in one process, and the refusals."""
import json
import logging
import random

import numpy as np
import pytest
from torch.utils.data import SequentialSampler

from conftest import make_dataset
from yolo_data import create_dataloader
from yolo_data.loading.loader import YoloDataLoader
from yolo_data.sampling.weights import labels_to_image_weights


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    items = [(f"{i:02d}.jpg", (48, 40), f"{i % 2} 0.5 0.5 0.2 0.2\n") for i in range(14)]
    return str(make_dataset(tmp_path_factory.mktemp("resume"), items, names=("a", "b")))


def make(data, batch=4, workers=0, **kw):
    return create_dataloader(data, 64, batch, 32, augment=True, shuffle=True, seed=1, workers=workers,
                             split="train", **kw)


def passes(loader, n):
    return [[(paths, imgs.sum().item()) for imgs, _, paths, _ in loader] for _ in range(n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_resumed_loader_yields_the_rest_of_the_epoch_then_the_next_epochs(data, workers):
    ref_loader, _ = make(data)
    ref = passes(ref_loader, 3)  # epochs 0, 1, 2: 4 steps each (14 images, batch 4)
    loader, _ = make(data)
    next(iter(loader)), next(iter(loader))  # epoch 0 from the start, then epoch 1
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["epoch"] == 2 and state["step"] == 2
    state = json.loads(json.dumps(state))  # what a checkpoint keeps
    assert len(json.dumps(state)) < 1000
    resumed, _ = make(data, workers=workers)  # workers already busy with epoch 0 (the early start)
    resumed.load_state_dict(state)
    assert resumed.state_dict()["step"] == 2  # saving again before iterating keeps the place
    got = passes(resumed, 2)
    assert got[0] == ref[2][2:]
    assert len(got[1]) == 4 and got[1] != ref[2]  # then epoch 3, whole


def test_a_state_taken_at_the_end_of_an_epoch_resumes_with_the_next_one(data):
    ref_loader, _ = make(data)
    ref = passes(ref_loader, 2)
    loader, _ = make(data)
    passes(loader, 1)
    resumed, _ = make(data)
    resumed.load_state_dict(loader.state_dict())
    assert passes(resumed, 1)[0] == ref[1]


def test_set_epoch_to_the_saved_epoch_keeps_the_place_another_epoch_drops_it(data):
    loader, _ = make(data)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    a, _ = make(data)
    a.load_state_dict(state)
    a.sampler.set_epoch(0)
    assert len(passes(a, 1)[0]) == 3
    b, _ = make(data)
    b.load_state_dict(state)
    b.sampler.set_epoch(1)
    assert len(passes(b, 1)[0]) == 4


@pytest.mark.parametrize("change,match", [
    (dict(batch=2), "global_batch 4 -> 2"),
    (dict(seed=2), "seed 1 -> 2"),
    (dict(rect=True), "rect False -> True"),
])
def test_a_state_from_a_loader_with_other_batches_is_refused(data, change, match):
    loader, _ = make(data)
    other, _ = create_dataloader(data, 64, change.pop("batch", 4), 32, augment=True, shuffle=True,
                                 seed=change.pop("seed", 1), workers=0, split="train", **change)
    with pytest.raises(ValueError, match=match):
        other.load_state_dict(loader.state_dict())
    for bad in (None, {}, {"yolo_data_loader": 99}):
        with pytest.raises(ValueError, match="not a yolo_data loader state"):
            loader.load_state_dict(bad)


def test_another_partner_group_resumes_with_a_warning(data, caplog):
    loader, _ = make(data, partner_group=4)
    other, _ = make(data, partner_group=2)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        other.load_state_dict(loader.state_dict())
    assert "partner groups of 2 where the saved run had 4" in caplog.text


def test_the_resumed_pass_checks_the_weights_and_indices_the_script_set(data):
    loader, ds = make(data)
    loader.sampler.set_weights(labels_to_image_weights(ds.labels, 2))
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert state["weights"] is not None and state["indices"] is None
    resumed, ds2 = make(data)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match="weights differ"):
        iter(resumed)
    resumed.load_state_dict(state)
    resumed.sampler.set_weights(labels_to_image_weights(ds2.labels, 2))
    assert [p for _, _, p, _ in resumed] == [p for _, _, p, _ in it]

    loader, ds = make(data)
    ds.indices = random.Random(0).choices(range(ds.n), k=ds.n)  # YOLOv5's train.py --image-weights
    state = loader.state_dict()
    assert state["indices"] is not None
    resumed, ds2 = make(data)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match="indices differ"):
        iter(resumed)
    resumed.load_state_dict(state)
    ds2.indices = np.array(ds.indices)
    assert len(list(resumed)) == 4


def test_state_dict_needs_the_loaders_own_sampler(data):
    _, ds = make(data)
    plain = YoloDataLoader(ds, batch_size=4, sampler=SequentialSampler(ds), collate_fn=ds.collate_fn)
    with pytest.raises(TypeError, match="YoloSampler"):
        plain.state_dict()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_taken_after_set_epoch_and_before_the_first_batch_resumes_that_whole_epoch(data, workers):
    ref_loader, _ = make(data)
    ref = passes(ref_loader, 3)
    loader, _ = make(data, workers=workers)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        passes(loader, 1)
    loader.sampler.set_epoch(2)  # a checkpoint at the start of epoch 2
    state = loader.state_dict()
    assert (state["epoch"], state["step"]) == (2, 0)
    resumed, _ = make(data, workers=workers)
    resumed.load_state_dict(state)
    assert passes(resumed, 1)[0] == ref[2]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_after_an_early_break_and_set_epoch_starts_the_new_epoch_at_its_first_step(data, workers):
    ref_loader, _ = make(data)
    ref = passes(ref_loader, 2)
    loader, _ = make(data, workers=workers)
    loader.sampler.set_epoch(0)
    for k, _batch in enumerate(loader):
        if k == 1:
            break  # two steps of epoch 0 used
    loader.sampler.set_epoch(1)
    state = loader.state_dict()
    assert (state["epoch"], state["step"]) == (1, 0)
    resumed, _ = make(data, workers=workers)
    resumed.load_state_dict(state)
    assert passes(resumed, 1)[0] == ref[1]


def test_an_early_started_pass_kept_by_set_epoch_to_its_own_epoch_still_counts_its_steps(data):
    loader, _ = make(data, workers=2)  # the workers began epoch 0 at construction
    loader.sampler.set_epoch(0)
    assert loader.state_dict()["step"] == 0
    it = iter(loader)
    next(it)
    assert (loader.state_dict()["epoch"], loader.state_dict()["step"]) == (0, 1)


@pytest.mark.parametrize("key,value", [("step", -1), ("step", 1.5), ("step", "2"), ("step", True), ("step", 5),
                                       ("epoch", -3), ("epoch", 2**70), ("epoch", None)])
def test_a_damaged_step_or_epoch_is_refused_with_its_name(data, key, value):
    loader, _ = make(data)
    state = dict(loader.state_dict(), **{key: value})
    with pytest.raises(ValueError, match=f"'{key}' must be a whole number"):
        make(data)[0].load_state_dict(state)


def test_a_state_from_another_dataset_of_the_same_size_is_refused(data, tmp_path):
    items = [(f"{i:02d}.jpg", (48, 40), f"{(i + 1) % 2} 0.5 0.5 0.2 0.2\n") for i in range(14)]  # other labels
    other = str(make_dataset(tmp_path / "other", items, names=("a", "b")))
    renamed = [(f"img{i:02d}.jpg", (48, 40), f"{i % 2} 0.5 0.5 0.2 0.2\n") for i in range(14)]
    third = str(make_dataset(tmp_path / "third", renamed, names=("a", "b")))
    state = make(data)[0].state_dict()
    for path in (other, third):
        with pytest.raises(ValueError, match="dataset '"):
            make(path)[0].load_state_dict(state)
    moved = str(make_dataset(tmp_path / "moved" / "elsewhere", [(f"{i:02d}.jpg", (48, 40), f"{i % 2} 0.5 0.5 0.2 0.2\n")
                                                                for i in range(14)], names=("a", "b")))
    make(moved)[0].load_state_dict(state)  # the same names and labels in another folder: accepted
    legacy = {k: v for k, v in state.items() if k != "dataset"}
    make(other)[0].load_state_dict(legacy)  # a state saved before states named their dataset
