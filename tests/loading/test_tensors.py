"""The tensor edge: items written into one batch tensor, HSV and flips applied on the way out, and
collate handing the batch tensor on without a copy."""
import numpy as np
import pytest
import torch

from yolo_data.loading.collate import collate_fn, one_batch
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.geometry.shapes import letterbox, letterbox_plan
from yolo_data.augment.hyp import AugmentConfig
from yolo_data.augment.pipeline import draw_finish
from yolo_data.augment.sample import Sample
from yolo_data.loading.tensors import BatchImages, Scratch, shared_fd, write_letterboxed, write_rgb

from finish_reference import finish


def reference_chw(img_bgr):
    return np.ascontiguousarray(img_bgr.transpose(2, 0, 1)[::-1])


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("hyp", [dict(), dict(hsv_h=0, hsv_s=0, hsv_v=0), dict(flipud=0.5), dict(hsv_h=0.5, flipud=1.0)])
def test_write_rgb_equals_the_plain_finish_step(channels, hyp):
    """Same draws, same pixels as the plain reference (finish_reference.finish) followed by a BGR -> CHW RGB transpose."""
    cfg = AugmentConfig(**hyp)
    scratch = Scratch()
    for seed in range(6):
        img = np.random.default_rng(seed).integers(0, 255, (37, 53, channels), dtype=np.uint8)
        before = img.copy()
        sample = Sample(img, np.zeros(0, np.float32), np.zeros((0, 4), np.float32))
        expect = reference_chw(finish(sample, cfg, np.random.default_rng(100 + seed)).img)
        draws = draw_finish(cfg, np.random.default_rng(100 + seed))
        out = np.zeros((3, 37, 53), np.uint8)
        write_rgb(img, out, draws.hsv_gains, draws.flip_ud, draws.flip_lr, scratch)
        assert np.array_equal(out, expect), (seed, draws)
        assert np.array_equal(img, before)


@pytest.mark.parametrize("shape,new_shape,scaleup", [((48, 64), 64, False), ((30, 41), (64, 96), True),
                                                      ((100, 70), (64, 64), False), ((64, 64), 64, False)])
def test_write_letterboxed_equals_letterbox(shape, new_shape, scaleup):
    img = np.random.default_rng(0).integers(0, 255, shape + (3,), dtype=np.uint8)
    plan = letterbox_plan(shape, new_shape, auto=False, scaleup=scaleup)
    lb = letterbox(img, new_shape, auto=False, scaleup=scaleup)
    out = np.zeros((3,) + plan.shape, np.uint8)
    write_letterboxed(img, plan, out)
    assert plan.shape == lb.img.shape[:2] and plan.ratio == lb.ratio and plan.pad == lb.pad
    assert np.array_equal(out, reference_chw(lb.img))


def test_one_batch_finds_the_slots_of_one_tensor_and_nothing_else():
    images = BatchImages(3)
    slots = [images.write(k, (4, 5), lambda out, k=k: out.fill(k)) for k in range(3)]
    whole = one_batch(slots)
    assert whole is not None and whole.shape == (3, 3, 4, 5) and whole.data_ptr() == images.images.data_ptr()
    assert [int(whole[k].min()) for k in range(3)] == [0, 1, 2] and [int(whole[k].max()) for k in range(3)] == [0, 1, 2]
    assert one_batch(slots[:2]) is None  # part of a batch: stacked
    assert one_batch([slots[1], slots[0], slots[2]]) is None  # another order
    assert one_batch([torch.zeros(3, 4, 5), torch.zeros(3, 4, 5)]) is None
    odd = images.write(1, (6, 5), lambda out: out.fill(7))  # another shape gets its own tensor
    assert odd.shape == (3, 6, 5) and int(odd.min()) == 7
    assert odd.untyped_storage().data_ptr() != images.images.untyped_storage().data_ptr()


def _write_in_a_worker(_):
    """What a DataLoader worker does: slots of a shared-memory batch (written through its descriptor)."""
    images = BatchImages(4)
    slots = [images.write(k, (64, 48), lambda out, k=k: out.__setitem__(slice(None), np.arange(64 * 48 * 3,
             dtype=np.uint32).reshape(3, 64, 48).astype(np.uint8) + k)) for k in range(4)]
    return one_batch(slots), shared_fd(images.images) is not None


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_batches_made_in_workers_arrive_whole_with_either_sharing_strategy(strategy):
    """By descriptor (Linux's default) slots are written with pwrite; otherwise through the mapping."""
    from torch.utils.data import DataLoader
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(strategy)
    try:
        loader = DataLoader(range(2), batch_size=None, num_workers=1, collate_fn=_write_in_a_worker)
        for whole, by_descriptor in loader:
            assert by_descriptor == (strategy == "file_descriptor")
            ramp = np.arange(64 * 48 * 3, dtype=np.uint32).reshape(3, 64, 48).astype(np.uint8)
            for k in range(4):
                assert np.array_equal(whole[k].numpy(), ramp + k)
            del whole
    finally:
        torch.multiprocessing.set_sharing_strategy(before)


@pytest.mark.parametrize("augment,batch_partners", [(False, True), (True, False), (True, True)])
def test_a_batch_is_handed_on_without_a_copy_and_equals_its_items(small_dataset, augment, batch_partners, tmp_path):
    ds = LoadImagesAndLabels(str(small_dataset), 64, 4, augment=augment, split="train", cache_dir=tmp_path, seed=3,
                     batch_partners=batch_partners)
    items = ds.__getitems__([0, 1, 2, 3])
    imgs, targets, paths, _ = collate_fn(items)
    assert imgs.data_ptr() == items[0][0].data_ptr() and imgs.shape == (4, 3, 64, 64)
    if not (augment and batch_partners):  # then each item is what the dataset gives for it alone
        for k in range(4):
            img, t, _, _ = ds[k]
            assert torch.equal(imgs[k], img) and torch.equal(targets[targets[:, 0] == k, 1:], t[:, 1:])
    assert list(paths) == [ds.im_files[k] for k in range(4)]
    # column 0: each item's index, once per target of that item, in item order
    counts = [len(t) for _, t, _, _ in items]
    assert targets[:, 0].tolist() == [float(k) for k in range(4) for _ in range(counts[k])]
    assert torch.equal(targets[:, 1:], torch.cat([t[:, 1:] for _, t, _, _ in items]))
    if not augment:
        assert counts == [2, 1, 2, 1]  # a.jpg, b.jpg, c.png and d.jpg as labelled


def test_items_from_several_threads_equal_items_made_one_by_one(small_dataset, tmp_path):
    """Scratch arrays are per thread, so a dataset shared by threads gives the same items."""
    from concurrent.futures import ThreadPoolExecutor
    ds = LoadImagesAndLabels(str(small_dataset), 64, 4, augment=True, split="train", cache_dir=tmp_path, seed=1)
    alone = [ds[k][0].clone() for k in range(len(ds))] * 4
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda k: ds[k % len(ds)][0], range(4 * len(ds))))
    assert all(torch.equal(a, b) for a, b in zip(alone, threaded))


def test_mixup_of_a_resized_mosaic_and_a_canvas_mosaic(small_dataset, tmp_path):
    """With copy-paste on, a mosaic whose tiles have polygons takes the canvas path (BGRA canvas) and one
    without takes the resized path (BGR); mixup blends the two whatever their channels."""
    hyp = dict(mosaic=1.0, mixup=1.0, copy_paste=1.0, fliplr=0.5)
    ds = LoadImagesAndLabels(str(small_dataset), 64, 4, augment=True, hyp=hyp, split="train", cache_dir=tmp_path, seed=0)
    for epoch in range(4):
        ds.set_epoch(epoch)
        for k in range(len(ds)):
            img, targets, _, _ = ds[k]
            assert img.shape == (3, 64, 64) and targets.shape[1] == 6
        imgs, _, _, _ = collate_fn(ds.__getitems__([0, 1, 2, 3]))
        assert imgs.shape == (4, 3, 64, 64)
