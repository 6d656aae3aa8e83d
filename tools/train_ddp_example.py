#!/usr/bin/env python
"""A whole (tiny) detection-style training loop on yolo_data, single process or DDP.

    python tools/train_ddp_example.py                                   # one process, bundled sample
    torchrun --nproc_per_node=2 tools/train_ddp_example.py --epochs 3   # DDP: NCCL on GPUs, gloo on CPU
    python tools/train_ddp_example.py --stop-after 5                    # preempted after 5 steps...
    torchrun --nproc_per_node=2 tools/train_ddp_example.py --resume     # ...goes on, here on 2 ranks

It shows the flow a trainer needs: select_device, init_torch_seeds, create_dataloader(rank=LOCAL_RANK)
with sampler.set_epoch each epoch, smart_DDP, a validation pass whose per-rank sums are combined with
all_reduce, and a checkpoint written by rank 0 that the other ranks wait for and then load.  The
checkpoint holds the train loader's state_dict(), so --resume goes on from the very next batch, on any
number of ranks (--batch-size is the global batch: keep it).  The model is a small CNN regressing the
number of objects in each image: the point is the data flow, not mAP.  With --out, each rank writes the
image paths of each of its training steps and each epoch's train loss (the tests read them).  The
train loss printed is the epoch's mean per image over all ranks (the steps this run made, after a
resume): the same on any number of ranks for the same weights and batches.
"""
import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from yolo_data import create_dataloader, init_torch_seeds, select_device, smart_DDP  # noqa: E402
from yolo_data.cli import SAMPLE_YAML  # noqa: E402

HYP = Path(__file__).resolve().parents[1] / "data" / "hyps" / "hyp.scratch-low.yaml"


def tiny_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 1))


def counts(targets: torch.Tensor, n: int) -> torch.Tensor:
    """(n, 1) float number of boxes of each image in the batch."""
    return torch.bincount(targets[:, 0].long(), minlength=n).float()[:, None]


def train_step(model, opt, imgs: torch.Tensor, targets: torch.Tensor, device) -> torch.Tensor:
    """One optimiser step on a batch (imgs uint8 (B, 3, H, W), scaled to [0, 1] here); the loss, detached."""
    imgs = imgs.to(device, non_blocking=True).float() / 255
    loss = nn.functional.mse_loss(model(imgs), counts(targets, len(imgs)).to(device))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SAMPLE_YAML))
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=8, help="total over all ranks")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="stop an epoch after this many steps (0: whole)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--device", default="", help="'' (cuda if available), cpu, 0, ...")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/train_ddp_example")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="save a checkpoint after this many training steps in all, then stop (as if preempted)")
    ap.add_argument("--resume", action="store_true",
                    help="go on from OUT/last.pt: model, optimizer and the loader's place in its epoch")
    return ap.parse_args(argv)


def save_checkpoint(path: Path, model, opt, loader, rank: int, distributed: bool) -> None:
    """Rank 0 writes; every rank waits for it (the loader's state is the same on every rank)."""
    if rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        state = (model.module if hasattr(model, "module") else model).state_dict()
        torch.save({"model": state, "opt": opt.state_dict(), "loader": loader.state_dict()}, path)
    if distributed:
        dist.barrier()


def main(argv=None):
    args = parse(argv)
    local_rank = int(os.environ.get("LOCAL_RANK", -1))  # set by torchrun; read here, at run time
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = select_device(args.device, batch_size=args.batch_size if local_rank == -1 else 0)
    if local_rank != -1:
        if device.type == "cuda":
            torch.cuda.set_device(local_rank)
            device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(minutes=10))
    init_torch_seeds(args.seed + rank)
    out = Path(args.out)

    train_loader, train_set = create_dataloader(args.data, args.imgsz, args.batch_size // world, 32, hyp=str(HYP),
                                                augment=True, rank=local_rank, workers=args.workers,
                                                shuffle=True, seed=args.seed, split="train", prefix="train: ",
                                                partner_group=4)  # divides the per-rank batch on 1 and 2 ranks
    val_loader, _ = create_dataloader(args.data, args.imgsz, args.batch_size // world, 32, rect=True, pad=0.5,
                                      rank=local_rank, workers=args.workers, split="val", prefix="val: ")
    model = tiny_model().to(device)
    if local_rank != -1:
        model = smart_DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ckpt = out / "last.pt"
    start_epoch = 0
    if args.resume:  # our own file: tensors, numbers and strings only
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)
        (model.module if hasattr(model, "module") else model).load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        train_loader.load_state_dict(saved["loader"])
        start_epoch = train_loader.sampler.epoch  # the saved epoch, or the next one when it was done
    seen, train_loss, done = {}, {}, 0
    for epoch in range(start_epoch, args.epochs):
        train_loader.sampler.set_epoch(epoch)  # the same epoch keeps a loaded resume point
        model.train()
        seen[epoch] = []
        train_totals = torch.zeros(2, device=device)  # summed per-image loss, images (this rank's)
        for step, (imgs, targets, paths, _) in enumerate(train_loader):
            if args.steps and step >= args.steps:
                break
            loss = train_step(model, opt, imgs, targets, device)
            train_totals += torch.stack([loss * len(imgs), torch.tensor(float(len(imgs)), device=device)])
            seen[epoch].append(list(paths))
            done += 1
            if done == args.stop_after:
                save_checkpoint(ckpt, model, opt, train_loader, rank, local_rank != -1)
                if rank == 0:
                    print(f"stopped after {done} steps (epoch {epoch}, step {step + 1}); --resume goes on from {ckpt}")
                break
        if done == args.stop_after:
            break

        # validation: each rank evaluates its share, the sums are combined over all ranks
        model.eval()
        totals = torch.zeros(2, device=device)  # summed squared error, images
        with torch.no_grad():
            for imgs, targets, _, _ in val_loader:
                imgs = imgs.to(device, non_blocking=True).float() / 255
                err = (model(imgs) - counts(targets, len(imgs)).to(device)) ** 2
                totals += torch.stack([err.sum(), torch.tensor(float(len(imgs)), device=device)])
        if local_rank != -1:
            dist.all_reduce(totals)
            dist.all_reduce(train_totals)  # the epoch's mean over every rank's images, not one rank's last step
        train_loss[epoch] = train_totals[0].item() / max(train_totals[1].item(), 1.0)
        if rank == 0:
            print(f"epoch {epoch}: train loss {train_loss[epoch]:.3f} (mean over {int(train_totals[1].item())} "
                  f"images), val mse {totals[0].item() / totals[1].item():.3f} over {int(totals[1].item())} images")

        # checkpoint: rank 0 writes, everyone waits for it, then every rank can read it back
        save_checkpoint(ckpt, model, opt, train_loader, rank, local_rank != -1)
        loaded = torch.load(ckpt, map_location="cpu", weights_only=True)
        assert loaded["loader"]["epoch"] == epoch

    out.mkdir(parents=True, exist_ok=True)
    (out / f"seen_rank{rank}.json").write_text(json.dumps({"world": world, "seen": seen, "train_loss": train_loss,
                                                             "train_images": len(train_set)}))
    if local_rank != -1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
