"""Class-balanced sampling (balance.py): the repeat-factor rule on hand-made labels, the epoch's draws and
their expectation, and the loader's promises with factors (workers, ranks, resume, refusals)."""
import json
import logging
import math
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import make_dataset
from procs import init, run
from yolo_data import create_dataloader
from yolo_data.sampling.balance import (class_image_counts, epoch_length, repeat_draws, repeat_factors, sampled_counts,
                               systematic_counts, threshold_of)
from yolo_data.sampling.sampler import YoloSampler
from yolo_data.settings import Settings


def offsets_of(per_image):
    """(classes (L,) float32, label_offsets (n+1,) int64) of per-image class lists, as a LabelStore holds them."""
    classes = np.array([c for cs in per_image for c in cs], dtype=np.float32)
    return classes, np.concatenate([[0], np.cumsum([len(cs) for cs in per_image])]).astype(np.int64)


# 10 images, backgrounds first, in the middle and last: class 0 in 8 images (f 0.8), class 1 in 1 (f 0.1),
# class 2 in 4 (f 0.4), class 3 in none
HAND = [[], [0, 0, 1, 2], [0, 2], [0, 2], [], [0, 2], [0], [0], [0, 0, 0], [0]]


def test_repeat_factors_of_a_hand_made_label_set():
    classes, offsets = offsets_of(HAND)
    assert class_image_counts(classes, offsets, 4).tolist() == [8, 1, 4, 0]
    # t = 0.8: r(0) = 1, r(1) = sqrt(8), r(2) = sqrt(2); an image takes its rarest class's
    r1, r2 = math.sqrt(8), math.sqrt(2)
    got = repeat_factors(classes, offsets, 0.8, nc=4)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [1, r1, r2, r2, 1, r2, 1, 1, 1, 1], rtol=1e-12)
    # t = 0.1: only class 1 is at the threshold, r(1) = 1: nothing repeats
    assert repeat_factors(classes, offsets, 0.1).tolist() == [1.0] * 10
    images, instances = sampled_counts(got, classes, offsets, 4)
    np.testing.assert_allclose(images, [r1 + 3 * r2 + 4, r1, r1 + 3 * r2, 0])
    np.testing.assert_allclose(instances, [2 * r1 + 3 * r2 + 6, r1, r1 + 3 * r2, 0])
    raw_images, raw_instances = sampled_counts(np.ones(10), classes, offsets, 4)
    assert raw_images.tolist() == [8, 1, 4, 0] and raw_instances.tolist() == [11, 1, 4, 0]


def test_repeat_factors_match_a_per_image_reference_on_random_labels():
    rng = np.random.default_rng(3)
    per_image = [list(rng.integers(0, 6, rng.integers(0, 5)) ** 2 % 7) for _ in range(300)]
    classes, offsets = offsets_of(per_image)
    n, t = len(per_image), 0.3
    f = {c: sum(c in cs for cs in per_image) / n for c in range(7)}
    want = [max([max(1.0, math.sqrt(t / f[c])) for c in cs], default=1.0) for cs in per_image]
    np.testing.assert_allclose(repeat_factors(classes, offsets, t, 7), want, rtol=1e-12)
    images, instances = sampled_counts(np.array(want), classes, offsets, 7)
    np.testing.assert_allclose(images, [sum(r for r, cs in zip(want, per_image) if c in cs) for c in range(7)])
    np.testing.assert_allclose(instances, [sum(r * cs.count(c) for r, cs in zip(want, per_image)) for c in range(7)])


@pytest.mark.parametrize("value,want", [(False, None), (None, None), (0, None), (0.0, None), (True, 0.1),
                                        (0.25, 0.25), (1, 1.0)])
def test_class_balance_values(value, want):
    assert threshold_of(value) == want
    assert Settings(class_balance=value).index.balance_threshold == want


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "0.1", [0.1]])
def test_bad_class_balance_values_are_refused_naming_the_setting(value):
    with pytest.raises(ValueError, match=r"class_balance must be .* threshold in \(0, 1\]"):
        Settings.training(class_balance=value)


def test_class_balance_with_image_weights_is_refused_and_turns_rect_off():
    with pytest.raises(ValueError, match="class_balance and image_weights"):
        Settings.training(class_balance=0.1, image_weights=True)
    assert not Settings.training(class_balance=0.1, rect=True).rect
    assert Settings.training(rect=True).rect


def test_labels_that_do_not_fit_are_refused():
    classes, offsets = offsets_of(HAND)
    with pytest.raises(ValueError, match="not below nc=2"):
        repeat_factors(classes, offsets, 0.5, nc=2)
    with pytest.raises(ValueError, match="one class id per label row"):
        repeat_factors(classes[:-1], offsets, 0.5)
    with pytest.raises(ValueError, match="one per image"):
        sampled_counts(np.ones(3), classes, offsets, 4)


def test_systematic_rounding_gives_floor_or_ceil_and_exactly_r_on_average_over_u():
    """The expectation, exactly: over u on a fine uniform grid of [0, 1), the mean count is r_i (up to
    the grid's step), for every image, whatever its place in the order."""
    r = np.random.default_rng(0).uniform(1, 4, 25)
    k = 20_000
    grid = (np.arange(k) + 0.5) / k
    counts = np.stack([systematic_counts(r, u) for u in grid])
    assert ((counts == np.floor(r)) | (counts == np.ceil(r))).all()
    np.testing.assert_allclose(counts.mean(0), r, atol=2 / k)
    assert set(counts.sum(1)) <= {math.floor(r.sum()), math.floor(r.sum()) + 1}


def test_repeat_draws_have_a_fixed_length_and_each_image_r_times_on_average():
    r = np.random.default_rng(1).uniform(1, 3.5, 30)
    length = epoch_length(r)
    epochs = 4000
    counts = np.zeros((epochs, len(r)), np.int64)
    for e in range(epochs):
        d = repeat_draws(r, length, np.random.default_rng([7, e]))
        assert len(d) == length and d.dtype == np.int64
        counts[e] = np.bincount(d, minlength=len(r))
    low = counts < np.floor(r)
    assert (counts <= np.ceil(r)).all() and (low.sum(1) <= 1).all()  # only the one dropped draw
    # the dropped draw (an epoch rounded to one more, probability frac(sum)) takes r_i / sum of image i
    expect = r * (1 - (r.sum() - length) / r.sum())
    se = counts.std(0) / math.sqrt(epochs)
    assert (np.abs(counts.mean(0) - expect) < 4 * se + 1e-3).all()


def rare_dataset(root, n, rare, common):
    """n images: 'a' in all but the last 4 (backgrounds), 'b' (2 instances each) in the first ``rare``,
    'c' in the next ``common``."""
    items = []
    for i in range(n):
        rows = [] if i >= n - 4 else ["0 0.3 0.3 0.2 0.2"]
        if i < rare:
            rows += ["1 0.7 0.7 0.1 0.1", "1 0.6 0.2 0.1 0.1"]
        if rare <= i < rare + common:
            rows.append("2 0.5 0.5 0.3 0.3")
        items.append((f"{i:03d}.jpg", (40, 32), "".join(r + "\n" for r in rows)))
    return str(make_dataset(root, items, names=("a", "b", "c")))


@pytest.fixture(scope="module")
def rare(tmp_path_factory):
    return rare_dataset(tmp_path_factory.mktemp("balance"), 60, 4, 12)


def make(data, workers=0, batch=4, **kw):
    kw = {"class_balance": 0.5, "partner_group": 4, **kw}
    return create_dataloader(data, 64, batch, 32, augment=True, shuffle=True, seed=3, workers=workers,
                             split="train", **kw)[0]


def test_the_sampled_frequency_of_a_rare_class_over_50_epochs_is_its_expectation(tmp_path, caplog):
    """Through the sampler of a loader made by create_dataloader (its keys, not its pixels: mosaics add
    partners' boxes): 'b' in 12 of 240 images (f 0.05) is drawn sqrt(0.5 / 0.05) = 3.16 times as often."""
    data = rare_dataset(tmp_path, 240, 12, 40)
    with caplog.at_level(logging.INFO, logger="yolo_data"):
        loader = make(data)
    store, sampler = loader.dataset.store, loader.sampler
    classes, offsets = store.labels[:, 0], store.label_offsets
    r = sampler.repeat_factors
    np.testing.assert_allclose(r, repeat_factors(classes, offsets, 0.5, 3))
    assert r.max() == pytest.approx(math.sqrt(0.5 / (12 / 240)))
    length = math.floor(r.sum())
    assert length > 240 and len(loader) == math.ceil(length / 4)
    assert f"class_balance=0.5: epoch of {length} draws from 240 images (rarest class 'b' x3.16" in caplog.text
    instances = np.stack([np.bincount(classes[offsets[i]:offsets[i + 1]].astype(int), minlength=3)
                          for i in range(240)])  # (240, 3) instances per image
    seen = []
    for epoch in range(50):
        sampler.set_epoch(epoch)
        keys = list(sampler)
        assert len(keys) == length  # every epoch the same length
        seen.append(instances[[k.position for k in keys]].sum(0))
    want = sampled_counts(r, classes, offsets, 3)[1]
    got = np.mean(seen, 0)
    assert abs(got[1] / want[1] - 1) < 0.02, (got, want)  # the rare class: 3.16 x its raw 24 instances
    assert want[1] == pytest.approx(24 * math.sqrt(10))
    assert abs(got[2] / want[2] - 1) < 0.02 and abs(got[0] / want[0] - 1) < 0.02


def batches(loader, epochs=2):
    return [[(tuple(paths), float(imgs.float().sum()), targets.tolist()) for imgs, targets, paths, _ in loader]
            for _ in range(epochs)]


def test_the_same_batches_with_0_and_2_workers(rare):
    assert batches(make(rare)) == batches(make(rare, workers=2))


def _rank_worker(rank, world, port, data, out_dir):
    os.environ["LOCAL_RANK"] = str(rank)
    init(rank, world, port)
    try:
        loader = make(data, batch=4 // world, rank=rank, partner_group=2)
        Path(out_dir, f"{rank}.json").write_text(json.dumps(batches(loader)))
    finally:
        import torch.distributed as dist
        dist.destroy_process_group()


def test_the_same_global_batches_on_1_and_2_ranks(rare, tmp_path):
    """Global batch 4: 4 on one process, 2 per rank on two gloo processes; step k holds the same images,
    pixels and targets (mosaic partners in groups of 2, which divides both per-rank batches)."""
    ref = batches(make(rare, partner_group=2))
    run(_rank_worker, 2, rare, str(tmp_path))
    ranks = [json.loads(Path(tmp_path, f"{r}.json").read_text()) for r in range(2)]
    for epoch, want in enumerate(ref):
        assert len(ranks[0][epoch]) == len(ranks[1][epoch]) == len(want)
        for step, (p0, p1, w) in enumerate(zip(ranks[0][epoch], ranks[1][epoch], want)):
            if step == len(want) - 1 and len(w[0]) < 4:  # a last step too small for both ranks is padded
                assert p0[0] == list(w[0]) and p0[2] == w[2] and len(p1[0]) == 2
                continue
            assert tuple(p0[0]) + tuple(p1[0]) == w[0], (epoch, step)
            assert p0[1] + p1[1] == pytest.approx(w[1], rel=1e-6)


def test_resume_mid_epoch_gives_the_remaining_batches(rare):
    ref = batches(make(rare), 2)
    loader = make(rare)
    it = iter(loader)
    next(it), next(it), next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["repeat_factors"] and state["step"] == 3
    resumed = make(rare, workers=2)
    resumed.load_state_dict(state)
    got = batches(resumed, 2)
    assert got[0] == ref[0][3:]
    assert len(got[1]) == len(ref[1])  # then the next epoch, whole, of the same length


def test_a_state_from_another_class_balance_is_refused_and_old_states_still_load(rare):
    state = make(rare).state_dict()
    with pytest.raises(ValueError, match="repeat_factors"):
        make(rare, class_balance=0.3).load_state_dict(state)
    with pytest.raises(ValueError, match="repeat_factors"):
        make(rare, class_balance=False).load_state_dict(state)
    plain = make(rare, class_balance=False).state_dict()
    with pytest.raises(ValueError, match="repeat_factors"):
        make(rare).load_state_dict(plain)
    plain.pop("repeat_factors")  # a state saved before the key existed: a loader without balance takes it
    make(rare, class_balance=False).load_state_dict(plain)


def test_evaluation_and_image_weights_with_class_balance_are_refused(rare):
    with pytest.raises(ValueError, match="for training loaders"):
        create_dataloader(rare, 64, 4, 32, augment=False, workers=0, class_balance=0.1)
    with pytest.raises(ValueError, match="class_balance and image_weights"):
        create_dataloader(rare, 64, 4, 32, augment=True, workers=0, class_balance=0.1, image_weights=True)


def test_the_sampler_refuses_weights_and_rect_with_factors_and_bad_factors():
    s = YoloSampler(4, 2, shuffle=True, repeat_factors=np.array([1.0, 2.5, 1, 1]))
    assert len(list(s)) == 5 and len(s) == 5
    with pytest.raises(ValueError, match="both weight"):
        s.set_weights(np.ones(4))
    with pytest.raises(ValueError, match="rect"):
        YoloSampler(4, 2, rect=True, repeat_factors=np.ones(4))
    with pytest.raises(ValueError, match="finite numbers >= 1"):
        YoloSampler(4, 2, repeat_factors=np.array([1.0, 0.5, 1, 1]))


def test_the_same_global_steps_on_1_2_and_4_ranks_in_one_process():
    r = np.random.default_rng(2).uniform(1, 3, 37)
    ref = None
    for world in (1, 2, 4):
        keys = []
        for rank in range(world):
            s = YoloSampler(37, 8 // world, shuffle=True, seed=4, rank=rank, world_size=world, repeat_factors=r)
            s.set_epoch(5)
            keys.append(list(s))
        b = 8 // world
        steps = [sum((k[i:i + b] for k in keys), []) for i in range(0, len(keys[0]), b)]
        if ref is None:
            ref = steps
            assert sum(map(len, steps)) == epoch_length(r)
        full = epoch_length(r) // 8
        assert steps[:full] == ref[:full] and len(steps) == len(ref)
