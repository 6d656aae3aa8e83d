#!/usr/bin/env python
"""Draw one batch of a dataset as a grid with boxes and class names, to see the augmentation before a
long run (YOLOv5's train_batch0.jpg).

    python tools/show_batch.py data/sample.yaml --out batch.jpg
    python tools/show_batch.py DATA --no-augment --rect --batch-size 8 --out val.jpg
"""
import argparse
import sys
from pathlib import Path

import cv2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from yolo_data import create_dataloader  # noqa: E402
from yolo_data.cli import SAMPLE_YAML  # noqa: E402
from yolo_data.report.plots import draw_batch  # noqa: E402
from yolo_data.formats.datayaml import is_dataset_yaml, load_dataset_yaml  # noqa: E402

HYP = Path(__file__).resolve().parents[1] / "data" / "hyps" / "hyp.scratch-low.yaml"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=str(SAMPLE_YAML), help="dataset yaml or image path")
    ap.add_argument("--out", default="batch.jpg")
    ap.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--hyp", default=str(HYP), help="hyp yaml (YOLOv5 keys)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--rect", action="store_true")
    ap.add_argument("--split", default=None, help="train/val/test for a yaml (default: train if augmenting)")
    args = ap.parse_args(argv)
    names = load_dataset_yaml(args.data).names if is_dataset_yaml(args.data) else None
    loader, dataset = create_dataloader(args.data, args.imgsz, args.batch_size, 32, hyp=args.hyp,
                                        augment=args.augment, rect=args.rect, workers=0, shuffle=args.augment,
                                        seed=args.seed, split=args.split)
    loader.sampler.set_epoch(args.epoch)
    imgs, targets, paths, _ = next(iter(loader))
    grid = draw_batch(imgs, targets, paths, names)
    if not cv2.imwrite(args.out, grid):
        print(f"error: cannot write {args.out}", file=sys.stderr)
        return 1
    print(f"{args.out}: {len(imgs)} images of {tuple(imgs.shape[2:])} with {len(targets)} boxes "
          f"({'augmented' if args.augment else 'not augmented'}, seed {args.seed}, epoch {args.epoch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
