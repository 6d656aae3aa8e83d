"""Image caches under the conditions people train in: signals, small /dev/shm, several jobs, DDP ranks,
other users, read-only datasets, damaged and crafted files.  Real processes throughout.

Tests that need a small tmpfs mount one in a private mount namespace (``unshare -m``) and skip where
the machine refuses that; the machine's own /dev/shm is never filled or cleaned.
"""
import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

import crafting
from conftest import as_nobody, make_dataset, run_all, tree_digest
from procs import run_tree
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.labels.split import load_split

DRIVER = Path(__file__).resolve().parents[1].joinpath("ramcache_driver.py")
ROOT = Path(__file__).resolve().parents[2]


def photo_dataset(root: Path, n: int = 40) -> Path:
    """n images of 320 x 240: 230,400 bytes each when cached at 320 (9.2 MB for 40)."""
    items = [(f"im{i:03d}.jpg", (320, 240), f"{i % 3} 0.5 0.5 0.2 0.2\n") for i in range(n)]
    make_dataset(root, items)
    return root / "images" / "train"


def driver(*args, tmpfs=None, timeout=300):
    """Run the driver, in a private mount namespace with ``tmpfs`` = {folder: size} when given."""
    cmd = [sys.executable, str(DRIVER), *map(str, args)]
    if tmpfs:
        mounts = " && ".join(f"mount -t tmpfs -o size={size},mode=1777 tmpfs {folder}" for folder, size in tmpfs.items())
        cmd = ["unshare", "-m", "sh", "-c", f'{mounts} && exec "$0" "$@"', *cmd]
    env = {k: v for k, v in os.environ.items() if k != "YOLO_DATA_SHM_DIR"}
    r = run_all(cmd, timeout, capture_output=True, text=True, env=env, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def private_mounts():
    """Skip (cleanly) where this machine does not allow a private mount namespace with a tmpfs."""
    try:
        r = run_tree(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], 30,
                     capture_output=True)  # a timeout here means skip, not fail
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"unshare not available: {e}")
    if r.returncode != 0:
        pytest.skip(f"private mount namespaces are refused here: {r.stderr.decode()[-200:]}")


# -- gone however the job ends ------------------------------------------------------------------------
@pytest.mark.parametrize("sig", ["TERM", "KILL"])
@pytest.mark.parametrize("when", ["build", "after"])
def test_killed_builder_leaves_nothing_in_the_ram_folder(tmp_path, sig, when):
    data = photo_dataset(tmp_path / "ds")
    ram = tmp_path / "shm"
    ram.mkdir()
    r = driver("kill", data, ram, sig, when)
    assert r["rc"] == -getattr(signal, "SIG" + sig), r["stderr"]
    assert r["marker"].startswith("{" if when == "after" else "building"), r
    assert r["names_during"] == [] and r["names_after"] == []  # never a name: nothing to leak or to open


@pytest.mark.parametrize("sig", ["TERM", "KILL"])
@pytest.mark.parametrize("when", ["build", "after"])
def test_killed_builder_gives_the_memory_back(private_mounts, tmp_path, sig, when):
    data = photo_dataset(tmp_path / "ds")
    ram = tmp_path / "shm"
    ram.mkdir()
    r = driver("kill", data, ram, sig, when, tmpfs={ram: "32m"})
    assert r["rc"] == -getattr(signal, "SIG" + sig), r["stderr"]
    assert r["during"] - r["before"] >= 40 * 230_400  # reserved whole before the first pixel
    assert r["after"] == r["before"] and r["names_after"] == []


def test_two_jobs_building_at_once_on_a_small_tmpfs_both_run(private_mounts, tmp_path):
    """Each cache (9.2 MB) fits alone in the 12 MB tmpfs, not both.  Both start planning at the same
    moment: one plans and reserves first and gets it all, the other then plans with what is left;
    neither dies (before: both died of SIGBUS and leaked their temporaries; and without the planning
    lock both reservations could fail on tmpfs, leaving neither job a cache)."""
    data = photo_dataset(tmp_path / "ds")
    ram = tmp_path / "shm"
    ram.mkdir()
    r = driver("two", data, ram, tmpfs={ram: "12m"})
    results = [b["result"] for b in r["builders"]]
    assert [b["rc"] for b in r["builders"]] == [0, 0], [b["stderr"] for b in r["builders"]]
    cached = sorted(res["cached"] for res in results)
    assert cached[1] == 40 and 0 < cached[0] < 40, cached
    loser = r["builders"][[res["cached"] for res in results].index(cached[0])]["stderr"]
    assert f"cached {cached[0]} of 40 images" in loser and "could not reserve" not in loser
    assert r["after"] == r["before"] and r["names_after"] == []


def test_dev_shm_too_small_for_the_batches_uses_fewer_workers_and_says_how_to_fix_it(private_mounts, tmp_path):
    data = photo_dataset(tmp_path / "ds", 24)
    r = driver("shm", data, "none", tmpfs={"/dev/shm": "8m"})
    assert r["images"] == r["len"] == 24 and r["workers"] == 0
    msg = [m for m in r["messages"] if "--shm-size" in m]
    assert msg and "--ipc=host" in msg[0] and "using 0 workers" in msg[0] and "/dev/shm has 8 MiB free" in msg[0]


def test_ram_cache_leaves_room_for_the_batches(private_mounts, tmp_path):
    """24 MB /dev/shm: the cache (9.2 MB) fits, but with 2 workers' batches (about 15 MB) it would not:
    part of it is cached, the workers keep their room, every batch arrives."""
    data = photo_dataset(tmp_path / "ds")
    r = driver("shm", data, "ram", tmpfs={"/dev/shm": "24m"})
    assert r["images"] == r["len"] == 40 and r["workers"] == 2
    assert 0 < r["cached"] < 40, r
    assert any(f"cached {r['cached']} of 40 images" in m and "shared-memory batches" in m for m in r["messages"])


# -- freed at `del` -------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_del_loader_and_dataset_frees_them_and_the_ram_cache_without_the_garbage_collector(tmp_path, workers):
    """Before: the image source held a bound method of the dataset, a cycle that kept the dataset and
    its RAM cache until the cyclic collector ran.  With that collector off, both go at `del`, and the
    persistent workers (which hold the cache's descriptor) end with the loader."""
    import gc
    import multiprocessing
    import weakref
    from yolo_data import create_dataloader
    data = photo_dataset(tmp_path / "ds", 8)
    gc.collect()
    gc.disable()
    try:
        children = {p.pid for p in multiprocessing.active_children()}
        loader, dataset = create_dataloader(data, 64, 4, 32, augment=True, shuffle=True, workers=workers,
                                            quad=True, cache="ram", ram_cache_dir=tmp_path)
        assert loader.num_workers == workers and dataset.image_cache is not None
        next(iter(loader))
        refs = [weakref.ref(o) for o in (loader, dataset, dataset.image_cache, dataset.images, loader.sampler)]
        del loader, dataset
        assert [r() is None for r in refs] == [True] * len(refs)
        assert {p.pid for p in multiprocessing.active_children()} <= children
    finally:
        gc.enable()


@pytest.mark.parametrize("workers", [0, 2])
def test_an_evolve_loop_caches_every_image_each_generation(private_mounts, tmp_path, workers):
    """16 MB tmpfs: one generation's cache (9.2 MB) and its workers' room fit, two caches do not.
    Before: the previous generation's cache was still held (no garbage collection between
    generations), and the next one cached only part of the images, then none."""
    data = photo_dataset(tmp_path / "ds")
    ram = tmp_path / "shm"
    ram.mkdir()
    r = driver("generations", data, ram, workers, tmpfs={ram: "16m"})
    gens = r["generations"]
    assert [g["workers"] for g in gens] == [workers] * 3
    assert [(g["cached"], g["images"], g["freed"]) for g in gens] == [(40, 40, True)] * 3, gens
    assert [g["used_after"] for g in gens] == [r["before"]] * 3


def test_ranks_started_without_local_world_size_leave_room_for_every_ranks_batches(private_mounts, tmp_path):
    """srun and mpirun set no LOCAL_WORLD_SIZE.  4 ranks, 1 worker each (up to about 4.5 MB of batches
    per rank), and 60 images (13.8 MB cached) in a 22 MB /dev/shm.  Planned for one rank, the whole
    cache went in and left about 8 MB, less than 4 ranks' batches: ranks died with "No space left on
    device".  Planned for the node's 4 ranks (asked of the process group), part of the cache goes in
    and every rank completes the epoch.  A rank may still run without its worker (saying so): the
    workers are fitted to the room free when each rank gets there, which the batches of ranks that
    started first have already taken from."""
    data = photo_dataset(tmp_path / "ds", 60)
    r = driver("ranks", data, 4, tmpfs={"/dev/shm": "22m"})
    ranks = r["ranks"]
    assert [k["len"] for k in ranks] == [60] * 4, ranks
    assert sum(k["images"] for k in ranks) == 60  # every rank's share of the epoch arrived
    cached = ranks[0]["cached"]
    assert cached is not None and 0 < cached < 60 and all(k["cached"] == cached for k in ranks), ranks
    assert any(f"cached {cached} of 60 images" in m and "shared-memory batches" in m for m in ranks[0]["messages"])
    for k in ranks:
        assert k["workers"] == 1 or any("using 0 workers" in m and "on each of 4 ranks" in m for m in k["messages"]), k


# -- one copy per node, shared by the ranks -----------------------------------------------------------
def _rank(rank, world, port, data, ram, out_dir, channels=None):
    from datetime import timedelta
    import torch.distributed as dist
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        from yolo_data import create_dataloader
        loader, ds = create_dataloader(data, 320, 4, 32, rank=rank, workers=1, cache="ram", ram_cache_dir=ram,
                                       channels=channels)
        c = ds.image_cache
        st = os.fstat(c.fd)
        hw = c.hw.astype(np.int64)
        assert c.nbytes == int((hw[:, 0] * hw[:, 1]).sum()) * (channels or 3)
        h = hashlib.sha256()
        for i in range(len(ds)):
            h.update(c.get(i)[0].tobytes())
        batches = [hashlib.sha256(imgs.numpy().tobytes()).hexdigest() for imgs, *_ in loader]
        assert all(imgs.shape[1] == (channels or 3) for imgs, *_ in loader)
        Path(out_dir, f"{rank}.json").write_text(json.dumps({
            "ino": [st.st_dev, st.st_ino], "nlink": st.st_nlink, "pixels": h.hexdigest(), "batches": batches,
            "names": os.listdir(ram)}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("channels", [None, 10])
def test_ranks_of_a_node_share_one_anonymous_file(tmp_path, channels):
    """Colour images, or 10-band TIFFs (one band a page): one copy of every band per node."""
    from procs import run
    data = photo_dataset(tmp_path / "ds", 12)
    if channels:
        for jpg in sorted(data.glob("*.jpg")):
            bgr = cv2.imread(str(jpg))
            cv2.imwritemulti(str(jpg.with_suffix(".tif")), [bgr[..., k % 3] ^ np.uint8(k) for k in range(channels)])
            jpg.unlink()
    ram = tmp_path / "shm"
    ram.mkdir()
    run(_rank, 2, str(data), str(ram), str(tmp_path), channels)
    r0, r1 = (json.loads((tmp_path / f"{k}.json").read_text()) for k in range(2))
    assert r0["ino"] == r1["ino"] and r0["nlink"] == r1["nlink"] == 0  # the same file, without a name
    assert r0["pixels"] == r1["pixels"] and r0["names"] == r1["names"] == []
    assert len(r0["batches"]) == len(r1["batches"]) >= 1  # workers (forked) read it too
    assert not list(ram.iterdir())


# -- other users ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def public_tmp():
    """A temp folder that user nobody can enter (pytest's own is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="yolo_data_users_"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        for p in [base, *base.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o755)
        shutil.rmtree(base, ignore_errors=True)


def _try_open(path):
    try:
        with open(path, "rb") as f:
            f.read(16)
        return "opened"
    except PermissionError:
        return "denied"
    except OSError as e:
        return f"{type(e).__name__}"


def _list(folder):
    return sorted(os.listdir(folder))


def test_another_user_can_neither_read_nor_find_the_ram_cache(small_dataset):
    with public_tmp() as base:
        ram = base / "shm"
        ram.mkdir()
        os.chmod(ram, 0o1777)
        ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram", ram_dir=ram)
        proc = f"/proc/{os.getpid()}/fd/{ds.image_cache.fd}"
        assert _try_open(proc) == "opened"  # its owner can
        assert as_nobody(_try_open, proc) == "denied"
        assert as_nobody(_list, ram) == []


def _plant(folder, name):
    """As another user: put junk under every name an older yolo_data would have looked for."""
    for n in [name, "yolo_data-" + "0" * 32 + ".imgcache"]:
        Path(folder, n).write_bytes(b"\0" * 4096)
    return _list(folder)


def test_files_planted_by_another_user_are_never_used(small_dataset):
    with public_tmp() as base:
        ram = base / "shm"
        ram.mkdir()
        os.chmod(ram, 0o1777)
        planted = as_nobody(_plant, ram, "anything.imgcache")
        assert len(planted) == 2, planted
        plain = LoadImagesAndLabels(str(small_dataset), 64, split="train")
        ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram", ram_dir=ram)
        for i in range(len(ds)):
            assert np.array_equal(ds.image_cache.get(i)[0], plain.load_image(i)[0])


def _build_disk_planted(data, shared):
    """As nobody: build a disk cache in a shared folder, then zero its pixels (the checksum does not
    cover pixels: only the owner check can refuse this file)."""
    ds = LoadImagesAndLabels(data, 64, split="train", cache_images="disk", cache_dir=shared)
    path = ds.image_cache.path
    off = crafting.header_of(path)["payload"][0]
    raw = bytearray(path.read_bytes())
    raw[off:-4] = bytes(len(raw) - 4 - off)
    path.write_bytes(bytes(raw))
    os.chmod(path, 0o644)
    return str(path)


def test_disk_cache_of_another_user_is_not_trusted_and_ours_is_private(small_dataset, caplog):
    with public_tmp() as base:
        data = base / "ds"
        shutil.copytree(small_dataset.parent, data)
        for p in [data, *data.rglob("*")]:
            os.chmod(p, 0o777 if p.is_dir() else 0o666)
        shared = base / "shared_cache"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        planted = as_nobody(_build_disk_planted, str(data / "data.yaml"), str(shared))
        assert not planted.startswith("error"), planted
        with caplog.at_level(logging.WARNING, logger="yolo_data"):
            ds = LoadImagesAndLabels(str(data / "data.yaml"), 64, split="train", cache_images="disk", cache_dir=shared)
        assert str(ds.image_cache.path) == planted
        assert any("owned by another user" in r.message for r in caplog.records)
        plain = LoadImagesAndLabels(str(data / "data.yaml"), 64, split="train")
        for i in range(len(ds)):
            assert np.array_equal(ds.image_cache.get(i)[0], plain.load_image(i)[0])  # rebuilt, not zeros
        assert os.stat(planted).st_uid == os.geteuid() and (os.stat(planted).st_mode & 0o777) == 0o600
        assert as_nobody(_try_open, planted) == "denied"


def _disk_twice(data, user_cache):
    os.environ["YOLO_DATA_CACHE_DIR"] = user_cache
    out = []
    for _ in range(2):
        ds = LoadImagesAndLabels(data, 64, split="train", cache_images="disk")
        out.append([str(ds.image_cache.path), os.stat(ds.image_cache.path).st_mtime_ns,
                    str(ds.split_labels.cache_file), ds.split_labels.built])
    return out


def test_read_only_dataset_with_an_admins_label_cache_and_cache_disk(small_dataset):
    with public_tmp() as base:
        data = base / "ds"
        shutil.copytree(small_dataset.parent, data)
        load_split(str(data / "images" / "train"), nc=3)  # the admin builds the label cache
        user_cache = base / "user_cache"
        user_cache.mkdir()
        os.chmod(user_cache, 0o777)
        for p in [data, *data.rglob("*")]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        before = tree_digest(data)
        out = as_nobody(_disk_twice, str(data / "data.yaml"), str(user_cache))
        assert isinstance(out, list), out
        (img1, mtime1, lab1, built1), (img2, mtime2, lab2, built2) = out
        assert lab1 == lab2 == str(data / "labels" / "train.yolo_data.cache") and not built1 and not built2
        assert img1 == img2 and Path(img1).parent == user_cache and mtime1 == mtime2  # built once, reused
        assert tree_digest(data) == before


def test_disk_caches_of_two_datasets_in_the_user_folder_have_their_own_names(tmp_path, caplog):
    a = make_dataset(tmp_path / "a", [("x.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n")])
    b = make_dataset(tmp_path / "b", [("x.jpg", (48, 64), "1 0.5 0.5 0.2 0.2\n")])
    (tmp_path / "a" / "labels").rename(tmp_path / "a" / "labels_ro")  # no labels folder: caches go to the user folder
    (tmp_path / "b" / "labels").rename(tmp_path / "b" / "labels_ro")
    da = LoadImagesAndLabels(str(a), 64, split="train", cache_images="disk")
    db = LoadImagesAndLabels(str(b), 64, split="train", cache_images="disk")
    assert da.image_cache.path != db.image_cache.path
    assert da.image_cache.path.parent == db.image_cache.path.parent
    mtime = da.image_cache.path.stat().st_mtime_ns
    again = LoadImagesAndLabels(str(a), 64, split="train", cache_images="disk")
    assert again.image_cache.path == da.image_cache.path and again.image_cache.path.stat().st_mtime_ns == mtime


# -- damaged and crafted image caches ---------------------------------------------------------------------
def _swap_two(a):
    o = a["offsets"]
    o[0], o[1] = o[1], o[0]


DAMAGE = {
    "offsets swapped (valid checksum)": dict(arrays=_swap_two),
    "offset negative (valid checksum)": dict(arrays=lambda a: a["offsets"].__setitem__(2, -100)),
    "offset past the end (valid checksum)": dict(arrays=lambda a: a["offsets"].__setitem__(2, 1 << 40)),
    "size changed (valid checksum)": dict(arrays=lambda a: a["hw"].__setitem__((0, 0), 10)),
    "count beyond the images (valid checksum)": dict(header=lambda h: h["meta"].update(count=99)),
    "index byte flipped": dict(arrays=lambda a: a["offsets"].__setitem__(1, a["offsets"][1] ^ 64), fix_crc=False),
    "header offset into the header (valid checksum)": dict(header=lambda h: h["arrays"]["hw"].update(offset=64)),
}


@pytest.mark.parametrize("case", sorted(DAMAGE) + ["truncated", "a label cache in its place"])
def test_damaged_or_crafted_disk_cache_is_reported_and_rebuilt(small_dataset, case, caplog):
    plain = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    first = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk")
    path = first.image_cache.path
    del first
    if case == "truncated":
        path.write_bytes(path.read_bytes()[:-1000])
    elif case == "a label cache in its place":
        shutil.copy(small_dataset.parent / "labels" / "train.yolo_data.cache", path)
    else:
        crafting.rewrite(path, **DAMAGE[case])
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk")
    assert any(str(path) in r.message and "rebuilding" in r.message for r in caplog.records)
    for i in range(len(ds)):
        assert np.array_equal(ds.image_cache.get(i)[0], plain.load_image(i)[0])


def test_leftovers_are_listed_and_removed_by_the_cli(tmp_path):
    import socket
    ram = tmp_path / "shm"
    user = tmp_path / "user"
    ram.mkdir()
    user.mkdir()
    old = ram / ("yolo_data-" + "a" * 32 + ".imgcache")  # a named RAM cache of an older yolo_data
    old.write_bytes(b"x" * 100)
    host = socket.gethostname()
    dead = user / f".train-0123.yolo_data.cache.{host}.999999999.abcd.yolo_data.tmp"  # a killed writer's
    dead.write_bytes(b"x")
    alive = user / f".train-0123.yolo_data.cache.{host}.{os.getpid()}.abcd.yolo_data.tmp"  # a running writer's
    alive.write_bytes(b"x")
    older = ram / ".train.yolo_data.cache.otherhost.4242.abcd.tmp"  # an older yolo_data's, from another host
    older.write_bytes(b"YOLODATA" + b"\0" * 100)
    notes = ram / ".notes.123.x.tmp"  # the user's own, of the same shape
    notes.write_bytes(b"my notes")
    day_ago = time.time() - 2 * 24 * 3600
    for p in (older, notes):
        os.utime(p, (day_ago, day_ago))
    env = dict(os.environ, YOLO_DATA_SHM_DIR=str(ram), YOLO_DATA_CACHE_DIR=str(user))
    tool = [sys.executable, str(ROOT / "tools" / "build_cache.py")]
    r = run_all(tool + ["--leftovers"], 60, capture_output=True, text=True, env=env)
    assert r.returncode == 0 and all(str(p) in r.stdout for p in (old, dead, older)), r.stdout
    assert str(alive) not in r.stdout and str(notes) not in r.stdout
    assert old.exists() and dead.exists() and older.exists()  # listing removes nothing
    r = run_all(tool + ["--remove-leftovers"], 60, capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "removed" in r.stdout
    assert not old.exists() and not dead.exists() and not older.exists() and alive.exists()
    assert notes.read_bytes() == b"my notes"
