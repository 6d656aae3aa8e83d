"""YoloSampler: shuffling, DDP shares, whole rect batches, epochs, image weights."""
import numpy as np
import pytest

from yolo_data.sampling import YoloSampler
from yolo_data.weights import labels_to_class_weights, labels_to_image_weights


def shares(n, world, epoch, **kw):
    out = []
    for r in range(world):
        s = YoloSampler(n, 4, rank=r, world_size=world, **kw)
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def test_single_process_order():
    assert list(YoloSampler(7, 4)) == list(range(7))
    s = YoloSampler(7, 4, shuffle=True, seed=1)
    a, b = list(s), list(s)  # no set_epoch: the second pass is the next epoch
    assert sorted(a) == sorted(b) == list(range(7)) and a != b and s.epoch == 1
    s2 = YoloSampler(7, 4, shuffle=True, seed=1)
    assert list(s2) == a  # the same seed gives the same first epoch


@pytest.mark.parametrize("n,world", [(16, 2), (10, 3), (5, 4)])
def test_ddp_shares_are_disjoint_equal_and_change_each_epoch(n, world):
    e0 = shares(n, world, 0, shuffle=True, seed=3)
    e1 = shares(n, world, 1, shuffle=True, seed=3)
    for e in (e0, e1):
        assert len({len(p) for p in e}) == 1  # the same number of steps on every rank
        flat = [i for p in e for i in p]
        assert set(flat) == set(range(n))
        assert len(flat) - len(set(flat)) == (-n) % world  # only the padding repeats
    assert e0[0] != e1[0]


def test_rect_batches_stay_whole_shuffled_partial_last():
    bi = np.floor(np.arange(10) / 4).astype(int)  # batches [0..3] [4..7] [8, 9]
    orders = set()
    for epoch in range(6):
        s = YoloSampler(10, 4, shuffle=True, seed=0, batch_index=bi)
        s.set_epoch(epoch)
        idx = list(s)
        chunks = [idx[i:i + 4] for i in range(0, len(idx), 4)]
        assert sorted(map(sorted, chunks)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert chunks[-1] == [8, 9]
        orders.add(tuple(idx))
    assert len(orders) == 2  # two full batches: both orders appear over 6 epochs


def test_rect_under_ddp_every_rank_gets_whole_batches_and_equal_steps():
    bi = np.floor(np.arange(10) / 4).astype(int)
    for world in (2, 3, 4):
        parts = shares(10, world, 2, shuffle=True, seed=0, batch_index=bi)
        steps = [len(range(0, len(p), 4)) for p in parts]
        assert len(set(steps)) == 1
        for p in parts:
            for i in range(0, len(p), 4):
                assert len(set(bi[p[i:i + 4]])) == 1  # never two rect batches in one step


def test_on_epoch_called_before_indices_and_auto_advance():
    calls = []
    s = YoloSampler(4, 2, on_epoch=calls.append)
    list(s), list(s)
    s.set_epoch(7)
    list(s)
    assert calls == [0, 1, 7]


def test_image_weights_favour_rare_classes():
    labels = [np.array([[0, .5, .5, .1, .1]], np.float32)] * 9 + [np.array([[1, .5, .5, .1, .1]], np.float32)]
    cw = labels_to_class_weights(labels, 2)
    np.testing.assert_allclose(cw, [0.1, 0.9])
    iw = labels_to_image_weights(labels, 2)
    np.testing.assert_allclose(iw, [0.1] * 9 + [0.9])
    s = YoloSampler(10, 2, seed=0)
    s.set_weights(iw)
    drawn = [i for _ in range(50) for i in s]
    assert drawn.count(9) / len(drawn) > 0.4  # 0.9 / 1.8 = half of the draws
    with pytest.raises(ValueError):
        s.set_weights(np.zeros(10))


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
    from yolo_data.dataset import YoloDataset
    ds = YoloDataset(str(make_dataset(tmp_path, [("a.jpg", (32, 32), None), ("b.jpg", (32, 32), None)])), 32,
                     split="train")
    for bad in ([0], [0, 2], [-1, 0]):
        with pytest.raises(ValueError, match="2 image indices"):
            ds.indices = bad
    ds.indices = [1, 1]
    assert ds[0][2].endswith("b.jpg") and ds[1][2].endswith("b.jpg")
