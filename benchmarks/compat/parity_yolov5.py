"""Parity check: yolo_data's ``create_dataloader`` against YOLOv5 7.0's, with augment=False.

For every dataset split and loader configuration this builds both loaders on the same files (each
library on its own temporary copy of the dataset, each writing its label cache beside the labels),
iterates both fully with workers=0 and shuffle=False, and checks, per image of every batch:

* image tensors exactly equal (``torch.equal``; otherwise the max abs pixel difference is reported),
* targets exactly equal, per image and as each batch's whole (N, 6) tensor (a mismatch says whether
  the rows are equal after sorting them within each image),
* paths: the same image (relative to each copy's root) at the same batch and position,
* shapes ``((h0, w0), ((h/h0, w/w0), (padw, padh)))`` equal by value (Python vs NumPy number types
  are allowed to differ, values are not).

Images are paired by path, so an image that only one library keeps is reported once rather than
shifting every later comparison.  Also compared per dataset: ``len(dataset)``, ``dataset.im_files``
order, ``dataset.labels`` (per image, values and dtype), ``dataset.shapes`` and, with rect,
``dataset.batch_shapes``.

It needs an environment with both ``yolov5`` (pip package 7.0.x) and yolo_data's dependencies (the
benchmark environment, BENCHMARKS.md, Setup); yolo_data itself is imported from this checkout.  The
datasets are read from ``--root``, $YOLO_DATA_BENCH_DATA or ../shared/datasets.  Run from anywhere::

    python benchmarks/compat/parity_yolov5.py            # coco128 and bccd, all configs
    python benchmarks/compat/parity_yolov5.py --quick    # coco128 train, 2 configs
    python benchmarks/compat/parity_yolov5.py --datasets coco128 --root /path/to/datasets
    (--verbose shows the libraries' own output: progress bars, cache and settings notices)

Exits 0 when everything is equal, 1 when anything differs.  Nothing outside a temporary folder is
written (YOLOv5/Ultralytics settings and all caches go there too); network access is blocked.
"""
from __future__ import annotations

import argparse
import logging
import numbers
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import ensure_pkg_resources, isolate_environment, library_output  # noqa: E402

ALL_DATASETS = ("coco128", "bccd")
STRIDE = 32
MAX_DETAILS = 3  # mismatching images listed per check


@dataclass(frozen=True)
class Config:
    imgsz: int
    batch: int
    rect: bool
    pad: float = 0.0

    def __str__(self):
        return f"{self.imgsz} {'rect' if self.rect else 'sq'} pad{self.pad:g} b{self.batch}"


CONFIGS = (
    Config(640, 16, rect=False),
    Config(640, 32, rect=True, pad=0.5),  # YOLOv5's val loader
    Config(320, 8, rect=True, pad=0.0),
    Config(416, 7, rect=False),
)


# -- environment: keep both libraries offline and inside the temp folder ---------------------------
def import_loaders():
    """(yolov5 create_dataloader, yolo_data create_dataloader)."""
    ensure_pkg_resources()
    from yolov5.utils.dataloaders import create_dataloader as v5_create
    logging.getLogger("yolov5").setLevel(logging.ERROR)
    sys.dont_write_bytecode = True  # leave no __pycache__ in the checkout
    from yolo_data import create_dataloader as yd_create
    return v5_create, yd_create


def copy_dataset(src: Path, dst: Path) -> Path:
    """A writable copy of ``src`` (real copies, not links: YOLOv5 may rewrite a damaged JPEG in place)."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile, ignore=shutil.ignore_patterns("*.cache"))
    for dirpath, _, filenames in os.walk(dst):  # the source folders are read-only; copytree keeps that
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)
    return dst


def splits_of(ds_root: Path) -> List[str]:
    return sorted(p.name for p in (ds_root / "images").iterdir() if p.is_dir())


# -- comparison helpers ----------------------------------------------------------------------------
def same_value(a, b) -> bool:
    """Nested tuples/lists/arrays of numbers equal by value (number types may differ)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool((a == b).all())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (numbers.Number, np.number)) and isinstance(b, (numbers.Number, np.number)):
        return bool(a == b)
    return a == b


def sorted_rows(t):
    """Rows of a (n, k) tensor in lexicographic order."""
    a = t.numpy()
    return a[np.lexsort(a.T[::-1])] if len(a) else a


def rel(path: str, root: Path) -> str:
    return os.path.relpath(path, root)


@dataclass
class Result:
    """Counts and notes for one (dataset/split, config) comparison."""
    name: str
    config: str
    batches: int = 0
    images: int = 0
    img_eq: int = 0
    tgt_eq: int = 0
    tgt_sorted_eq: int = 0
    shape_eq: int = 0
    path_eq: int = 0
    batch_tgt_eq: int = 0  # batches whose whole targets tensors are equal
    attrs: List[str] = field(default_factory=list)  # dataset-level mismatches
    details: List[str] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        n = self.images
        return (self.error is None and not self.attrs and n > 0
                and self.img_eq == self.tgt_eq == self.shape_eq == self.path_eq == n
                and self.batch_tgt_eq == self.batches)

    def note(self, kind: str, text: str) -> None:
        if sum(d.startswith(kind) for d in self.details) < MAX_DETAILS:
            self.details.append(f"{kind}: {text}")


def compare_datasets(r: Result, v5, yd, root5: Path, rooty: Path, rect: bool) -> None:
    """Dataset-level attributes: len, im_files order, and per image (matched by path) labels and shapes;
    batch_shapes when rect."""
    if len(v5) != len(yd):
        r.attrs.append(f"len {len(v5)} vs {len(yd)}")
    f5 = [rel(f, root5) for f in v5.im_files]
    fy = [rel(f, rooty) for f in yd.im_files]
    if f5 != fy:
        only5, onlyy = sorted(set(f5) - set(fy)), sorted(set(fy) - set(f5))
        first = next((i for i, (a, b) in enumerate(zip(f5, fy)) if a != b), min(len(f5), len(fy)))
        r.attrs.append(f"im_files differ (first at index {first}: {f5[first:first + 1]} vs {fy[first:first + 1]}; "
                       f"only in yolov5: {only5[:5]}; only in yolo_data: {onlyy[:5]})")
    pos_y = {f: i for i, f in enumerate(fy)}
    both = [(f, i, pos_y[f]) for i, f in enumerate(f5) if f in pos_y]
    bad = [f for f, i, j in both if not (v5.labels[i].dtype == yd.labels[j].dtype
                                         and np.array_equal(v5.labels[i], yd.labels[j]))]
    for f in bad[:MAX_DETAILS]:
        i, j = f5.index(f), pos_y[f]
        r.attrs.append(f"labels of {f}:\n  yolov5    {v5.labels[i].tolist()}\n  yolo_data {yd.labels[j].tolist()}")
    if len(bad) > MAX_DETAILS:
        r.attrs.append(f"labels differ for {len(bad)} images in all")
    s5, sy = np.asarray(v5.shapes), np.asarray(yd.shapes)
    bad = [(f, s5[i].tolist(), sy[j].tolist()) for f, i, j in both if not (s5[i] == sy[j]).all()]
    if bad:
        r.attrs.append(f"shapes (w, h) differ for {len(bad)} images: "
                       + ", ".join(f"{f} {a} vs {b}" for f, a, b in bad[:MAX_DETAILS]))
    if rect and not same_value(v5.batch_shapes, yd.batch_shapes):
        r.attrs.append(f"batch_shapes differ:\n  yolov5    {v5.batch_shapes.tolist()}\n"
                       f"  yolo_data {np.asarray(yd.batch_shapes).tolist()}")


def compare_image(r: Result, name: str, a, b) -> None:
    """One image's tensor, targets and shapes; ``a``/``b`` are (image, targets, shapes)."""
    (im5, t5, s5), (imy, ty, sy) = a, b
    if im5.shape == imy.shape and im5.dtype == imy.dtype and torch.equal(im5, imy):
        r.img_eq += 1
    elif im5.shape != imy.shape:
        r.note("image", f"{name}: size {tuple(im5.shape)} vs {tuple(imy.shape)}")
    else:
        diff = (im5.int() - imy.int()).abs()
        r.note("image", f"{name}: max abs pixel diff {int(diff.max())}, {int((diff > 0).sum())} values differ")
    t5, ty = t5[:, 1:], ty[:, 1:]  # column 0 (index in batch) is compared through the positions
    if t5.shape == ty.shape and t5.dtype == ty.dtype and torch.equal(t5, ty):
        r.tgt_eq += 1
    elif t5.shape == ty.shape and (sorted_rows(t5) == sorted_rows(ty)).all():
        r.tgt_sorted_eq += 1
        r.note("targets", f"{name}: equal only after sorting rows")
    elif t5.shape != ty.shape:
        r.note("targets", f"{name}: {len(t5)} rows vs {len(ty)} rows")
    else:
        i = int((t5 != ty).any(1).nonzero()[0, 0])
        r.note("targets", f"{name}: row {i} [cls x y w h] yolov5 {t5[i].tolist()} vs yolo_data {ty[i].tolist()} "
                          f"(max abs diff {float((t5 - ty).abs().max()):.3g})")
    if same_value(s5, sy):
        r.shape_eq += 1
    else:
        r.note("shapes", f"{name}: yolov5 {s5} vs yolo_data {sy}")


def items(loader, root: Path, batch_targets: dict):
    """(batch number, position in batch, relative path, (image, targets, shapes)) for every image;
    each batch's whole targets tensor goes into ``batch_targets``."""
    for k, (ims, targets, paths, shapes) in enumerate(loader):
        batch_targets[k] = targets
        for j in range(len(paths)):
            yield k, j, rel(paths[j], root), (ims[j], targets[targets[:, 0] == j], shapes[j])


def compare_batches(r: Result, l5, ly, root5: Path, rooty: Path) -> None:
    """Iterate both loaders fully and compare image by image.  Images are matched by path, so one
    image present in only one loader is reported once instead of shifting every later comparison;
    "paths eq" counts images found at the same batch and position in both.  Each batch's whole targets
    tensor (column 0 included) is compared too."""
    pending5, pendingy, bt5, bty = {}, {}, {}, {}
    nb5 = nby = 0
    for a, b in zip_longest(items(l5, root5, bt5), items(ly, rooty, bty)):
        for item, mine, other, is5 in ((a, pending5, pendingy, True), (b, pendingy, pending5, False)):
            if item is None:
                continue
            k, j, name, data = item
            if is5:
                nb5 = max(nb5, k + 1)
            else:
                nby = max(nby, k + 1)
            if name not in other:
                mine[name] = (k, j, data)
                continue
            ko, jo, odata = other.pop(name)
            (k5, j5, d5), (ky, jy, dy) = ((k, j, data), (ko, jo, odata)) if is5 else ((ko, jo, odata), (k, j, data))
            r.images += 1
            r.path_eq += (k5, j5) == (ky, jy)
            if (k5, j5) != (ky, jy):
                r.note("position", f"{name}: batch {k5} image {j5} in yolov5, batch {ky} image {jy} in yolo_data")
            compare_image(r, name, d5, dy)
    r.batches = min(nb5, nby)
    r.batch_tgt_eq = sum(torch.equal(bt5[k], bty[k]) for k in range(r.batches))
    if nb5 != nby:
        r.attrs.append(f"number of batches {nb5} vs {nby}")
    for name, (k, j, _) in sorted(pending5.items())[:MAX_DETAILS]:
        r.note("only in yolov5", f"{name} (batch {k} image {j})")
    for name, (k, j, _) in sorted(pendingy.items())[:MAX_DETAILS]:
        r.note("only in yolo_data", f"{name} (batch {k} image {j})")
    if pending5 or pendingy:
        r.attrs.append(f"images served by one loader only: {len(pending5)} yolov5, {len(pendingy)} yolo_data")


def run_case(creators, ds: str, split: str, cfg: Config, roots, verbose: bool = False) -> Result:
    v5_create, yd_create = creators
    r = Result(f"{ds}/{split}", str(cfg))
    (root5, rooty) = roots
    kw = dict(imgsz=cfg.imgsz, batch_size=cfg.batch, stride=STRIDE, augment=False, rect=cfg.rect, pad=cfg.pad,
              workers=0, shuffle=False, cache=False, rank=-1)
    with library_output(verbose):
        try:
            l5, d5 = v5_create(str(root5 / "images" / split), **kw)
            ly, dy = yd_create(str(rooty / "images" / split), **kw)
            compare_datasets(r, d5, dy, root5, rooty, cfg.rect)
            compare_batches(r, l5, ly, root5, rooty)
        except Exception as e:  # report and go on with the other cases
            r.error = f"{type(e).__name__}: {e}"
    return r


# -- report ------------------------------------------------------------------------------------------
def frac(k: int, n: int) -> str:
    return f"{k}/{n}"


def print_table(results: List[Result]) -> None:
    head = ("dataset/split", "config", "batches", "images eq", "targets eq", "batch targets eq", "shapes eq",
            "paths eq", "dataset attrs")
    rows = []
    for r in results:
        tgt = frac(r.tgt_eq, r.images) + (f" (+{r.tgt_sorted_eq} sorted)" if r.tgt_sorted_eq else "")
        attrs = "ERROR" if r.error else ("ok" if not r.attrs else f"{len(r.attrs)} differ")
        rows.append((r.name, r.config, str(r.batches), frac(r.img_eq, r.images), tgt,
                     frac(r.batch_tgt_eq, r.batches), frac(r.shape_eq, r.images), frac(r.path_eq, r.images), attrs))
    widths = [max(len(x[i]) for x in (head, *rows)) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    print(line(head))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))
    print("(images/targets/shapes eq: per image, matched by path; paths eq: same image at the same batch and "
          "position; batch targets eq: whole (N, 6) targets tensor of the batch)")
    for r in results:
        if r.ok:
            continue
        print(f"\n[{r.name} | {r.config}] MISMATCH")
        for text in ([r.error] if r.error else []) + r.attrs + r.details:
            print("  - " + text.replace("\n", "\n    "))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=list(ALL_DATASETS), help="dataset folder names under --root")
    p.add_argument("--root", type=Path, default=None,
                   help="folder holding the datasets, only read (default $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    p.add_argument("--quick", action="store_true", help="coco128 train only, 2 configs (ignores --datasets)")
    p.add_argument("--verbose", action="store_true", help="show what the libraries print (progress, warnings)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    common.require("parity_yolov5.py", "yolov5")
    datasets = ["coco128"] if args.quick else args.datasets
    sources = {ds: common.dataset(ds, args.root) for ds in datasets}
    with tempfile.TemporaryDirectory(prefix="parity_yolov5_") as tmp:
        tmp = Path(tmp)
        isolate_environment(tmp, "parity_yolov5")
        with library_output(args.verbose):
            creators = import_loaders()
        configs = CONFIGS[:2] if args.quick else CONFIGS
        results = []
        for ds in datasets:
            roots = tuple(copy_dataset(sources[ds], tmp / lib / ds) for lib in ("yolov5", "yolo_data"))
            splits = splits_of(roots[0])
            for split in (splits[:1] if args.quick else splits):
                for cfg in configs:
                    results.append(run_case(creators, ds, split, cfg, roots, args.verbose))
                    print(f"done {results[-1].name} {cfg}: {'equal' if results[-1].ok else 'DIFFERS'}",
                          file=sys.stderr, flush=True)
        print_table(results)
    return common.parity_verdict(results)


if __name__ == "__main__":
    sys.exit(main())
