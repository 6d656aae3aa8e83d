"""YoloDataTrainer under ``torchrun --nproc_per_node 2`` on CPU (started by ultralytics_plugin.py).

Ultralytics has no CPU DDP: for a CPU device its trainer sets its world size to 0, so under torchrun
each process would train alone (no process group; its loss is multiplied by that world size, 0).
``--mode plain`` runs YoloDataTrainer as it is, to show what happens.  ``--mode gloo`` (default) adds
the smallest adapter that gives Ultralytics' own DDP path a gloo process group on CPU, here in the
benchmark and not in yolo_data:

- the world size from torchrun, and ``_setup_ddp`` opening a gloo group instead of choosing a GPU;
- the model wrapped in DistributedDataParallel without ``device_ids`` (Ultralytics passes the GPU
  index, which CPU modules refuse), after Ultralytics' setup;
- Ultralytics' final validation of best.pt is skipped: under DDP its standalone validator asks CUDA
  for the current device.  Every epoch's validation does run, on both ranks, gathered on rank 0.

Prints one ``DDP rank r:`` line per rank: its train images and steps, what its loader gave, the loss.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)


def _total(tloss):
    """The trainer's running mean loss (a dict of components in Ultralytics 8.4) summed, or None."""
    if tloss is None:
        return None
    values = tloss.values() if isinstance(tloss, dict) else [tloss]
    return round(sum(float(v.sum()) for v in values), 4)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--imgsz", type=int, default=160)
    p.add_argument("--batch", type=int, default=16, help="global batch")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--project", default=tempfile.gettempdir())
    p.add_argument("--mode", choices=("gloo", "plain"), default="gloo")
    a = p.parse_args()
    common.require("ultralytics_ddp_cpu.py", "ultralytics")
    os.environ.setdefault("YOLO_OFFLINE", "1")
    rank = int(os.environ["RANK"])

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from ultralytics import YOLO
    from yolo_data.integrations.ultralytics import YoloDataTrainer

    class GlooTrainer(YoloDataTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.world_size = self.ranks = int(os.environ["WORLD_SIZE"])  # Ultralytics: 0 for CPU

        def _setup_ddp(self):
            dist.init_process_group("gloo", rank=rank, world_size=self.world_size)

        def _setup_train(self):
            world, self.world_size = self.world_size, 1  # Ultralytics' own DDP wrap needs a GPU index
            try:
                super()._setup_train()
            finally:
                self.world_size = world
            self.model = DistributedDataParallel(self.model, find_unused_parameters=True)

        def get_dataloader(self, dataset_path, batch_size=16, rank=0, mode="train"):
            # _setup_train ran _build_train_pipeline with world size 1: per-rank batch from the global one
            return super().get_dataloader(dataset_path, max(batch_size // self.ranks, 1), rank, mode)

        def final_eval(self):
            pass

    trainer = GlooTrainer if a.mode == "gloo" else YoloDataTrainer
    seen = {}

    def remember(tr):
        ld = tr.train_loader
        seen.update(images=len(ld.dataset), steps=len(ld), per_rank=len(ld.sampler), batch=ld.batch_size,
                    group=dist.is_initialized(), loss=_total(tr.tloss),
                    world=tr.world_size)

    t = time.perf_counter()
    model = YOLO("yolo11n.yaml")
    model.add_callback("on_train_epoch_end", remember)
    try:
        model.train(data=a.data, trainer=trainer, epochs=a.epochs, imgsz=a.imgsz, batch=a.batch, workers=a.workers,
                    device="cpu", plots=False, amp=False, val=True, close_mosaic=1, seed=0, project=a.project,
                    name=f"ddp_{a.mode}", exist_ok=True, verbose=False)
        print(f"DDP rank {rank} ({a.mode}): world size {seen.get('world')}, process group {seen.get('group')}, "
              f"{seen.get('images')} train images, {seen.get('per_rank')} items in {seen.get('steps')} steps of "
              f"{seen.get('batch')} per rank, last loss {seen.get('loss')}, {time.perf_counter() - t:.1f} s", flush=True)
    except Exception as e:
        print(f"DDP rank {rank} ({a.mode}): {type(e).__name__}: {str(e)[:300]}", flush=True)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
