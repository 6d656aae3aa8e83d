"""The private torch APIs behind torch_private.py: each function with the private call and with its
fallback (the name removed from PRIVATE), and a loader that runs on the fallbacks alone."""
import gc
import os

import pytest
import torch
import torch.multiprocessing as tmp
from torch.utils.data import DataLoader, Dataset

from yolo_data import create_dataloader
from yolo_data.runtime import torch_private

from procs import ended, received

PRIVATE = sorted(torch_private.PRIVATE)


@pytest.fixture(params=["private", "fallback"])
def way(request, monkeypatch):
    """Each test runs once with torch's private calls and once with all of them left out."""
    monkeypatch.setattr(torch_private, "PRIVATE", set(PRIVATE) if request.param == "private" else set())
    return request.param


def test_new_shared_storage_is_shared_memory_of_the_size_asked(way):
    storage = torch_private.new_shared_storage(1000)
    assert storage.is_shared() and storage.nbytes() == 1000


def test_shared_fd_is_the_storages_descriptor_or_none(way):
    storage = torch_private.new_shared_storage(64)
    fd = torch_private.shared_fd(storage)
    if way == "fallback":
        assert fd is None
    else:
        assert isinstance(fd, int) and os.fstat(fd).st_size >= 64


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_second_mapping_sees_the_same_memory(way, strategy):
    before = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy(strategy)
    try:
        first = torch.empty(32, dtype=torch.uint8).share_memory_()
        mapped = torch_private.second_mapping(first.untyped_storage())
        if way == "fallback":
            assert mapped is None
            return
        key, second = mapped
        view = torch.empty(0, dtype=torch.uint8).set_(second, 0, (32,))
        view[5] = 77
        assert int(first[5]) == 77 and view.data_ptr() != first.data_ptr()
        assert torch_private.sharing_record(key) is torch_private.sharing_record(key)
    finally:
        tmp.set_sharing_strategy(before)


def test_without_the_sharing_record_nothing_is_ever_the_same_record(monkeypatch):
    monkeypatch.setattr(torch_private, "PRIVATE", set())
    assert torch_private.sharing_record("k") is not torch_private.sharing_record("k")


def test_a_subclass_with_disabled_torch_function_gives_plain_tensors(way):
    class Marked(torch.Tensor):
        __torch_function__ = torch_private.disabled_torch_function()

    t = torch.arange(6).as_subclass(Marked)
    for out in (t + 1, t[2:], t.view(2, 3), torch.cat([t, t])):
        assert type(out) is torch.Tensor
    assert torch.equal((t * 2).as_subclass(torch.Tensor), torch.arange(6) * 2)


def test_default_store_without_a_process_group_is_none(way):
    assert torch_private.default_store() is None


class _Numbers(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i])


def test_shutdown_workers_ends_them_now_or_with_the_iterator(way):
    loader = DataLoader(_Numbers(), batch_size=2, num_workers=2, persistent_workers=True)
    it = iter(loader)
    next(it)
    workers = list(it._workers)
    with ended(workers):
        torch_private.shutdown_workers(it)
        if way == "fallback":
            assert all(w.is_alive() for w in workers)  # nothing was called
            loader._iterator = None
            del it
            gc.collect()
        for w in workers:
            w.join(30)
        assert not any(w.is_alive() for w in workers)


def test_index_sampler_is_torchs_own_answer_whatever_a_subclass_overrides(way):
    class Overriding(DataLoader):
        @property
        def _index_sampler(self):
            return "the subclass's"

    batched = Overriding(_Numbers(), batch_size=2)
    assert torch_private.index_sampler(batched) is batched.batch_sampler
    unbatched = Overriding(_Numbers(), batch_size=None)
    assert torch_private.index_sampler(unbatched) is unbatched.sampler


def test_take_iterator_takes_the_kept_one_or_leaves_it(way):
    loader = DataLoader(_Numbers(), batch_size=2, num_workers=2, persistent_workers=True)
    assert torch_private.take_iterator(loader) is None  # no pass yet: nothing kept
    it = iter(loader)
    next(it)
    workers = list(it._workers)
    with ended(workers):
        taken = torch_private.take_iterator(loader)
        if way == "fallback":
            assert taken is None and loader._iterator is it
            loader._iterator = taken = None  # the workers end with the iterator
        else:
            assert taken is it and loader._iterator is None
            torch_private.shutdown_workers(taken)
        del it, taken
        gc.collect()
        for w in workers:
            w.join(30)
        assert not any(w.is_alive() for w in workers)


def test_ultralytics_close_ends_the_workers_now_and_a_later_pass_starts_new_ones(small_dataset, tmp_path, way):
    from yolo_data import Settings
    from yolo_data.integrations.ultralytics_loader import create_loader
    loader = create_loader(str(small_dataset), Settings.evaluation(img_size=64, batch_size=2, workers=2, split="train",
                                                                   cache_dir=tmp_path / "c"))
    first = [b["im_file"] for b in loader]
    workers = list(loader._iterator._workers)
    with ended(workers):
        loader.close()
        if way == "private":
            for w in workers:
                w.join(30)
            assert not any(w.is_alive() for w in workers)
        else:  # the workers stay until the loader is freed; the next pass takes them up again
            assert all(w.is_alive() for w in workers)
        again = [b["im_file"] for b in loader]
        assert again == first
        loader.close()
        del loader
        gc.collect()
        for w in workers:
            w.join(30)
        assert not any(w.is_alive() for w in workers)


ANSWER_S = 120  # how long the test waits for the other process's answer before it fails


def _compare_later(conn, images, want, done):
    """In a forked process: once the loop has gone on (``done``), is the batch still what it was?"""
    conn.send(done.wait(ANSWER_S) and int(images.to(torch.int64).sum()) == want)


def test_a_loader_on_the_fallbacks_alone_gives_the_same_batches_and_keeps_them(small_dataset, tmp_path, way):
    """Workers forked after PRIVATE was emptied run on the fallbacks too: batches equal those made
    without workers, kept batches are never rewritten, and one given to a forked process stays as it
    was."""
    kw = dict(augment=True, shuffle=True, hyp=dict(mosaic=1.0, hsv_h=0.5), cache_dir=tmp_path / "c")
    plain = create_dataloader(str(small_dataset), 64, 2, 32, workers=0, **kw)[0]
    reference = [b[0].clone() for _ in range(3) for b in plain]
    loader = create_dataloader(str(small_dataset), 64, 2, 32, workers=2, **kw)[0]
    ctx = tmp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    done = ctx.Event()  # set once the loop has gone on: the forked process compares only then
    held, children = [], []
    with ended(children):
        for epoch in range(3):
            for k, (images, *_) in enumerate(loader):
                if epoch == 0 and k == 0:
                    children.append(ctx.Process(target=_compare_later, daemon=True,
                                                args=(send, images, int(images.to(torch.int64).sum()), done)))
                    children[0].start()
                held.append(images[0])  # a view keeps the batch
        done.set()
        assert received(receive, ANSWER_S, "comparison from the forked process") is True
    assert all(torch.equal(a, b[0]) for a, b in zip(held, reference)) and len(held) == len(reference)
