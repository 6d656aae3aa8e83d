#!/usr/bin/env python
"""A whole (tiny) training loop on Ray Train, the data read where it is (a folder, or a bucket).

    python tools/train_ray_example.py --workers 2                          # a Ray of its own, bundled sample
    python tools/train_ray_example.py --address auto --workers 8 --data s3://bucket/coco.yaml \\
        --endpoint http://10.0.0.5:8333 --storage /shared/runs --name coco --max-failures 3

Each Ray worker builds its loader with yolo_data.integrations.ray.build_ray_loader (rank-0-first, one scan
per job, one RAM cache per node with --cache ram), goes on from the run's last checkpoint with resume()
(model, optimizer and the loader's place: the next batch), and makes a checkpoint every --report-every
steps with report().  --global-batch is the batch of one step over all workers: keep it when a run goes
on with another --workers, and step k holds the same images.  A worker lost mid-run (with --max-failures
1 or more) restarts the run from the last checkpoint that every worker reported.  The bucket's
credentials reach the workers through Ray's runtime environment, from $AWS_ACCESS_KEY_ID and
$AWS_SECRET_ACCESS_KEY here.  The model is tools/train_ddp_example.py's small CNN counting objects.
"""
import argparse
import logging
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import train_ddp_example  # noqa: E402 (this script's folder)
from train_ddp_example import tiny_model, train_step  # noqa: E402
from yolo_data.cli import SAMPLE_YAML  # noqa: E402

# passed to the workers, never printed or put in the loop's config
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3")


def train_loop(cfg: dict) -> None:
    """train_loop_per_worker: one Ray worker's loop (Ray has set up torch.distributed)."""
    import ray.train.torch
    from yolo_data import Settings
    from yolo_data.integrations.ray import build_ray_loader, ray_place, report, resume

    log = logging.getLogger("train_ray_example")  # Ray shows a worker's log lines once (its prints twice)
    place = ray_place()
    settings = Settings.training(img_size=cfg["imgsz"], batch_size=place.per_rank(cfg["global_batch"]),
                                 seed=cfg["seed"], workers=cfg["loader_workers"], cache=cfg["cache"],
                                 endpoint_url=cfg["endpoint"], partner_group=4)  # divides 8 on 1 and 2 workers
    loader = build_ray_loader(cfg["data"], settings, prefix="train: ")
    saved = resume(loader)  # None on a fresh start; after a restart the loader goes on at the next batch
    net = tiny_model()
    if saved:
        net.load_state_dict(saved["model"])
    device = ray.train.torch.get_device()  # cuda when Ray gave this worker a GPU
    model = ray.train.torch.prepare_model(net)  # net moved to the device, wrapped in DDP on several workers
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    done = 0  # steps in all, over every attempt of the run
    if saved:
        opt.load_state_dict(saved["opt"])
        done = saved["done"]
        if place.world_rank == 0:
            log.info(f"resumed after {done} steps: epoch {loader.sampler.epoch}, step {loader.state_dict()['step']}")

    def checkpoint(epoch: int, loss: float) -> None:
        report({"epoch": epoch, "steps": done, "loss": loss}, loader,
               {"model": net.state_dict(), "opt": opt.state_dict(), "done": done})

    for epoch in range(loader.sampler.epoch, cfg["epochs"]):
        loader.sampler.set_epoch(epoch)  # the same epoch keeps a resume point
        totals = torch.zeros(2, device=device)  # summed per-image loss, images (this worker's)
        for imgs, targets, _, _ in loader:
            loss = train_step(model, opt, imgs, targets, device)
            totals += torch.stack([loss * len(imgs), torch.tensor(float(len(imgs)), device=device)])
            done += 1
            if done % cfg["report_every"] == 0:  # every worker reports: Ray counts a checkpoint once all did
                checkpoint(epoch, loss.item())
        if dist.is_initialized():
            dist.all_reduce(totals)  # the epoch's mean over every worker's images
        mean = totals[0].item() / max(totals[1].item(), 1.0)
        if done % cfg["report_every"]:  # the epoch's end, unless that step was just saved
            checkpoint(epoch, mean)
        if place.world_rank == 0:
            log.info(f"epoch {epoch}: train loss {mean:.3f} (mean over {int(totals[1].item())} images)")


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", default="", help="a running Ray cluster (host:port, or auto); default: start one here")
    ap.add_argument("--workers", type=int, default=2, help="Ray Train workers (ranks)")
    ap.add_argument("--gpu", action="store_true", help="one GPU per worker")
    ap.add_argument("--global-batch", type=int, default=8, help="total over all workers")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--data", default=str(SAMPLE_YAML), help="a dataset yaml, local or s3://")
    ap.add_argument("--endpoint", default=None, help="the S3 endpoint (default: $AWS_ENDPOINT_URL_S3, else AWS)")
    ap.add_argument("--storage", default="runs/train_ray_example",
                    help="Ray's storage_path for checkpoints: a folder every node sees, or s3://")
    ap.add_argument("--name", default="train_ray_example", help="the run's folder in --storage")
    ap.add_argument("--max-failures", type=int, default=1, help="restarts after a lost worker")
    ap.add_argument("--cache", choices=["ram", "disk"], default=None, help="image cache (ram: one per node)")
    ap.add_argument("--report-every", type=int, default=50, help="a checkpoint every N steps (and at each epoch's end)")
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--loader-workers", type=int, default=2, help="DataLoader workers of each Ray worker")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv=None):
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    args = parse(argv)
    secrets = {k: os.environ[k] for k in CREDENTIALS if os.environ.get(k)}
    # "local" starts a Ray here even where this machine runs another; the workers get the credentials
    ray.init(address=args.address or "local", runtime_env={"env_vars": secrets})
    ray.cloudpickle.register_pickle_by_value(train_ddp_example)  # tools/ is not on the workers' path
    storage = args.storage if "://" in args.storage else os.path.abspath(args.storage)
    cfg = {"data": args.data, "endpoint": args.endpoint, "global_batch": args.global_batch, "epochs": args.epochs,
           "imgsz": args.imgsz, "loader_workers": args.loader_workers, "cache": args.cache, "seed": args.seed,
           "report_every": args.report_every}
    trainer = TorchTrainer(train_loop, train_loop_config=cfg,
                           scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.gpu,
                                                        resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(name=args.name, storage_path=storage,
                                                failure_config=FailureConfig(max_failures=args.max_failures)))
    result = trainer.fit()
    last = result.metrics  # of the last report
    print(f"done: {last.get('steps')} steps, epoch {last.get('epoch')}; "
          f"last checkpoint {result.checkpoint.path if result.checkpoint else None}")
    ray.shutdown()


if __name__ == "__main__":
    main()
