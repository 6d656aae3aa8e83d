#!/usr/bin/env python
"""Runs RAM-cache scenarios with real processes and signals; prints one JSON line of results.

Used by tests/items/test_ram_cache_lifecycle.py, sometimes inside a private mount namespace (``unshare -m``)
where a small tmpfs stands in for /dev/shm, so the machine's own /dev/shm is never filled or touched.

    ramcache_driver.py kill  DATA RAM_DIR SIGNAL WHEN   # WHEN: build | after
    ramcache_driver.py two   DATA RAM_DIR               # two builders at once, racing for the room
    ramcache_driver.py shm   DATA                        # training loader with a /dev/shm too small
    ramcache_driver.py generations DATA RAM_DIR WORKERS  # a loop building a new loader 3 times, gc off
    ramcache_driver.py ranks DATA WORLD                  # WORLD ranks started as srun does, cache='ram'
    ramcache_driver.py child-build DATA RAM_DIR SLOW BARRIER   # (internal) one builder
"""
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

IMGSZ = 320


def used_bytes(folder) -> int:
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def child_build(data, ram_dir, slow, barrier):
    """One builder: cache='ram' in ram_dir.  ``slow``: seconds per image decode (so a signal lands
    mid-build).  ``barrier``: a folder; both builders wait for each other there, then plan and reserve
    their room at the same moment (two jobs starting together)."""
    from yolo_data.items import imagecache
    from yolo_data.runtime import room
    from yolo_data.dataset import LoadImagesAndLabels
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    slow = float(slow)
    real_read, real_lock = imagecache.load_image, room.planning_lock

    def read(path, *args):
        if not getattr(read, "said", False):
            read.said = True
            print("building", flush=True)
        time.sleep(slow)
        return real_read(path, *args)

    def lock(folder):
        if barrier != "-":
            Path(barrier, str(os.getpid())).touch()
            while len(list(Path(barrier).iterdir())) < 2:
                time.sleep(0.001)
        return real_lock(folder)

    imagecache.load_image, room.planning_lock = read, lock
    ds = LoadImagesAndLabels(data, IMGSZ, 4, cache_images="ram", ram_dir=ram_dir)
    cached = 0 if ds.image_cache is None else int(ds.image_cache.ok.sum())
    print(json.dumps({"ready": True, "cached": cached, "n": len(ds),
                      "used": used_bytes(ram_dir)}), flush=True)
    if barrier == "-":
        time.sleep(600)  # held until the test's signal


def start_child(data, ram_dir, slow, barrier="-"):
    return subprocess.Popen([sys.executable, __file__, "child-build", data, ram_dir, str(slow), barrier],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill(data, ram_dir, sig, when):
    before = used_bytes(ram_dir)
    p = start_child(data, ram_dir, 0.2 if when == "build" else 0.0)
    line = p.stdout.readline()
    if when == "after":
        while line and not line.startswith("{"):
            line = p.stdout.readline()
    else:
        time.sleep(0.3)  # well inside the decoding of the 40 images
    during = used_bytes(ram_dir)
    names_during = sorted(os.listdir(ram_dir))
    p.send_signal(getattr(signal, "SIG" + sig))
    rc = p.wait(60)
    time.sleep(0.2)
    return {"rc": rc, "marker": line.strip()[:200], "before": before, "during": during,
            "after": used_bytes(ram_dir), "names_during": names_during, "names_after": sorted(os.listdir(ram_dir)),
            "stderr": p.stderr.read()[-2000:]}


def two(data, ram_dir):
    barrier = tempfile.mkdtemp(prefix="yolo_data_barrier_")
    before = used_bytes(ram_dir)
    try:
        procs = [start_child(data, ram_dir, 0.0, barrier) for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        shutil.rmtree(barrier, ignore_errors=True)
    results = []
    for p, (out, err) in zip(procs, outs):
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        results.append({"rc": p.returncode, "result": json.loads(lines[-1]) if lines else None, "stderr": err[-3000:]})
    return {"before": before, "after": used_bytes(ram_dir), "names_after": sorted(os.listdir(ram_dir)),
            "builders": results}


def kept_messages() -> list:
    """The messages yolo_data logs from now on (INFO and up), appended to the list returned."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger("yolo_data").addHandler(Keep())
    logging.getLogger("yolo_data").setLevel(logging.INFO)
    return records


def shm(data, cache):
    """A training loader with 2 workers when /dev/shm is small; every batch must arrive."""
    from yolo_data import create_dataloader
    records = kept_messages()
    loader, ds = create_dataloader(data, IMGSZ, 8, 32, augment=True, workers=2, shuffle=True,
                                   cache=False if cache == "none" else cache, ram_cache_dir="/dev/shm")
    n = sum(len(imgs) for imgs, *_ in loader)
    cached = None if ds.image_cache is None else int(ds.image_cache.ok.sum())
    return {"workers": loader.num_workers, "images": n, "len": len(ds), "cached": cached,
            "messages": records, "shm_free": os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize}


def generations(data, ram_dir, workers):
    """A YOLOv5 --evolve loop: each generation builds a loader with a RAM cache, runs a pass and drops it
    with ``del loader, dataset``.  The cyclic garbage collector is off: only reference counting frees
    the previous generation's cache before the next one plans its room."""
    import gc
    import weakref
    from yolo_data import create_dataloader
    gc.collect()
    gc.disable()
    before, out = used_bytes(ram_dir), []
    for _ in range(3):
        loader, dataset = create_dataloader(data, IMGSZ, 2, 32, augment=True, shuffle=True, workers=int(workers),
                                            cache="ram", ram_cache_dir=ram_dir)
        cached = 0 if dataset.image_cache is None else int(dataset.image_cache.ok.sum())
        images = sum(len(imgs) for imgs, *_ in loader)
        nw, alive = loader.num_workers, weakref.ref(dataset)
        del loader, dataset
        out.append({"cached": cached, "images": images, "workers": nw, "freed": alive() is None,
                    "used_after": used_bytes(ram_dir)})
    return {"before": before, "generations": out}


def _rank_epoch(rank, world, data, out_dir):
    """One rank as srun or mpirun start it (no LOCAL_WORLD_SIZE or LOCAL_RANK): cache='ram', 1 worker,
    one epoch, then a collective, where a rank that died would leave the others waiting."""
    import faulthandler
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    faulthandler.dump_traceback_later(240, exit=True)  # a hung rank fails the run, saying where
    torch.set_num_threads(1)
    records = kept_messages()
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    try:
        from yolo_data import create_dataloader
        loader, ds = create_dataloader(data, IMGSZ, 4, 32, rank=rank, workers=1, cache="ram")
        n = sum(len(imgs) for imgs, *_ in loader)
        cached = None if ds.image_cache is None else int(ds.image_cache.ok.sum())
        Path(out_dir, f"{rank}.json").write_text(json.dumps({
            "images": n, "len": len(ds), "workers": loader.num_workers, "cached": cached,
            "messages": records}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def ranks(data, world):
    import socket
    import torch.multiprocessing as tmp
    world = int(world)
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(name, None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    out = tempfile.mkdtemp(prefix="yolo_data_ranks_")
    try:  # a rank that fails ends the others and raises here, with its traceback
        tmp.start_processes(_rank_epoch, args=(world, data, out), nprocs=world, join=True, start_method="fork")
        results = [json.loads(Path(out, f"{r}.json").read_text()) for r in range(world)]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"ranks": results, "shm_size": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize}


def main():
    mode, *args = sys.argv[1:]
    if mode == "child-build":
        return child_build(*args)
    result = {"kill": kill, "two": two, "shm": shm, "generations": generations, "ranks": ranks}[mode](*args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
