"""cache='ram' and cache='disk': the same items as without a cache, one file, reused and invalidated."""
import logging
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import popen_all
from yolo_data import create_dataloader
from yolo_data.items import imagecache
from yolo_data.runtime import room
from yolo_data.dataset import LoadImagesAndLabels, YoloDataset

HIGH = Path(__file__).resolve().parents[2] / "data" / "hyps" / "hyp.scratch-high.yaml"


def items(ds):
    return [(ds[i][0], ds[i][1]) for i in range(len(ds))]


@pytest.mark.parametrize("augment", [False, True])
@pytest.mark.parametrize("mode", ["ram", "disk"])
def test_cached_items_equal_uncached(small_dataset, mode, augment):
    kw = dict(split="train", augment=augment, hyp=str(HIGH))
    plain = LoadImagesAndLabels(str(small_dataset), 64, 4, **kw)
    cached = LoadImagesAndLabels(str(small_dataset), 64, 4, cache_images=mode, **kw)
    assert cached.image_cache is not None and len(cached.image_cache) == len(plain)
    for (ia, ta), (ib, tb) in zip(items(plain), items(cached)):
        assert torch.equal(ia, ib) and torch.equal(ta, tb)
    again = pickle.loads(pickle.dumps(cached.image_cache))  # what a spawned worker does
    assert np.array_equal(again.get(2)[0], cached.image_cache.get(2)[0])


def test_disk_cache_is_one_file_beside_the_labels_reused_then_rebuilt_after_an_edit(small_dataset):
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk")
    files = list((small_dataset.parent / "labels").glob("*.imgcache"))
    assert files == [ds.image_cache.path] and files[0].name == "train-images-64.imgcache"
    assert not list((small_dataset.parent / "images").rglob("*.npy"))
    mtime = files[0].stat().st_mtime_ns
    LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk")
    assert files[0].stat().st_mtime_ns == mtime  # reused, not rewritten
    import cv2
    img = small_dataset.parent / "images" / "train" / "a.jpg"
    cv2.imwrite(str(img), np.full((48, 64, 3), 7, np.uint8))  # same size, new pixels
    ds2 = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk")
    assert files[0].stat().st_mtime_ns != mtime and list((small_dataset.parent / "labels").glob("*.imgcache")) == files
    i = [Path(f).name for f in ds2.im_files].index("a.jpg")
    assert abs(int(ds2.load_image(i)[0].mean()) - 7) <= 1  # the new pixels, from the rebuilt cache


def test_a_linear_resize_disk_cache_is_named_for_it(small_dataset):
    """The name says what its pixels depend on: '-linear' for linear interpolation, also for an
    evaluation that resizes linearly (as Ultralytics validates), not for the augmentation."""
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk", linear_resize=True)
    assert not ds.augment and ds.image_cache.path.name == "train-images-64-linear.imgcache"
    cached = [ds.load_image(i)[0] for i in range(len(ds))]
    plain = LoadImagesAndLabels(str(small_dataset), 64, split="train", linear_resize=True)
    assert all(np.array_equal(c, plain.load_image(i)[0]) for i, c in enumerate(cached))


def test_ram_cache_has_no_name_and_lives_in_the_shared_memory_folder(small_dataset, tmp_path, monkeypatch):
    ram = tmp_path / "shm"
    ram.mkdir()
    monkeypatch.setenv("YOLO_DATA_SHM_DIR", str(ram))
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram")
    st = os.fstat(ds.image_cache.fd)
    assert ds.image_cache.anonymous and st.st_nlink == 0 and st.st_dev == os.stat(ram).st_dev
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert not list(ram.iterdir())  # nothing to leave behind, nothing another user could open


def test_not_enough_memory_falls_back_to_reading_files(small_dataset, monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(room, "free_bytes", lambda folder, ram=False: 1000)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        loader, ds = create_dataloader(str(small_dataset), 64, 2, 32, cache="ram", workers=0, split="train",
                                       ram_cache_dir=tmp_path)
    assert ds.image_cache is None
    assert any("MiB free" in r.message and "no image cached" in r.message for r in caplog.records)
    assert sum(len(b[0]) for b in loader) == 6


def test_only_some_images_fit_then_those_are_cached_and_the_rest_read_from_files(small_dataset, monkeypatch,
                                                                                  caplog, tmp_path):
    plain = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    sizes = imagecache.planned_sizes(plain.store.shapes_hw, 64)
    budget = int(sizes[:4].prod(1).sum() * 3) + 100  # the first four images and a little more
    monkeypatch.setattr(room, "free_bytes", lambda folder, ram=False: int(budget / (1 - imagecache.SAFETY)) + 1)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram", ram_dir=tmp_path)
    assert [bool(v) for v in ds.image_cache.ok] == [True] * 4 + [False] * 2
    assert any("cached 4 of 6 images" in r.message for r in caplog.records)
    for (ia, ta), (ib, tb) in zip(items(plain), items(ds)):
        assert torch.equal(ia, ib) and torch.equal(ta, tb)


def test_unreadable_image_at_build_is_marked_and_read_from_its_file_later(small_dataset, tmp_path, caplog):
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    i = [Path(f).name for f in ds.im_files].index("b.jpg")
    victim = Path(ds.im_files[i])
    data = victim.read_bytes()
    victim.write_bytes(b"garbage")  # broken after the scan, before the cache is built
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        spec = imagecache.ImageCacheSpec("disk", 64, linear=False, disk_files=(tmp_path / "x.imgcache",), workers=2)
        cache = imagecache.open_or_build(spec, ds.store, "fp")
    assert [bool(v) for v in cache.ok] == [k != i for k in range(len(ds))]
    assert cache.get(i) is None and any("b.jpg" in r.message and "not cached" in r.message for r in caplog.records)
    victim.write_bytes(data)
    ds.image_cache = cache
    assert ds.load_image(i)[0].shape[:2] == (64, 48)  # from the file, as if uncached
    assert np.array_equal(ds.load_image(0)[0], cache.get(0)[0])


def test_ram_cache_without_o_tmpfile_is_unlinked_at_once(small_dataset, tmp_path, monkeypatch):
    """Filesystems that refuse O_TMPFILE: a unique name, removed before a single pixel is written."""
    from yolo_data.storage import container
    real_open = os.open

    def no_tmpfile(path, flags, *a):
        if flags & getattr(os, "O_TMPFILE", 0) == getattr(os, "O_TMPFILE", -1):
            raise OSError(95, "Operation not supported")
        return real_open(path, flags, *a)

    monkeypatch.setattr(container.os, "open", no_tmpfile)
    ram = tmp_path / "shm"
    ram.mkdir()
    seen = []
    real_reserve = container.reserve
    monkeypatch.setattr(container, "reserve", lambda fd, size, folder: (
        seen.append(os.listdir(folder)) if Path(folder) == ram else None, real_reserve(fd, size, folder)))
    plain = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram", ram_dir=ram)
    assert seen == [[]] and ds.image_cache.anonymous and not list(ram.iterdir())
    assert all(np.array_equal(ds.image_cache.get(i)[0], plain.load_image(i)[0]) for i in range(len(ds)))


def test_killed_disk_cache_writer_leaves_a_temporary_that_the_next_run_removes(small_dataset):
    """SIGKILL mid-build: the cache name is absent or whole, and the writer's temporary goes next run."""
    code = ("import time, sys; from yolo_data import imagecache; from yolo_data.dataset import LoadImagesAndLabels, YoloDataset\n"
            "real = imagecache.load_image\n"
            "def slow(p, *a):\n    print('building', flush=True); time.sleep(30); return real(p, *a)\n"
            "imagecache.load_image = slow\n"
            f"LoadImagesAndLabels({str(small_dataset)!r}, 64, split='train', cache_images='disk', scan_workers=1)\n")
    with popen_all([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                   cwd=str(Path(__file__).resolve().parents[2])) as p:
        assert p.stdout.readline().strip() == "building"
        labels = small_dataset.parent / "labels"
        temps = list(labels.glob(".train-images-64.imgcache.*.tmp"))
        assert len(temps) == 1 and temps[0].stat().st_size > 0  # reserved whole while being written
        p.kill()
        p.wait(30)
    assert temps[0].exists() and not (labels / "train-images-64.imgcache").exists()
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk")
    assert ds.image_cache.path == labels / "train-images-64.imgcache" and not temps[0].exists()
    assert not list(labels.glob("*.tmp"))


def _cached_in_worker(ds_and_index):
    ds, i = ds_and_index
    return ds.image_cache is not None and ds.image_cache.get(i) is not None


def test_spawned_workers_reopen_the_ram_cache_through_the_parent(small_dataset, tmp_path):
    """A RAM cache has no name: a spawned worker (macOS-style start, or a user's own DataLoader)
    reopens it through /proc/<parent>/fd and checks it is the same file."""
    plain = LoadImagesAndLabels(str(small_dataset), 64, 2, split="train")
    ds = LoadImagesAndLabels(str(small_dataset), 64, 2, split="train", cache_images="ram", ram_dir=tmp_path)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context="spawn",
                                         collate_fn=YoloDataset.collate_fn)
    got = torch.cat([imgs for imgs, *_ in loader])
    want = torch.cat([imgs for imgs, *_ in torch.utils.data.DataLoader(plain, batch_size=2,
                                                                       collate_fn=YoloDataset.collate_fn)])
    assert torch.equal(got, want)
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(_cached_in_worker, [(ds, 0)]) == [True]  # from the cache, not from the files


def test_room_taken_between_planning_and_reserving_is_planned_again(small_dataset, tmp_path, monkeypatch, caplog):
    """Another program fills the folder after the plan: the reservation fails with a message naming
    the sizes, the plan is made again with the room left, and what fits is cached."""
    from yolo_data.storage import container
    plain = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    sizes = imagecache.planned_sizes(plain.store.shapes_hw, 64).prod(1) * 3
    frees = iter([10 ** 9, int((sizes[:3].sum() + 100) / (1 - imagecache.SAFETY)) + 1])
    monkeypatch.setattr(room, "free_bytes", lambda folder, ram=False: next(frees))
    real_reserve, calls = container.reserve, []

    def reserve(fd, size, folder):
        calls.append(size)
        if len(calls) == 1 and Path(folder) == tmp_path:
            raise container.NoSpaceError(28, f"{size} bytes needed in {folder}, 0 free")
        return real_reserve(fd, size, folder)

    monkeypatch.setattr(container, "reserve", reserve)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram", ram_dir=tmp_path)
    text = " | ".join(r.message for r in caplog.records)
    assert "could not reserve the space" in text and "planning again" in text and "cached 3 of 6 images" in text
    assert [bool(v) for v in ds.image_cache.ok] == [True] * 3 + [False] * 3


def test_planning_lock_held_elsewhere_delays_but_never_blocks(small_dataset, tmp_path, monkeypatch, caplog):
    import fcntl
    monkeypatch.setattr(room, "LOCK_WAIT_SECONDS", 0.3)
    holder = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # e.g. another user's process on /dev/shm
    try:
        with caplog.at_level(logging.INFO, logger="yolo_data"):
            ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram", ram_dir=tmp_path)
    finally:
        os.close(holder)
    assert ds.image_cache is not None and ds.image_cache.ok.all()
    assert any("stayed locked" in r.message for r in caplog.records)
