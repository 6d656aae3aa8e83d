"""Parity check for segmentation: ``yolo_data.integrations.yolov5_segment.create_dataloader`` against YOLOv5 7.0's
``utils/segment/dataloaders.create_dataloader``, with augment=False.

For every split of the dataset (default coco128-seg), both overlap modes and mask ratios 1 and 4, and
two loader shapes (square 640, and rect with pad 0.5 as YOLOv5's segment val.py uses), both loaders
are built on their own copy of the dataset (each writes a label cache beside the labels), iterated
fully with workers=0 and shuffle=False, and compared batch by batch:

* paths: the same image (relative to each copy's root) at the same place,
* images and the whole (N, 6) targets tensor exactly equal (``torch.equal``),
* shapes equal by value,
* masks equal bit for bit in value and shape: overlap (B, H/r, W/r) or per instance (N, H/r, W/r).
  Their dtype is reported apart: YOLOv5 gives an image without instances float32 zeros, so a batch
  holding one has float32 masks (``torch.cat`` promotes), where yolo_data's stay uint8.

Run with the benchmark environment (BENCHMARKS.md, Setup); yolo_data comes from this checkout::

    python benchmarks/compat/parity_yolov5_seg.py [--quick] [--root DIR] [--dataset coco128-seg] [--verbose]

Exits 0 when everything is equal (dtype notes aside), 1 otherwise.  Nothing outside a temporary
folder is written; network access is blocked.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import ensure_pkg_resources, isolate_environment, library_output  # noqa: E402
from parity_yolov5 import copy_dataset, rel, same_value, splits_of  # noqa: E402

STRIDE = 32
MAX_DETAILS = 3


@dataclass(frozen=True)
class Config:
    imgsz: int
    batch: int
    rect: bool
    pad: float
    overlap: bool
    ratio: int

    def __str__(self):
        return (f"{self.imgsz} {'rect' if self.rect else 'sq'} pad{self.pad:g} b{self.batch} "
                f"{'overlap' if self.overlap else 'per-instance'} r{self.ratio}")


def configs(quick: bool) -> List[Config]:
    shapes = [(640, 16, False, 0.0), (640, 32, True, 0.5)]
    return [Config(*s, overlap=o, ratio=r) for s in shapes[:1 if quick else 2]
            for o in (True, False) for r in (1, 4)]


@dataclass
class Result:
    name: str
    config: str
    batches: int = 0
    images: int = 0
    equal: dict = field(default_factory=lambda: dict(paths=0, images=0, targets=0, shapes=0, masks=0))
    dtypes: set = field(default_factory=set)  # (yolov5 dtype, yolo_data dtype) pairs of differing batches
    details: List[str] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.batches > 0 and all(v == self.batches for v in self.equal.values())

    def note(self, text: str) -> None:
        if len(self.details) < MAX_DETAILS:
            self.details.append(text)


def describe_masks(m5: torch.Tensor, my: torch.Tensor) -> str:
    if m5.shape != my.shape:
        return f"shape {tuple(m5.shape)} vs {tuple(my.shape)}"
    diff = m5.double() != my.double()
    return f"{int(diff.sum())} of {diff.numel()} mask pixels differ"


def compare(r: Result, l5, ly, root5: Path, rooty: Path) -> None:
    nb5 = nby = 0
    for k, (b5, by) in enumerate(zip(l5, ly)):
        nb5 = nby = k + 1
        (i5, t5, p5, s5, m5), (iy, ty, py, sy, my) = b5, by
        r.batches += 1
        r.images += len(p5)
        checks = dict(paths=[rel(p, root5) for p in p5] == [rel(p, rooty) for p in py],
                      images=i5.shape == iy.shape and torch.equal(i5, iy),
                      targets=t5.shape == ty.shape and torch.equal(t5, ty),
                      shapes=same_value(s5, sy),
                      masks=m5.shape == my.shape and torch.equal(m5.double(), my.double()))
        for name, ok in checks.items():
            r.equal[name] += ok
            if not ok:
                what = describe_masks(m5, my) if name == "masks" else ""
                r.note(f"batch {k}: {name} differ {what}".rstrip())
        if m5.dtype != my.dtype:
            r.dtypes.add((str(m5.dtype), str(my.dtype)))
    rest5, resty = sum(1 for _ in l5) - nb5, sum(1 for _ in ly) - nby
    if rest5 or resty:
        r.error = f"number of batches differs ({nb5 + rest5} vs {nby + resty})"


def run_case(creators, name: str, split: str, cfg: Config, roots, verbose: bool) -> Result:
    v5_create, yd_create = creators
    r = Result(name, str(cfg))
    root5, rooty = roots
    kw = dict(imgsz=cfg.imgsz, batch_size=cfg.batch, stride=STRIDE, augment=False, rect=cfg.rect, pad=cfg.pad,
              workers=0, shuffle=False, cache=False, rank=-1, mask_downsample_ratio=cfg.ratio,
              overlap_mask=cfg.overlap)
    with library_output(verbose):
        try:
            l5, _ = v5_create(str(root5 / "images" / split), **kw)
            ly, _ = yd_create(str(rooty / "images" / split), **kw)
            compare(r, l5, ly, root5, rooty)
        except Exception as e:  # report and go on with the other cases
            r.error = f"{type(e).__name__}: {e}"
    return r


def print_report(results: List[Result]) -> None:
    head = ("dataset/split", "config", "batches", "images", "paths", "imgs", "targets", "shapes", "masks",
            "mask dtype (yolov5 vs yolo_data)")
    rows = [(r.name, r.config, str(r.batches), str(r.images))
            + tuple(f"{r.equal[k]}/{r.batches}" for k in ("paths", "images", "targets", "shapes", "masks"))
            + (", ".join(f"{a} vs {b}" for a, b in sorted(r.dtypes)) or "same",) for r in results]
    widths = [max(len(x[i]) for x in (head, *rows)) for i in range(len(head))]
    for row in (head, ["-" * w for w in widths], *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    print("(paths .. masks: batches equal out of all; masks compared by value)")
    for r in results:
        if not r.ok:
            print(f"\n[{r.name} | {r.config}] MISMATCH")
            for text in ([r.error] if r.error else []) + r.details:
                print("  - " + text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="coco128-seg", help="dataset folder name under --root")
    p.add_argument("--root", type=Path, default=None,
                   help="folder holding the dataset, only read (default $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    p.add_argument("--quick", action="store_true", help="the first split, square loader only")
    p.add_argument("--verbose", action="store_true", help="show what the libraries print")
    args = p.parse_args(argv)
    common.require("parity_yolov5_seg.py", "yolov5")
    source = common.dataset(args.dataset, args.root)
    with tempfile.TemporaryDirectory(prefix="parity_yolov5_seg_") as tmp:
        tmp = Path(tmp)
        isolate_environment(tmp, "parity_yolov5_seg")
        with library_output(args.verbose):
            ensure_pkg_resources()
            from yolov5.utils.segment.dataloaders import create_dataloader as v5_create
            logging.getLogger("yolov5").setLevel(logging.ERROR)
            sys.dont_write_bytecode = True  # leave no __pycache__ in the checkout
            from yolo_data.integrations.yolov5_segment import create_dataloader as yd_create
        roots = tuple(copy_dataset(source, tmp / lib / args.dataset) for lib in ("yolov5", "yolo_data"))
        splits = splits_of(roots[0])
        results = []
        for split in splits[:1] if args.quick else splits:
            for cfg in configs(args.quick):
                results.append(run_case((v5_create, yd_create), f"{args.dataset}/{split}", split, cfg, roots,
                                        args.verbose))
                print(f"done {results[-1].name} {cfg}: {'equal' if results[-1].ok else 'DIFFERS'}",
                      file=sys.stderr, flush=True)
        print_report(results)
    return common.parity_verdict(results)


if __name__ == "__main__":
    sys.exit(main())
