"""Write a grayscale and an N-band copy of a YOLO dataset, for datasets of 1 and N channels
(``channels:`` in the dataset yaml), with the same labels.

Under ``OUT`` (which must not lie inside the source; the source is only read):

- ``<name>-gray/``: every image as a 1-channel JPEG (quality 95) of its luma, OpenCV's
  BGR-to-gray (0.299 R + 0.587 G + 0.114 B) of the upright decoded photo; ``channels: 1``;
- ``<name>-<N>band/``: every image as an N-page TIFF (8-bit, one page a band, LZW), ``channels: N``.
  The bands are made from the photo's colours, as Ultralytics' own ``coco8-multispectral`` sample is
  said to be (RGB interpolated across the visible spectrum): B, G and R are taken as samples of the
  spectrum at 450, 550 and 650 nm, and band k (of N, at wavelengths evenly spaced from 450 to 650 nm,
  shortest first) is the linear interpolation between the two nearest of them, rounded.  Band 0 is
  B, band N - 1 is R, and with N = 3 the bands are B, G, R.  Such bands carry no more information than
  the photo: they are for measuring the cost of N channels and checking their plumbing, not for
  teaching a model anything spectral.

Each copy mirrors ``images/<split>/...`` and ``labels/<split>/...`` (labels copied as they are, images
renamed to ``.jpg`` or ``.tif``) and has a ``<name>-gray.yaml`` / ``<name>-<N>band.yaml`` with ``path: .``,
the source yaml's split keys and ``names``, and ``channels``.  An existing copy is written again.

Run: ``python benchmarks/generators/make_channels.py OUT [--source $YOLO_DATA_BENCH_DATA/coco128]
[--bands 10] [--limit N]`` (``--limit``: the first N images of each split, for a quick test).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import cv2
import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
# the datasets folder as benchmarks/common.py finds it: $YOLO_DATA_BENCH_DATA, else ../shared/datasets
DEFAULT_SOURCE = Path(os.environ.get("YOLO_DATA_BENCH_DATA") or REPO.parent / "shared" / "datasets") / "coco128"
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
BGR_NM = (450.0, 550.0, 650.0)  # the wavelengths B, G and R stand for


def spectral_bands(bgr: np.ndarray, n: int) -> List[np.ndarray]:
    """n (h, w) uint8 bands from (h, w, 3) uint8 BGR: the colours linearly interpolated across 450-650 nm
    (see the module docstring), shortest wavelength first."""
    f = bgr.astype(np.float32)
    out = []
    for nm in np.linspace(BGR_NM[0], BGR_NM[-1], n):
        k = min(int(np.searchsorted(BGR_NM, nm, side="right")) - 1, 1)  # the pair (k, k + 1) around nm
        t = (nm - BGR_NM[k]) / (BGR_NM[k + 1] - BGR_NM[k])
        out.append(np.clip(np.rint((1 - t) * f[..., k] + t * f[..., k + 1]), 0, 255).astype(np.uint8))
    return out


def dataset_yaml(source: Path) -> dict:
    """The source's dataset yaml (the one .yaml in its folder), or {} when there is none."""
    found = sorted(source.glob("*.yaml"))
    return yaml.safe_load(found[0].read_text()) or {} if found else {}


def copy_channels(source: Path, out: Path, bands: int = 10, limit: int = 0, gray: bool = True) -> List[Path]:
    """Write both copies of ``source`` under ``out`` (the gray one only where ``gray``, the N-band one
    only where ``bands``); returns their yaml paths (gray first)."""
    source, out = source.resolve(), out.resolve()
    if out == source or source in out.parents:
        raise SystemExit(f"{out} lies inside the source {source}: give a folder outside it")
    if not (source / "images").is_dir():
        raise SystemExit(f"{source} has no images/ folder (a YOLO dataset: images/<split>, labels/<split>)")
    meta = dataset_yaml(source)
    copies = {"gray": out / f"{source.name}-gray", "bands": out / f"{source.name}-{bands}band"}
    copies = {k: v for k, v in copies.items() if (gray if k == "gray" else bands)}
    for folder in copies.values():
        shutil.rmtree(folder, ignore_errors=True)
    for split in sorted(p for p in (source / "images").iterdir() if p.is_dir()):
        images = sorted(p for p in split.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        for image in images[:limit or None]:
            rel = image.relative_to(source / "images")
            bgr = cv2.imread(str(image), cv2.IMREAD_COLOR)
            if bgr is None:
                print(f"skipped {image}: not decodable", file=sys.stderr)
                continue
            label = (source / "labels" / rel).with_suffix(".txt")
            for key, folder in copies.items():
                dst = (folder / "images" / rel).with_suffix(".jpg" if key == "gray" else ".tif")
                dst.parent.mkdir(parents=True, exist_ok=True)
                if key == "gray":
                    ok = cv2.imwrite(str(dst), cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY), [cv2.IMWRITE_JPEG_QUALITY, 95])
                else:
                    ok = cv2.imwritemulti(str(dst), spectral_bands(bgr, bands))
                if not ok:
                    raise SystemExit(f"could not write {dst}")
                if label.is_file():
                    (folder / "labels" / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(label, (folder / "labels" / rel).with_suffix(".txt"))
    written = []
    for key, folder in copies.items():
        splits = {k: meta[k] for k in ("train", "val", "test") if isinstance(meta.get(k), str)}
        if not splits:  # no yaml: every split folder as it is
            splits = {p.name: f"images/{p.name}" for p in sorted((folder / "images").iterdir())}
        doc = {"path": ".", **splits, "names": meta.get("names", {}), "channels": 1 if key == "gray" else bands}
        written.append(folder / f"{folder.name}.yaml")
        folder.mkdir(parents=True, exist_ok=True)
        written[-1].write_text(yaml.safe_dump(doc, sort_keys=False))
    return written


def channel_copies(source: Path, out: Path, channels, limit: int = 0) -> Dict[int, Path]:
    """{C: yaml} of a copy of ``source`` for each C of ``channels`` (1: the grayscale copy; any other but
    3, which is the colour original: the C-band copy), each written once under ``out/c<C>``."""
    copies: Dict[int, Path] = {}
    for c in sorted(set(channels)):
        if c == 3 or c < 1:
            raise ValueError(f"channels {c}: 1 (grayscale) or 2 and more but 3 (the colour original is the source)")
        copies[c] = copy_channels(source, out / f"c{c}", bands=0 if c == 1 else c, limit=limit, gray=c == 1)[0]
    return copies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the folder the copies are written into")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a YOLO dataset (default: %(default)s)")
    ap.add_argument("--bands", type=int, default=10, help="bands of the multi-band copy (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=0, help="the first N images of each split (0: all)")
    args = ap.parse_args()
    if args.bands < 2:
        raise SystemExit("--bands must be 2 or more")
    for path in copy_channels(args.source, args.out, args.bands, args.limit):
        print(path)


if __name__ == "__main__":
    main()
