"""One training run of the Ray tests (tests/integrations/test_ray.py), under Ray Train or under torchrun,
each rank writing what every step gave it.

    python tests/ray_driver.py ray --address HOST:PORT --workers N --out DIR --data YAML [--kill E:K] ...
    python -m torch.distributed.run --nproc_per_node N tests/ray_driver.py torchrun --out DIR --data YAML

Each rank appends one JSON line per step to DIR/rank<r>-<pid>.jsonl: the epoch, the global step, whether
the run had resumed from a checkpoint, and per image its path and digests of its pixels and targets.
Under Ray a checkpoint (yolo_data.integrations.ray.report) is made every --every steps.  With --kill E:K
world rank 1 stops after using the batch of epoch E step K of the first attempt, writes its pid to
DIR/kill-me and waits; this driver kills it with SIGKILL (as a machine's failure would), so Ray restarts
the run from the last checkpoint.  The driver prints one JSON line: the seconds trainer.fit() took and the
error it ended with, if any.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch

KILL_WAIT_S = 120  # a rank waiting to be killed gives up after this long (the driver failed to kill it)


def _settings(cfg: dict, per_rank: int, node_rank: int):
    from yolo_data import Settings
    cache_dir = f"{cfg['cache_root']}/node{node_rank}" if cfg.get("cache_root") else None
    given = {"cache": cfg.get("cache"), "cache_dir": cache_dir}
    return Settings.training(img_size=cfg["img_size"], batch_size=per_rank, seed=cfg["seed"], workers=cfg["loader_workers"],
                             partner_group=cfg["partner_group"], **{k: v for k, v in given.items() if v})


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def _items(imgs, targets, paths) -> list:
    return [{"path": p, "img": _digest(imgs[i]), "targets": _digest(targets[targets[:, 0] == i, 1:])}
            for i, p in enumerate(paths)]


def _wait_to_be_killed(out: Path) -> None:
    (out / "kill-me.tmp").write_text(str(os.getpid()))
    os.replace(out / "kill-me.tmp", out / "kill-me")
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError(f"rank 1 was not killed within {KILL_WAIT_S} s")


def run_steps(cfg: dict, loader, rank: int, saved, report=None) -> None:
    """The training loop: every step's items written down, a report every cfg['every'] steps."""
    out = Path(cfg["out"])
    done = saved.get("done", 0) if saved else 0
    kill = tuple(cfg["kill"]) if cfg.get("kill") else None
    lines = open(out / f"rank{rank}-{os.getpid()}.jsonl", "a")
    for epoch in range(loader.sampler.epoch, cfg["epochs"]):
        loader.sampler.set_epoch(epoch)
        for imgs, targets, paths, _ in loader:
            step = loader.state_dict()["step"] - 1  # the global step of this batch
            lines.write(json.dumps({"epoch": epoch, "step": step, "resumed": saved is not None, "t": time.time(),
                                    "items": _items(imgs, targets, paths)}) + "\n")
            lines.flush()
            done += 1
            if kill and rank == 1 and (epoch, step) == kill and not (out / "killed").exists():
                _wait_to_be_killed(out)
            if report is not None and done % cfg["every"] == 0:
                report({"epoch": epoch, "step": step, "done": done}, {"done": done})
            if done == cfg.get("stop_after"):
                return


def ray_loop(cfg: dict) -> None:
    """train_loop_per_worker."""
    from yolo_data.integrations.ray import build_ray_loader, ray_place, report, resume
    if cfg.get("endpoint"):
        from yolo_data.storage import remote
        remote.configure(endpoint_url=cfg["endpoint"])
    place = ray_place()
    loader = build_ray_loader(cfg["data"], _settings(cfg, place.per_rank(cfg["global_batch"]), place.node_rank),
                              prefix="train: ")
    saved = resume(loader)
    split = loader.dataset.split_labels
    from yolo_data.storage import remote
    Path(cfg["out"], f"place{place.world_rank}-{os.getpid()}.json").write_text(json.dumps({
        **place.__dict__, "built": split.built, "cache_file": str(split.cache_file), "requests": remote.counts(),
        "image_cache": _cache_id(loader.dataset), "resumed": saved, "pid": os.getpid(), "children": _children()}))
    run_steps(cfg, loader, place.world_rank, saved, lambda metrics, state: report(metrics, loader, state))


def _children() -> list:
    """This process's children now (its DataLoader workers, started with the loader)."""
    kids = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            kids += [int(x) for x in f.read().split()]
    return kids


def _cache_id(dataset):
    """(device, inode) of the RAM image cache's file this rank reads, or None."""
    cache = getattr(dataset, "image_cache", None)
    if cache is None:
        return None
    st = os.fstat(cache.fd)
    return [st.st_dev, st.st_ino]


def torchrun_main(cfg: dict) -> None:
    import torch.distributed as dist
    from yolo_data.build import build_loader
    local_rank, rank, world = (int(os.environ[k]) for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE"))
    dist.init_process_group("gloo")
    try:
        loader = build_loader(cfg["data"], _settings(cfg, cfg["global_batch"] // world, 0), rank=local_rank,
                              prefix="train: ")
        run_steps(cfg, loader, rank, None)
    finally:
        dist.destroy_process_group()


def _registered(run_dir: Path) -> int:
    """How many checkpoints Ray has registered for the run: a report counts once every worker made it and
    the controller took it in, which it records in the run folder's snapshot."""
    try:
        return len(json.loads((run_dir / "checkpoint_manager_snapshot.json").read_text())["checkpoint_results"])
    except (OSError, ValueError, KeyError):
        return 0


def _killer(out: Path, run_dir: Path, stop: threading.Event) -> None:
    """Kills the rank that asks for it (DIR/kill-me) with SIGKILL, once, after Ray registered a checkpoint
    (a report still on its way to the controller is lost with the worker, and the run would start over)."""
    deadline = None
    while not stop.is_set():
        if (out / "kill-me").exists():
            deadline = deadline or time.monotonic() + 60
            if not _registered(run_dir) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            pid = int((out / "kill-me").read_text())
            (out / "killed").write_text(str(pid))
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


def ray_main(args, cfg: dict) -> None:
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    # the bucket's credentials reach the workers through Ray's runtime environment, never the loop's config;
    # so does the test's per-user cache folder (the cluster's processes were started before it was set)
    env = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "YOLO_DATA_CACHE_DIR")
           if k in os.environ}
    ray.init(address=args.address, runtime_env={"env_vars": env}, log_to_driver=args.verbose)
    out = Path(cfg["out"])
    stop = threading.Event()
    killer = threading.Thread(target=_killer, args=(out, Path(args.storage, args.name), stop), daemon=True)
    killer.start()
    trainer = TorchTrainer(ray_loop, train_loop_config=cfg,
                           scaling_config=ScalingConfig(num_workers=args.workers, resources_per_worker={"CPU": 1},
                                                        placement_strategy="SPREAD"),
                           run_config=RunConfig(name=args.name, storage_path=args.storage,
                                                failure_config=FailureConfig(max_failures=args.max_failures)))
    t0, error = time.time(), None
    try:
        trainer.fit()
    except Exception as e:  # noqa: BLE001 - the test reads what the run ended with
        error = f"{type(e).__name__}: {e}"
    stop.set()
    print(json.dumps({"fit_start": t0, "fit_s": time.time() - t0, "error": error}), flush=True)
    ray.shutdown()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["ray", "torchrun"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--address", default=None, help="the cluster to run on (ray mode; never 'auto', which may "
                    "join another cluster of this machine)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--name", default="run")
    ap.add_argument("--storage", default="")
    ap.add_argument("--max-failures", type=int, default=1)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--img-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--loader-workers", type=int, default=0)
    ap.add_argument("--partner-group", type=int, default=2)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--stop-after", type=int, default=0)
    ap.add_argument("--kill", default="", help="E:K, world rank 1 killed after epoch E step K of the first attempt")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--cache-root", default="")
    ap.add_argument("--endpoint", default="")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    cfg = {"data": args.data, "out": args.out, "global_batch": args.global_batch, "img_size": args.img_size,
           "epochs": args.epochs, "seed": args.seed, "loader_workers": args.loader_workers,
           "partner_group": args.partner_group, "every": args.every, "stop_after": args.stop_after or None,
           "kill": [int(x) for x in args.kill.split(":")] if args.kill else None, "cache": args.cache,
           "cache_root": args.cache_root, "endpoint": args.endpoint}
    if args.mode == "ray" and not args.address:
        ap.error("ray mode needs --address")
    if args.mode == "torchrun":
        torchrun_main(cfg)
    else:
        ray_main(args, cfg)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
