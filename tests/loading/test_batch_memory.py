"""Shared memory for batches, reused from batch to batch (batchmemory.py): a buffer is written again only
after the training process dropped every view of the batch it held, and batches are what they are
without the pool."""
import gc
import os
import pickle
import sys
from pathlib import Path
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from torch.multiprocessing.reductions import shared_cache

import yolo_data.loading.batchmemory as bm
import yolo_data.build
import yolo_data.runtime.room
from yolo_data import create_dataloader
from yolo_data.loading.collate import collate_fn

from conftest import make_dataset
from procs import count_calls, ended, received, run_all


def _sent(images):
    """``images`` as the training process receives it: pickled by the worker's pickler, unpickled into a
    storage of its own (torch's record of shared storages is per process: forgetting the worker's entry
    maps the buffer anew, as another process does)."""
    before = dict(shared_cache)
    data = ForkingPickler.dumps(images)
    for key in [k for k, v in shared_cache.items() if before.get(k) is not v]:  # what the worker's side added
        del shared_cache[key]
    return pickle.loads(data)


def _state(pool):
    return [int(b.state[0]) for b in pool.buffers]


def test_a_buffer_is_free_again_only_when_every_view_of_the_batch_is_gone():
    pool = bm.BatchPool(3)
    images = pool.take(2, 4, 5)
    assert images.shape == (2, 3, 4, 5) and _state(pool) == [bm.IN_USE]
    images.copy_(torch.arange(120, dtype=torch.uint8).view(2, 3, 4, 5))
    received = _sent(pool.transport(images))
    assert type(received) is torch.Tensor and torch.equal(received, images)
    view = received[1]
    del received
    gc.collect()
    assert _state(pool) == [bm.IN_USE]  # a view still reads the buffer
    del view
    gc.collect()
    assert _state(pool) == [bm.FREE]
    again = pool.take(2, 4, 5)
    assert again.untyped_storage().data_ptr() == images.untyped_storage().data_ptr()


def test_held_buffers_are_not_reused_and_a_full_pool_says_so():
    pool = bm.BatchPool(2)
    held = []
    for _ in range(2):
        images = pool.take(1, 8, 8)
        held.append(_sent(pool.transport(images)))
    assert pool.take(1, 8, 8) is None and _state(pool) == [bm.IN_USE, bm.IN_USE]
    ptrs = {b.storage.data_ptr() for b in pool.buffers}
    del held
    gc.collect()
    images = pool.take(1, 8, 8)
    assert images.untyped_storage().data_ptr() in ptrs


def test_a_batch_that_did_not_leave_through_transport_loses_its_buffer():
    """A failed batch, or a custom collate that sent the memory its own way: the pool cannot know when
    the training process lets go, so that buffer (still IN_USE) leaves the pool instead of filling it."""
    pool = bm.BatchPool(3)
    first = pool.take(1, 8, 8)
    copied = pool.transport(first.clone())  # not the pooled tensor: handed on unchanged
    assert type(copied) is torch.Tensor
    second = pool.take(1, 8, 8)
    assert len(pool.buffers) == 1
    assert second.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()


def test_the_smallest_fitting_buffer_is_taken_and_a_small_one_makes_room():
    pool = bm.BatchPool(2)
    for shape in [(1, 4, 4), (1, 16, 16)]:
        images = pool.take(*shape)
        _sent(pool.transport(images))  # received and dropped at once: FREE again
    gc.collect()
    assert sorted(b.capacity for b in pool.buffers) == [48, 768]
    small = pool.take(1, 3, 3)
    assert small.untyped_storage().data_ptr() == min(pool.buffers, key=lambda b: b.capacity).storage.data_ptr()
    _sent(pool.transport(small))
    gc.collect()
    pool.take(1, 20, 20)  # nothing fits and the pool is full: the smallest free one goes
    assert sorted(b.capacity for b in pool.buffers) == [768, 1200]


def test_trim_gives_back_only_free_buffers_idle_long_enough():
    pool = bm.BatchPool(3)
    kept = []
    for shape in [(1, 4, 4), (1, 8, 8), (1, 16, 16)]:
        images = pool.take(*shape)
        kept.append(_sent(pool.transport(images)))
    kept.pop(0)  # the first buffer is FREE, the other two are held
    gc.collect()
    taken = [b.taken for b in pool.buffers]
    assert _state(pool) == [bm.FREE, bm.IN_USE, bm.IN_USE]
    assert pool.trim(10.0, now=taken[0] + 9.0) == 0  # not idle long enough
    assert pool.trim(10.0, now=taken[2] + 60.0) == 1 and [b.capacity for b in pool.buffers] == [192, 768]
    del kept
    gc.collect()
    assert pool.trim(10.0, now=taken[2] + 60.0) == 2 and pool.buffers == []


def test_a_buffer_held_when_the_training_process_forks_is_never_written_again():
    pool = bm.BatchPool(1)
    images = pool.take(1, 4, 4)
    received = _sent(pool.transport(images))
    pid = os.fork()
    if pid == 0:  # the child drops its copy of the batch: that frees nothing
        try:
            del received
            gc.collect()
        finally:
            os._exit(0)  # never back into pytest, whatever happened
    os.waitpid(pid, 0)
    assert _state(pool) == [bm.RETIRED]  # the child could have kept it
    del received
    gc.collect()
    assert _state(pool) == [bm.RETIRED]
    again = pool.take(1, 4, 4)
    assert again.untyped_storage().data_ptr() != images.untyped_storage().data_ptr() and len(pool.buffers) == 1


def _loader(data, tmp_path, workers, evaluation=False, **kw):
    if evaluation:
        kw.update(rect=True, pad=0.5, split="train")
    else:
        kw.update(augment=True, shuffle=True, hyp=dict(mosaic=1.0, hsv_h=0.5))
    loader, _ = create_dataloader(str(data), 64, 2, 32, workers=workers, cache_dir=tmp_path / "c", **kw)
    return loader


@pytest.mark.parametrize("keep,evaluation", [("batches", False), ("views", False), ("batches", True)])
def test_batches_held_by_the_training_loop_are_never_overwritten(small_dataset, tmp_path, keep, evaluation):
    """Every batch kept (or only a view of its first image) for three epochs: each still equals the same
    batch made without workers (no pool), so no buffer was written while the loop held it.  Evaluation:
    12 images of one size, every batch of one shape (any buffer fits any batch)."""
    data = small_dataset
    if evaluation:
        data = make_dataset(tmp_path / "same", [(f"{k}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for k in range(12)])
    loader = _loader(data, tmp_path, 0, evaluation)
    reference = [b[0].clone() for _ in range(3) for b in loader]
    loader = _loader(data, tmp_path, 2, evaluation)
    held = []
    for _ in range(3):
        for images, *_ in loader:
            held.append(images if keep == "batches" else images[0])
    assert len(held) == len(reference)
    for got, want in zip(held, reference):
        assert torch.equal(got, want if keep == "batches" else want[0])


def test_workers_reuse_their_buffers(small_dataset, tmp_path, monkeypatch):
    """A loop that drops each batch: after the first few, every batch lands in a reused buffer (the
    workers make at most POOL_SIZE buffers each), and the batches equal those made without workers."""
    made = torch.zeros(1, dtype=torch.int64).share_memory_()  # counted in the forked workers
    new = bm._Buffer.new.__func__

    def counted(cls, capacity):
        made.add_(1)
        return new(cls, capacity)

    monkeypatch.setattr(bm._Buffer, "new", classmethod(counted))
    monkeypatch.setattr(bm, "IDLE_SECONDS", 1e9)  # however slow the machine, no buffer is given back here
    for evaluation in (False, True):
        made.zero_()
        loader0, loader2 = _loader(small_dataset, tmp_path, 0, evaluation), _loader(small_dataset, tmp_path, 2, evaluation)
        reference = [b[0].clone() for _ in range(6) for b in loader0]
        got = [b[0].clone() for _ in range(6) for b in loader2]
        assert len(got) == 18 and all(torch.equal(a, b) for a, b in zip(got, reference))
        assert 2 <= int(made) <= 2 * bm.POOL_SIZE, (evaluation, int(made))


def test_idle_workers_give_their_buffers_back(tmp_path, monkeypatch):
    """Persistent workers between passes: after IDLE_SECONDS their buffers are gone (the next pass makes
    new ones)."""
    made = torch.zeros(1, dtype=torch.int64).share_memory_()
    new = bm._Buffer.new.__func__

    def counted(cls, capacity):
        made.add_(1)
        return new(cls, capacity)

    monkeypatch.setattr(bm._Buffer, "new", classmethod(counted))
    monkeypatch.setattr(bm, "IDLE_SECONDS", 1.0)
    given_back = count_calls(monkeypatch, bm.BatchPool, "trim", amount=lambda n: n)  # in the workers
    data = make_dataset(tmp_path / "same", [(f"{k}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for k in range(12)])
    loader = _loader(data, tmp_path, 2, evaluation=True)  # 6 batches a pass, 3 for each worker
    for batch in loader:
        del batch  # the loop holds no batch: every buffer is free between the passes
    given_back.wait(int(made), timeout=120, what="buffers given back by the idle workers")
    before = int(made)
    for batch in loader:
        del batch
    # all given back: each worker's first batch of the pass needs a new buffer (how many more it makes
    # depends on how fast the loop lets go of the batches)
    assert int(made) - before >= 2


def test_a_collate_that_sends_slot_views_gets_memory_of_its_own(small_dataset, tmp_path):
    """A plain DataLoader whose collate returns the items as they are: their images (views of the pooled
    batch tensor) leave by torch's own sharing, so the pool drops those buffers; held batches stay intact."""
    dataset = _loader(small_dataset, tmp_path, 0).dataset

    def batches(workers):
        loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=workers, collate_fn=list)
        return [batch for _ in range(3) for batch in loader]

    want = [[item[0].clone() for item in batch] for batch in batches(0)]
    held = batches(2)
    assert len(held) == len(want) == 9
    for batch, expect in zip(held, want):
        assert all(torch.equal(item[0], e) for item, e in zip(batch, expect))


def test_collate_outside_a_worker_is_unchanged():
    items = [(torch.full((3, 2, 2), k, dtype=torch.uint8), torch.zeros(0, 6), f"{k}.jpg", None) for k in range(2)]
    images = collate_fn(items)[0]
    assert type(images) is torch.Tensor and images[:, 0, 0, 0].tolist() == [0, 1]
    assert bm.transport(images) is images


def _checksum(images) -> int:
    return int(images.to(torch.int64).sum()) * 1_000_003 + int(images[..., ::7, ::5].to(torch.int64).sum())


ANSWER_S = 120  # how long a test waits for another process's answer before it fails


def _compare_later(conn, images, want, done):
    """In another process: look at the batch once the training loop has gone on (``done``), and say
    whether it is still what it was."""
    conn.send(done.wait(ANSWER_S) and _checksum(images) == want)


def _compare_from_queue(queue, conn, n, done):
    got = [queue.get(timeout=ANSWER_S) for _ in range(n)]
    done.wait(ANSWER_S)
    for images, want in got:
        conn.send(done.is_set() and _checksum(images) == want)


def test_a_batch_is_shared_and_views_taken_before_share_memory_stay_valid(small_dataset, tmp_path, sharing):
    loader = _loader(small_dataset, tmp_path, 2)
    for _ in range(2):
        for images, *_ in loader:
            assert images.is_shared()  # as torch's own batches: no copy by share_memory_ or a Queue
            before = images.numpy()
            ptr = images.data_ptr()
            want = _checksum(images)
            images.share_memory_()
            assert images.data_ptr() == ptr and _checksum(torch.from_numpy(before)) == want


@pytest.fixture(params=["file_descriptor", "file_system"])
def sharing(request):
    """Each of torch's sharing strategies, set for the test and set back after it."""
    import torch.multiprocessing as tmp
    before = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy(request.param)
    yield request.param
    tmp.set_sharing_strategy(before)


@pytest.mark.parametrize("how", ["fork", "spawn", "queue"])
def test_a_batch_another_process_can_see_never_changes(small_dataset, tmp_path, how, sharing):
    """A process forked while the loop holds a batch (a logger started with the batch as argument), one
    spawned with it, or a batch put on a torch.multiprocessing.Queue: the loop drops its reference and
    goes on for two more epochs with the same workers, whose buffers would be rewritten; the other
    process still reads the batch as it was."""
    import torch.multiprocessing as tmp
    loader = _loader(small_dataset, tmp_path, 2)
    ctx = tmp.get_context("spawn" if how == "spawn" else "fork")
    receive, send = ctx.Pipe(duplex=False)
    done = ctx.Event()  # set once the loop has gone on: the other processes compare only then
    children = []
    with ended(children):
        if how == "queue":
            queue = ctx.Queue()
            children.append(ctx.Process(target=_compare_from_queue, args=(queue, send, 2, done), daemon=True))
            children[-1].start()
        for epoch in range(3):
            for k, (images, *_) in enumerate(loader):
                if epoch == 0 and k < 2:
                    if how in ("fork", "spawn"):
                        children.append(ctx.Process(target=_compare_later, daemon=True,
                                                    args=(send, images, _checksum(images), done)))
                        children[-1].start()
                    else:
                        queue.put((images, _checksum(images)))
                del images
        done.set()
        answers = [received(receive, ANSWER_S, "comparison from another process") for _ in range(2)]
        for p in children:
            p.join(ANSWER_S)
    assert answers == [True, True]


def test_workers_started_by_spawn_give_the_same_shared_batches(small_dataset, tmp_path):
    """A DataLoader whose workers are spawned (the dataset and the worker set-up are pickled into them):
    the batches are shared memory and equal those made without workers, over three epochs."""
    from torch.utils.data import DataLoader
    from yolo_data import LoadImagesAndLabels
    from yolo_data.runtime.workers import WorkerInit
    dataset = LoadImagesAndLabels(str(small_dataset), 64, 2, augment=True, hyp=dict(mosaic=1.0, hsv_h=0.5),
                          cache_dir=tmp_path / "c", cache_images="ram")

    def loader(workers):
        return DataLoader(dataset, batch_size=2, num_workers=workers, collate_fn=dataset.collate_fn,
                          persistent_workers=workers > 0, worker_init_fn=WorkerInit() if workers else None,
                          multiprocessing_context="spawn" if workers else None)

    reference = [b[0].clone() for _ in range(3) for b in loader(0)]
    spawned = loader(2)
    got = []
    for _ in range(3):
        for images, *_ in spawned:
            assert images.is_shared()
            got.append(images)
    assert len(got) == len(reference) and all(torch.equal(a, b) for a, b in zip(got, reference))


FILE_SYSTEM_SHARING = r"""
import glob, os, sys, time, gc
import torch, torch.multiprocessing
torch.multiprocessing.set_sharing_strategy("file_system")
from torch.utils.data import DataLoader
from yolo_data import LoadImagesAndLabels, create_dataloader
pids = sys.argv[2]
def record(worker_id):
    with open(pids, "a") as f:
        f.write(f"{os.getpid()}\n")
dataset = LoadImagesAndLabels(sys.argv[1], 64, 4, augment=True)
plain = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=dataset.collate_fn, worker_init_fn=record)
for epoch in range(3):  # workers that end with every pass
    for images, targets, paths, shapes in plain:
        pass
for _ in range(2):  # loaders built and deleted
    loader, ds = create_dataloader(sys.argv[1], 64, 4, 32, augment=True, workers=2, split="train")
    for images, targets, paths, shapes in loader:
        pass
    for w in loader._iterator._workers:
        record_pid = w.pid
        with open(pids, "a") as f:
            f.write(f"{record_pid}\n")
    del loader, ds
del images, targets
gc.collect()
workers = set(open(pids).read().split())
def left():
    return [f for f in glob.glob("/dev/shm/torch_*") if f.split("_")[1] in workers]
# the last holder's close unlinks a buffer, and torch_shm_manager those of a client that ended: wait
# until that happened, at most argv[3] seconds, then say what is left
deadline = time.monotonic() + float(sys.argv[3])
while left() and time.monotonic() < deadline:
    time.sleep(0.05)
print(len(workers), len(left()))
"""


def test_under_file_system_sharing_nothing_of_a_worker_outlives_it(tmp_path):
    """torch's 'file_system' strategy names each shared buffer /dev/shm/torch_<pid of its maker>_...; once
    the workers have ended and the loop dropped its batches, none of theirs is left (reads /dev/shm only)."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    repo = Path(__file__).resolve().parents[2]
    r = run_all([sys.executable, "-c", FILE_SYSTEM_SHARING, str(repo / "data" / "sample.yaml"),
                 str(tmp_path / "pids"), "120"], timeout=300, capture_output=True, text=True, cwd=repo)
    assert r.returncode == 0, r.stderr[-3000:]
    workers, left = map(int, r.stdout.split()[-2:])
    assert workers == 10 and left == 0


def test_the_shared_memory_estimate_holds_the_largest_rect_batch_of_a_large_pad(tmp_path, monkeypatch):
    """rect with pad=2.0 at imgsz 64: batches of 128 x 128 (ceil(64 / 32 + 2) strides), larger than the
    imgsz + stride (96) the estimate used to assume; /dev/shm for the workers and the RAM cache's
    reserve were then planned too small.  Both estimates create_dataloader makes must hold, per batch
    buffer, the largest batch the loader really gives."""
    estimates = []  # (workers, local_ranks, bytes) of every estimate made while building the loader
    real = yolo_data.runtime.room.shm_bytes_for_batches

    def recorded(workers, batch_size, imgsz, stride, local_ranks=1, *args, **kwargs):
        n = real(workers, batch_size, imgsz, stride, local_ranks, *args, **kwargs)
        bands = kwargs.get("channels", args[1] if len(args) > 1 else 3)
        estimates.append((workers, local_ranks, n * 3 // bands))  # as for the dataset's 3 bands
        return n

    monkeypatch.setattr(yolo_data.runtime.room, "shm_bytes_for_batches", recorded)  # fit_workers_to_shm's
    monkeypatch.setattr(yolo_data.build, "shm_bytes_for_batches", recorded)  # the RAM cache reserve's
    shapes = [(64, 48), (48, 64), (64, 64), (64, 32)]
    data = make_dataset(tmp_path / "ds", [(f"{k}.jpg", shapes[k % 4], "0 0.5 0.5 0.2 0.2\n") for k in range(8)])
    loader, ds = create_dataloader(str(data), 64, 4, 32, rect=True, pad=2.0, workers=1, split="train",
                                   cache_dir=tmp_path / "c")
    largest = max(images.numel() * images.element_size() for images, *_ in loader)
    assert int(ds.batch_shapes.max()) == 128 and largest == 4 * 3 * 128 * 128  # what the pad makes
    assert len(estimates) >= 2 and all(w > 0 for w, _, _ in estimates), estimates
    for workers, local_ranks, n in estimates:
        per_buffer = n // (workers * local_ranks * bm.POOL_SIZE)
        assert per_buffer >= largest, (f"the estimate leaves {per_buffer:,} bytes per batch buffer, but the "
                                       f"largest batch has {largest:,}")


def test_a_ram_caches_reserve_for_the_batches_counts_the_datasets_bands(tmp_path, monkeypatch):
    """The room a RAM image cache leaves for the workers' batches is that of batches of the dataset's
    channels, known only once its yaml is read: 10 bands need 10/3 of a colour dataset's room."""
    import yolo_data.items.parts
    specs = []
    real = yolo_data.items.parts.open_or_build
    monkeypatch.setattr(yolo_data.items.parts, "open_or_build", lambda spec, *a: specs.append(spec) or real(spec, *a))
    data = make_dataset(tmp_path / "ds", [(f"{k}.png", (64, 48), "0 0.5 0.5 0.2 0.2\n") for k in range(4)])
    for channels in (3, 1):  # colour PNGs read as 3 bands, or as 1 (luma)
        create_dataloader(str(data), 64, 2, 32, workers=1, split="train", cache="ram", channels=channels,
                          cache_dir=tmp_path / f"c{channels}", ram_dir=str(tmp_path / f"shm{channels}"))
    colour, gray = specs
    assert colour.channels == 3 and gray.channels == 1 and colour.reserve_bytes > 0
    assert colour.reserve_bytes == 3 * gray.reserve_bytes == yolo_data.runtime.room.shm_bytes_for_batches(
        1, 2, 64, 32, 1, 0.0, 3)
