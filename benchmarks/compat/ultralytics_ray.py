"""Ultralytics' trainer inside Ray Train workers, in the benchmark environment (with Ray installed).

    python benchmarks/compat/ultralytics_ray.py     # in the benchmark environment

Starts a Ray cluster of two nodes on loopback (a head on 127.0.0.2 and a node on 127.0.0.3, CPU only;
Ray Train sets up gloo), and in ``train_loop_per_worker`` trains yolov8n.yaml from scratch for one
epoch at imgsz 64 on a copy of the bundled sample, ``batch=8`` (the global batch):

- 1 worker, ``trainer=YoloDataTrainer``: it trains and validates as in one process;
- 2 workers (one a node), ``trainer=YoloDataTrainer``: one DDP rank each, each on its half of the
  images, and the model's parameters equal on both ranks after the epoch (the gradients were averaged
  over them) and not equal to those before it;
- 2 workers, Ultralytics' own ``DetectionTrainer``: what Ultralytics does alone in a Ray worker (its
  world size from the ``device`` argument, 0 on CPU: no DDP, the loss multiplied by 0, each rank a
  model of its own; its final validation asks CUDA for the device).  Its own loader leaves out, as
  corrupt, the sample's label files that mix polygon and box rows: 8 of the 16 train images.

Each worker writes what it saw to a JSON file; this script prints it and exits 1 when a check of
yolo_data's trainer fails.  Every process of the cluster is killed at the end.  Ultralytics'
settings go to a temporary folder, offline.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack, contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

from ultralytics_s3 import sample_copy  # noqa: E402  (beside this script)

HEAD_IP, NODE_IP = "127.0.0.2", "127.0.0.3"  # Ray replaces 127.0.0.1 by the machine's address, not these
STARTED = "This command will now block forever"  # what `ray start --block` prints once its node runs
START_TIMEOUT_S = 120


def digest(model) -> str:
    """A digest of a model's parameters (not its buffers: each DDP rank keeps its BatchNorm statistics)."""
    h = hashlib.sha256()
    for _, p in model.named_parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train_loop(cfg: dict) -> None:
    """train_loop_per_worker: one Ultralytics training, what it saw written to OUT/rank<r>.json."""
    import ray.train
    import ray.train.torch
    rank = ray.train.get_context().get_world_rank()
    seen = {}
    try:
        from ultralytics import YOLO
        from ultralytics.models.yolo.detect import DetectionTrainer
        from ultralytics.utils.torch_utils import unwrap_model
        from yolo_data.integrations.ultralytics import YoloDataTrainer

        def at_start(trainer):
            seen.update(start=digest(unwrap_model(trainer.model)), world_size=trainer.world_size,
                        model=type(trainer.model).__name__, images=len(trainer.train_loader.dataset),
                        per_rank=len(trainer.train_loader.sampler), steps=len(trainer.train_loader),
                        batch=trainer.train_loader.batch_size)

        def at_epoch_end(trainer):
            seen.update(loss=round(float(trainer.loss), 4), end=digest(unwrap_model(trainer.model)))

        model = YOLO("yolov8n.yaml")
        model.add_callback("on_train_start", at_start)
        model.add_callback("on_train_epoch_end", at_epoch_end)
        trainer = YoloDataTrainer if cfg["trainer"] == "yolo_data" else DetectionTrainer
        model.train(data=cfg["data"], trainer=trainer, epochs=1, imgsz=64, batch=8, workers=0,
                    device=ray.train.torch.get_device(),  # the CPU here; a worker's GPU where it has one
                    pretrained=False, amp=False, plots=False, seed=0, project=cfg["project"], name=cfg["name"],
                    exist_ok=True, verbose=False)
        seen.update(metrics=sorted(model.trainer.metrics or {}), last_pt=model.trainer.last.exists())
    except Exception as e:  # noqa: BLE001 - what the run ended with is the finding
        seen["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "/ultralytics/" in f.filename] or \
            traceback.extract_tb(e.__traceback__)
        seen["where"] = f"{frames[-1].filename.split('site-packages/')[-1]}:{frames[-1].lineno}, in {frames[-1].name}"
    Path(cfg["out"], f"rank{rank}.json").write_text(json.dumps(seen))


def wait_started(proc, log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while STARTED not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the Ray {what} did not start within {START_TIMEOUT_S} s:\n"
                             f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


@contextmanager
def ray_cluster(tmp: Path):
    """The address of a running two-node cluster; every process it started is killed on leaving.  Its
    nodes, their workers and this process share the environment (RAY_AUTH_TOKEN: the cluster's token)."""
    ray = str(Path(sys.executable).with_name("ray"))
    with socket.socket() as s:
        s.bind((HEAD_IP, 0))
        port = s.getsockname()[1]
    # the workers import yolo_data from this checkout, as this script does
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(common.REPO), os.environ.get("PYTHONPATH", "")])}
    temp = Path(tempfile.mkdtemp(prefix="yd_ray_"))  # short: Ray's Unix sockets live in it (107 bytes at most)
    node = ["--block", "--num-cpus", "2", "--object-store-memory", str(200 * 2 ** 20)]
    cmds = {"head": [ray, "start", "--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--temp-dir", str(temp),
                     "--include-dashboard=false", "--disable-usage-stats", *node],
            "node": [ray, "start", "--address", f"{HEAD_IP}:{port}", "--node-ip-address", NODE_IP, *node]}
    try:
        with ExitStack() as stack:
            for name, cmd in cmds.items():
                log = tmp / f"ray-{name}.log"
                out = stack.enter_context(open(log, "wb"))
                proc = stack.enter_context(common.popen_tree(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                             start_new_session=True))
                wait_started(proc, log, name)
            yield f"{HEAD_IP}:{port}"
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def fit(workers: int, trainer: str, name: str, data: Path, tmp: Path) -> list:
    """One TorchTrainer run; the JSON of each worker, by rank."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    out = tmp / "out" / name
    out.mkdir(parents=True)
    cfg = {"data": str(data), "project": str(tmp / "runs"), "name": name, "out": str(out), "trainer": trainer}
    run = TorchTrainer(train_loop, train_loop_config=cfg,
                       scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1},
                                                    placement_strategy="SPREAD"),
                       run_config=RunConfig(name=name, storage_path=str(tmp / "ray_results")))
    t = time.perf_counter()
    try:
        run.fit()
    except Exception as e:  # noqa: BLE001 - the workers' files say what happened
        print(f"  trainer.fit() ended with {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    common.log(f"{name}: {time.perf_counter() - t:.1f} s")
    return [json.loads((out / f"rank{r}.json").read_text()) if (out / f"rank{r}.json").exists() else {}
            for r in range(workers)]


def describe(rank: int, r: dict) -> str:
    """One line of what a rank saw: the trainer's world size (Ultralytics counts 0 for the CPU), its model
    (wrapped in DDP or not), its share of the images, the last step's loss and how the run ended."""
    if "world_size" not in r:
        return f"rank {rank}: {r.get('error', 'no report')}"
    text = (f"rank {rank}: trainer world size {r['world_size']}, model {r['model']}, {r['per_rank']} of {r['images']} "
            f"images in {r['steps']} steps of {r['batch']}, last loss {r.get('loss')}")
    return text + (f"; ended with {r['error']} ({r['where']})" if "error" in r else "")


def main() -> None:
    common.require("ultralytics_ray.py", "ultralytics", "ray")
    tmp = Path(tempfile.mkdtemp(prefix="ultra_ray_"))
    common.isolate_environment(tmp, "ultralytics_ray")
    data = sample_copy(tmp) / "sample.yaml"
    # the cluster's own token, before Ray is imported (it reads the mode then): Ray turns token
    # authentication on by itself where ~/.ray/auth_token exists
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    import ray
    import torch
    import ultralytics
    print(f"ray {ray.__version__}, ultralytics {ultralytics.__version__}, torch {torch.__version__}; two Ray nodes on "
          f"loopback ({HEAD_IP}, {NODE_IP}), CPU, gloo; yolov8n.yaml from scratch, 1 epoch, imgsz 64, batch 8")
    try:
        with ray_cluster(tmp) as address:
            ray.init(address=address, log_to_driver=False)
            try:
                one = fit(1, "yolo_data", "one", data, tmp)
                two = fit(2, "yolo_data", "two", data, tmp)
                alone = fit(2, "ultralytics", "alone", data, tmp)
            finally:
                ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("\n[1 worker] YoloDataTrainer")
    print("  " + describe(0, one[0]))
    ok_one = "error" not in one[0] and one[0].get("last_pt") is True and "metrics/mAP50(B)" in one[0].get("metrics", [])
    print(f"  trained and validated, last.pt written: {ok_one}")

    print("\n[2 workers] YoloDataTrainer")
    for rank, r in enumerate(two):
        print("  " + describe(rank, r))
    ends, starts = {r.get("end") for r in two}, {r.get("start") for r in two}
    ok_ddp = all("error" not in r and r.get("world_size") == 2 and r.get("model") == "DistributedDataParallel"
                 and r.get("per_rank") == 8 for r in two)
    ok_equal = len(ends) == 1 and None not in ends
    ok_moved = ok_equal and ends.isdisjoint(starts)
    print(f"  one DDP rank each, on half of the images: {ok_ddp}")
    print(f"  parameters equal on both ranks after the epoch: {ok_equal}")
    print(f"  parameters changed by the epoch: {ok_moved}")

    print("\n[2 workers] Ultralytics' own DetectionTrainer")
    for rank, r in enumerate(alone):
        print("  " + describe(rank, r))
    print(f"  parameters equal on both ranks after the epoch: {len({r.get('end') for r in alone}) == 1}")
    print(f"\n{common.footer()}")
    sys.exit(0 if ok_one and ok_ddp and ok_equal and ok_moved else 1)


if __name__ == "__main__":
    main()
