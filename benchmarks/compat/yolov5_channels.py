"""Datasets of 1, 4 and 10 channels trained for an epoch through yolo_data's YOLOv5 ``create_dataloader``.

    python benchmarks/compat/yolov5_channels.py [--channels 1 4 10] [--limit 16] [--imgsz 64]

The datasets are copies of the first ``--limit`` images of each split of coco128, written into a
temporary folder by benchmarks/generators/make_channels.py: grayscale JPEGs (``channels: 1``) and N-page
TIFFs, one band a page (``channels: N``).

For each: YOLOv5's ``Model(yolov5n.yaml, ch=C, nc=80)`` (its train.py builds ``ch=3``; the rest of its
model code takes any ``ch``), its ``ComputeLoss`` with hyp.scratch-low scaled as its train.py scales it,
and one epoch of yolo_data's ``create_dataloader`` with that hyp (mosaic, random perspective, flips; HSV
only at C = 3) on the train split's folder, as train.py hands it over, with the ``channels`` setting:
forward, loss, backward and an SGD step on every batch.  Printed: the first convolution's
``in_channels``, the batches' shape and dtype, the number of steps and the losses.
"""
from __future__ import annotations

import argparse
import logging
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

sys.path.insert(0, str(common.GENERATORS))
from make_channels import channel_copies  # noqa: E402


def train_epoch(data: Path, channels: int, a) -> str:
    """One epoch of a YOLOv5n of ``channels`` input channels on ``data``'s train split; one line."""
    import torch
    import yaml
    import yolov5
    from yolov5.models.yolo import Model
    from yolov5.utils.loss import ComputeLoss
    from yolo_data import create_dataloader

    spec = yaml.safe_load(data.read_text())
    nc = len(spec["names"])
    pkg = Path(yolov5.__file__).parent
    hyp = yaml.safe_load((pkg / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    torch.manual_seed(0)
    with common.library_output(a.verbose):
        model = Model(str(pkg / "models" / "yolov5n.yaml"), ch=channels, nc=nc)
    nl = model.model[-1].nl  # the loss gains as YOLOv5's train.py scales them
    hyp["box"] *= 3 / nl
    hyp["cls"] *= nc / 80 * 3 / nl
    hyp["obj"] *= (a.imgsz / 640) ** 2 * 3 / nl
    model.nc, model.hyp, model.names = nc, hyp, spec["names"]
    compute_loss = ComputeLoss(model)
    opt = torch.optim.SGD(model.parameters(), lr=hyp["lr0"], momentum=hyp["momentum"], nesterov=True)
    stride = max(int(model.stride.max()), 32)
    train_path = data.parent / spec["train"]  # what train.py hands create_dataloader: the split, not the yaml
    loader, dataset = create_dataloader(str(train_path), a.imgsz, a.batch, stride, hyp=hyp, augment=True,
                                        workers=a.workers, shuffle=True, seed=0, channels=channels,
                                        cache_dir=str(data.parent / "cache"))
    model.train()
    shapes, losses, steps = set(), [], 0
    for imgs, targets, paths, _ in loader:
        shapes.add((tuple(imgs.shape[1:2]), str(imgs.dtype)))
        pred = model(imgs.float() / 255)
        loss, items = compute_loss(pred, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(items.tolist())
        steps += 1
    first = model.model[0].conv
    finite = all(math.isfinite(v) for row in losses for v in row)
    bands = sorted(s[0][0] for s in shapes)
    ok = first.in_channels == channels and bands == [channels] and steps == len(loader) and finite
    box, obj, cls = losses[-1]
    return (f"[{channels} channels] first conv in_channels {first.in_channels}; batches of {'/'.join(map(str, bands))} "
            f"channels {'/'.join(sorted(s[1] for s in shapes))}, e.g. {tuple(imgs.shape)}; {steps} of {len(loader)} "
            f"steps ({len(dataset)} images), last box/obj/cls loss {box:.4f}/{obj:.4f}/{cls:.4f}; epoch finished: {ok}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--channels", type=int, nargs="+", default=[1, 4, 10])
    p.add_argument("--source", type=Path, default=None, help="a YOLO dataset (default: coco128 of the datasets folder)")
    p.add_argument("--limit", type=int, default=16, help="the first N images of each split")
    p.add_argument("--imgsz", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    common.require("yolov5_channels.py", "yolov5")
    tmp = Path(tempfile.mkdtemp(prefix="yolov5_channels_"))
    common.isolate_environment(tmp, "yolov5_channels")
    common.ensure_pkg_resources()
    common.numpy_compat()
    logging.getLogger("yolov5").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    source = a.source or common.dataset("coco128")
    copies = channel_copies(source, tmp, a.channels, a.limit)
    with common.library_output(a.verbose):  # its log handlers keep the stream they find at import
        import yolov5
        import yolov5.models.yolo  # noqa: F401
    print(f"yolov5 {yolov5.__version__}; copies of the first {a.limit} images of each split of {source.name} "
          f"(make_channels.py); yolov5n.yaml from scratch, imgsz {a.imgsz}, batch {a.batch}, workers {a.workers}, CPU")
    for c in a.channels:
        print("  " + train_epoch(copies[c], c, a))
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    print("\n" + common.footer())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
