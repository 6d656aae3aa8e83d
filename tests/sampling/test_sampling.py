"""YoloSampler: shuffling, DDP shares, whole rect batches, epochs, image weights."""
import numpy as np
import pytest

from yolo_data.sampling.sampler import ItemKey, SharedEpoch, YoloSampler
from yolo_data.sampling.weights import labels_to_class_weights, labels_to_image_weights


def positions(sampler):
    """One pass of ``sampler``: its ItemKeys' positions."""
    return [k.position for k in sampler]


def shares(n, world, epoch, batch=4, keys=False, **kw):
    """Per rank one pass: positions, or (with ``keys``) the ItemKeys themselves."""
    out = []
    for r in range(world):
        s = YoloSampler(n, batch, rank=r, world_size=world, **kw)
        s.set_epoch(epoch)
        out.append(list(s) if keys else positions(s))
    return out


def steps_of(parts, batch):
    """Per rank, its list of batches (the DataLoader's chunks of ``batch``)."""
    return [[p[i:i + batch] for i in range(0, len(p), batch)] for p in parts]


def test_single_process_order():
    assert list(YoloSampler(7, 4)) == [ItemKey(i, i) for i in range(7)]  # unshuffled: draw = place = position
    s = YoloSampler(7, 4, shuffle=True, seed=1)
    a, b = positions(s), positions(s)  # no set_epoch: the second pass is the next epoch
    assert sorted(a) == sorted(b) == list(range(7)) and a != b and s.epoch == 1
    s2 = YoloSampler(7, 4, shuffle=True, seed=1)
    assert positions(s2) == a  # the same seed gives the same first epoch


@pytest.mark.parametrize("n,world", [(16, 2), (10, 3), (5, 4), (9, 2)])
def test_ddp_shares_take_equal_steps_cover_everything_and_change_each_epoch(n, world):
    e0 = shares(n, world, 0, shuffle=True, seed=3)
    e1 = shares(n, world, 1, shuffle=True, seed=3)
    for e in (e0, e1):
        steps = steps_of(e, 4)
        assert len({len(p) for p in steps}) == 1  # the same number of steps on every rank (DDP hangs otherwise)
        assert all(len(b) == 4 for p in steps for b in p[:-1])
        flat = [i for p in e for i in p]
        assert set(flat) == set(range(n))
        padded = len(flat) - n  # repeats only where the last step has fewer items than ranks
        assert padded == max(0, world - n % (4 * world)) if n % (4 * world) else padded == 0
        assert len(flat) - len(set(flat)) == padded
    assert e0[0] != e1[0]


def global_steps(n, batch, world, epoch=0, **kw):
    """Per global step: the positions of all ranks in rank order, and their ItemKeys."""
    plain = steps_of(shares(n, world, epoch, batch, **kw), batch)
    tokens = steps_of(shares(n, world, epoch, batch, keys=True, **kw), batch)
    merge = lambda per_rank: [sum((p[s] for p in per_rank), []) for s in range(len(per_rank[0]))]  # noqa: E731
    return merge(plain), merge(tokens)


@pytest.mark.parametrize("kw", [dict(shuffle=True), dict(shuffle=False), dict(shuffle=True, rect=True),
                                dict(shuffle=True, group=4), dict(shuffle=True, weights=True)])
@pytest.mark.parametrize("n", [64, 61, 57])
def test_the_same_global_steps_on_1_2_and_4_ranks(n, kw):
    """Global batch 16: 16 per rank on 1, 8 on 2, 4 on 4.  Every step's images (and places, which key
    the augmentation) are the same; only a last step with fewer groups than ranks is padded."""
    kw = dict(kw, seed=5)
    weights = kw.pop("weights", False)
    ref = None
    for world in (1, 2, 4):
        b = 16 // world
        if weights:
            w = np.linspace(0.1, 1, n)
            plain = [[] for _ in range(world)]
            tokens = [[] for _ in range(world)]
            for r in range(world):
                for out, dt in ((plain, False), (tokens, True)):
                    s = YoloSampler(n, b, rank=r, world_size=world, **kw)
                    s.set_weights(w)
                    s.set_epoch(2)
                    out[r] = list(s) if dt else positions(s)
            merge = lambda per_rank: [sum((p[s] for p in per_rank), []) for s in range(len(per_rank[0]))]  # noqa
            got = merge(steps_of(plain, b)), merge(steps_of(tokens, b))
        else:
            got = global_steps(n, b, world, epoch=2, **kw)
        if ref is None:
            ref = got
            assert len(ref[0]) == -(-n // 16)
            continue
        g = kw.get("group", 1)
        last_groups = -(-(n % 16) // g)
        same = len(ref[0]) if not n % 16 or last_groups >= world else len(ref[0]) - 1
        assert got[0][:same] == ref[0][:same] and got[1][:same] == ref[1][:same]
        assert len(got[0]) == len(ref[0])
        if same < len(ref[0]):  # padded: the real items are there, plus repeats at places after the order
            assert set(ref[0][-1]) <= set(got[0][-1]) and len(got[0][-1]) > len(ref[0][-1])
            assert all(t.draw >= n for t in got[1][-1] if t not in ref[1][-1])


def test_whole_partner_groups_per_rank_in_every_step():
    n, world, b = 45, 4, 8
    parts = shares(n, world, 1, b, shuffle=True, keys=True, group=4)
    for rank_steps in steps_of(parts, b):
        for batch in rank_steps:
            groups = [t.draw // 4 for t in batch]
            for g in set(groups):
                members = [t for t in batch if t.draw // 4 == g]
                # a group is whole: 4 places, or the tail of the order (45 = 11 groups of 4 + 1)
                assert len(members) == 4 or {t.draw for t in members} == {44}
    # the last step (13 places = 4 groups of 4, 4, 4, 1) gives each rank one group
    assert [len(p[-1]) for p in steps_of(parts, b)] == [4, 4, 4, 1]


def test_rect_batches_stay_whole_shuffled_partial_last():
    orders = set()
    for epoch in range(6):
        s = YoloSampler(10, 4, shuffle=True, seed=0, rect=True)
        s.set_epoch(epoch)
        idx = positions(s)
        chunks = [idx[i:i + 4] for i in range(0, len(idx), 4)]
        assert sorted(map(sorted, chunks)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert chunks[-1] == [8, 9]
        orders.add(tuple(idx))
    assert len(orders) == 2  # two full batches: both orders appear over 6 epochs


def test_rect_under_ddp_a_step_is_one_rect_batch_of_the_global_batch():
    n = 22
    for world in (2, 3, 4):
        bi = np.arange(n) // (4 * world)  # the dataset's rect batches, made with the global batch
        parts = shares(n, world, 2, shuffle=True, seed=0, rect=True)
        steps = steps_of(parts, 4)
        assert len({len(p) for p in steps}) == 1
        for s in range(len(steps[0])):
            assert len({int(bi[i]) for p in steps for i in p[s]}) == 1  # one shape for the whole step


def test_resume_at_a_step_gives_the_rest_of_the_pass_on_any_world_size():
    n = 52  # the last step has 4 items: one for each of 4 ranks, no padding
    full = global_steps(n, 8, 1, epoch=3, shuffle=True, seed=1)[1]
    for world, k in ((1, 2), (2, 2), (2, 4), (4, 3)):
        b = 8 // world
        parts = []
        for r in range(world):
            s = YoloSampler(n, b, rank=r, world_size=world, shuffle=True, seed=1)
            s.resume_at(3, k)
            parts.append(list(s))
            assert s.epoch == 3 and s.pass_start == k
            assert len(list(s)) == len(s) and s.epoch == 4  # the pass after is a whole new epoch
        steps = steps_of(parts, b)
        merged = [sum((p[i] for p in steps), []) for i in range(len(steps[0]))]
        assert merged == full[k:]


def test_resume_after_a_finished_epoch_starts_the_next_one():
    s = YoloSampler(10, 4, shuffle=True, seed=1)
    s.set_epoch(5)
    whole_6 = (s.set_epoch(6), list(s))[1]
    s2 = YoloSampler(10, 4, shuffle=True, seed=1)
    s2.resume_at(5, 3)  # 3 of 3 steps done
    assert list(s2) == whole_6 and s2.epoch == 6  # the same keys: positions and draws


def test_set_epoch_to_another_epoch_drops_the_resume_point():
    s = YoloSampler(10, 2, shuffle=True, seed=1)
    s.resume_at(1, 3)
    s.set_epoch(2)
    assert len(list(s)) == 10


def test_len_is_the_pass_length_and_costs_no_pass():
    for n, world, b in ((10, 3, 4), (1000, 4, 16), (5, 4, 4)):
        for r in range(world):
            s = YoloSampler(n, b, rank=r, world_size=world, shuffle=True)
            s._plan = None  # len() must not compute the epoch's order
            assert len(s) == len(YoloSampler(n, b, rank=r, world_size=world, shuffle=True)._plan()[0])


def test_the_shared_epoch_is_written_before_any_key_and_auto_advances():
    epoch = SharedEpoch(-1)
    s = YoloSampler(4, 2, shared_epoch=epoch)
    seen = []
    for set_to in (None, None, 7):
        if set_to is not None:
            s.set_epoch(set_to)
        it = iter(s)
        seen.append(epoch.get())  # before the first key is taken: workers read it for this pass's items
        assert [k.position for k in it] == [0, 1, 2, 3]
    assert seen == [0, 1, 7]


def test_image_weights_favour_rare_classes():
    labels = [np.array([[0, .5, .5, .1, .1]], np.float32)] * 9 + [np.array([[1, .5, .5, .1, .1]], np.float32)]
    cw = labels_to_class_weights(labels, 2)
    np.testing.assert_allclose(cw, [0.1, 0.9])
    iw = labels_to_image_weights(labels, 2)
    np.testing.assert_allclose(iw, [0.1] * 9 + [0.9])
    s = YoloSampler(10, 2, seed=0)
    for bad in (np.zeros(10), np.ones(9), np.r_[np.ones(9), np.nan], np.r_[np.ones(9), -1]):
        with pytest.raises(ValueError, match="10 non-negative"):
            s.set_weights(bad)
    s.set_weights(iw)
    drawn = [k.position for _ in range(50) for k in s]
    assert drawn.count(9) / len(drawn) > 0.4  # 0.9 / 1.8 = half of the draws
    with pytest.raises(ValueError):
        s.set_weights(np.zeros(10))


def test_weighted_draws_follow_the_weights_and_never_pick_a_zero_weight():
    from yolo_data.sampling.sampler import weighted_draws
    w = np.array([0.0, 1, 0, 3, 0, 6, 0])
    got = weighted_draws(w, 200_000, np.random.default_rng(0))
    freq = np.bincount(got, minlength=7) / len(got)
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.005)
    assert np.mean(got[:100_000] == 5) == pytest.approx(0.6, abs=0.01)  # shuffled, not sorted
    assert not np.array_equal(got, np.sort(got))
    assert (weighted_draws(np.array([0.0, 0, 2.0, 0]), 50, np.random.default_rng(1)) == 2).all()


def test_image_weights_loader_favours_the_rare_class(tmp_path):
    from conftest import make_dataset
    from yolo_data import create_dataloader
    items = [(f"{i}.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n") for i in range(9)] + [("rare.jpg", (32, 32), "1 0.5 0.5 0.2 0.2\n")]
    yaml = make_dataset(tmp_path, items, names=("common", "rare"))
    loader, ds = create_dataloader(str(yaml), 32, 5, 32, image_weights=True, workers=0, split="train")
    rare = lambda: sum(p.endswith("rare.jpg") for p in paths) / len(paths)  # noqa: E731
    paths = [p for _ in range(20) for _, _, batch, _ in loader for p in batch]
    assert rare() < 0.2  # uniform (0.1) until the training script weights the draws, as with YOLOv5
    loader.sampler.set_weights(labels_to_image_weights(ds.labels, 2))
    paths = [p for _ in range(20) for _, _, batch, _ in loader for p in batch]
    assert rare() > 0.35


def _yolov5_image_weights_epochs(workers):
    """YOLOv5's train.py with --image-weights: dataset.indices set at the start of each epoch."""
    import random
    import tempfile
    from pathlib import Path
    from conftest import make_dataset
    from yolo_data import create_dataloader
    tmp = Path(tempfile.mkdtemp())
    items = [(f"{i}.jpg", (32, 32), f"{i % 2} 0.5 0.5 0.2 0.2\n") for i in range(8)]
    yaml = make_dataset(tmp, items, names=("a", "b"))
    loader, ds = create_dataloader(str(yaml), 32, 4, 32, image_weights=True, workers=workers, shuffle=True,
                                   split="train")
    epochs = []
    for epoch in range(3):
        only = 5 + epoch  # weights that pick one image, another one each epoch
        ds.indices = random.Random(epoch).choices(range(ds.n), weights=[int(i == only) for i in range(8)], k=ds.n)
        epochs.append(sorted(Path(p).name for _, _, batch, _ in loader for p in batch))
    return epochs


@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_indices_set_each_epoch_reach_persistent_workers(workers):
    """Before: persistent workers kept the indices of their start, so epochs after the first ignored
    the weights train.py computed (and our own weighting was applied on top)."""
    epochs = _yolov5_image_weights_epochs(workers)
    assert epochs == [["5.jpg"] * 8, ["6.jpg"] * 8, ["7.jpg"] * 8]


def test_dataset_indices_must_be_n_image_indices(tmp_path):
    from conftest import make_dataset
    from yolo_data.dataset import LoadImagesAndLabels
    ds = LoadImagesAndLabels(str(make_dataset(tmp_path, [("a.jpg", (32, 32), None), ("b.jpg", (32, 32), None)])), 32,
                     split="train")
    for bad in ([0], [0, 2], [-1, 0]):
        with pytest.raises(ValueError, match="2 image indices"):
            ds.indices = bad
    ds.indices = [1, 1]
    assert ds[0][2].endswith("b.jpg") and ds[1][2].endswith("b.jpg")
