"""A label format added from outside the package: defined here, registered with ``formats.register`` and
read by ``create_dataloader`` with no other module touched.

The format: a ``.csv`` of ``image,class,x1,y1,x2,y2`` rows (pixel corners) beside the images, one row per
object, images without rows being backgrounds.  Its batches must equal, bit for bit, those of the same
objects written as YOLO ``.txt`` files.
"""
import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np
import pytest
import torch

from yolo_data import create_dataloader, formats
from yolo_data.formats.base import LabelError, LabelFormat, SourceOptions, SplitSource
from yolo_data.formats.sources import IMG_FORMATS, default_cache_file
from conftest import write_image

# (name, (w, h), objects as (class, x1, y1, x2, y2) in pixels, the same objects as YOLO rows)
IMAGES = [
    ("a.jpg", (64, 32), [(0, 8, 4, 40, 28), (2, 0, 0, 16, 8)],
     "0 0.375 0.5 0.5 0.75\n2 0.125 0.125 0.25 0.25\n"),
    ("b.png", (32, 64), [(1, 4, 8, 28, 56)], "1 0.5 0.5 0.75 0.75\n"),
    ("c.jpg", (48, 48), [], None),  # no rows: a background
    ("d.jpg", (64, 64), [(1, 16, 16, 48, 32), (0, 32, 0, 64, 64)], "1 0.5 0.375 0.5 0.25\n0 0.75 0.5 0.5 1\n"),
]


@dataclass(frozen=True)
class CornersReader:
    """formats.base.LabelReader for one image's CSV rows: ``label`` is the tuple of (class, x1, y1, x2,
    y2) pixel rows the format found for the image; ``shape`` its (h, w)."""

    def read(self, label: Tuple[Tuple[float, ...], ...], shape: Tuple[int, int]):
        if not label:
            return np.zeros((0, 5), np.float32), None, "missing", []
        h, w = shape
        out = []
        for cls, x1, y1, x2, y2 in label:
            if not (0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h):
                raise LabelError(f"box {x1:g},{y1:g},{x2:g},{y2:g} is not inside the {w}x{h} image")
            out.append((cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h))
        return np.array(out, np.float64).astype(np.float32), None, "ok", []

    def describe(self, label) -> str:
        return "its CSV rows"


@dataclass(frozen=True)
class SameFile:
    """Every image's annotation file is the one CSV (a class, not a lambda: it travels to workers)."""
    csv_file: str

    def __call__(self, im_file: str) -> str:
        return self.csv_file


class CornersCsv(LabelFormat):
    """A ``.csv`` of ``image,class,x1,y1,x2,y2`` rows beside the images it names."""
    name = "corners-csv"
    cuts_by_files = False
    tasks = ("detect",)

    def claims(self, entry: Path) -> bool:
        return entry.suffix.lower() == ".csv"

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        (csv_file,) = (Path(e) for e in entries)
        rows = defaultdict(list)
        with open(csv_file, newline="") as f:
            for r in csv.DictReader(f):
                rows[r["image"]].append((int(r["class"]), *(float(r[k]) for k in ("x1", "y1", "x2", "y2"))))
        im_files = sorted(str(p) for p in csv_file.parent.iterdir() if p.suffix[1:].lower() in IMG_FORMATS)
        st = csv_file.stat()  # the fingerprint covers the CSV through the settings (one file for the split)
        settings = {"format": self.name, "csv": [str(csv_file), st.st_size, st.st_mtime_ns]}
        names = list(options.names) if options.names else []
        return SplitSource(self.name, im_files, [tuple(rows[Path(f).name]) for f in im_files], None,
                           CornersReader(), names, settings, default_cache_file(entries, None),
                           SameFile(str(csv_file)), nc=len(names) or options.nc)

    def annotation_file_of(self, first_label_file: Optional[str]) -> SameFile:
        return SameFile(str(first_label_file))


@pytest.fixture
def registered(monkeypatch):
    """CornersCsv registered for this test only (the registry is restored after it)."""
    monkeypatch.setattr(formats, "FORMATS", list(formats.FORMATS))
    formats.register(CornersCsv())


@pytest.fixture
def both(tmp_path):
    """(the CSV, the image folder): one folder of images with the CSV beside them and YOLO labels in
    ../labels, the same objects in both."""
    images, labels = tmp_path / "ds" / "images", tmp_path / "ds" / "labels"
    labels.mkdir(parents=True)
    lines = ["image,class,x1,y1,x2,y2"]
    for i, (name, (w, h), objects, yolo) in enumerate(IMAGES):
        write_image(images / name, w, h, seed=i)
        lines += [f"{name},{c},{x1},{y1},{x2},{y2}" for c, x1, y1, x2, y2 in objects]
        if yolo is not None:
            (labels / name).with_suffix(".txt").write_text(yolo)
    csv_file = images / "objects.csv"
    csv_file.write_text("\n".join(lines) + "\n")
    return csv_file, images


def batches(path, **kw) -> Tuple[list, Any]:
    loader, ds = create_dataloader(str(path), 64, 2, 32, workers=kw.pop("workers", 0), **kw)
    return list(loader), ds


def test_a_registered_format_reads_to_the_batches_of_the_same_yolo_labels_bit_for_bit(registered, both):
    csv_file, images = both
    got, ds = batches(csv_file)
    want, yolo = batches(images)
    assert ds.split_labels.kind == "corners-csv" and yolo.split_labels.kind == "yolo"
    assert ds.split_labels.built and ds.split_labels.cache_file is not None
    assert ds.label_files[0] == str(csv_file) and ds.split_labels.counts["boxes"] == 5
    assert len(got) == len(want) == 2
    for (ims, targets, paths, shapes), (ims2, targets2, paths2, shapes2) in zip(got, want):
        assert ims.dtype == ims2.dtype == torch.uint8 and torch.equal(ims, ims2)
        assert targets.dtype == targets2.dtype == torch.float32 and torch.equal(targets, targets2)
        assert paths == paths2 and shapes == shapes2


def test_a_registered_format_is_cached_and_read_by_workers_through_a_dataset_yaml(registered, both):
    csv_file, images = both
    yaml_file = csv_file.parents[1] / "data.yaml"
    yaml_file.write_text("path: .\nval: images/objects.csv\nnames: [cat, dog, bird]\n")
    first, ds = batches(yaml_file)
    assert ds.split_labels.built and ds.names == ["cat", "dog", "bird"]
    again, ds = batches(yaml_file, workers=2)  # the cache, named by the format's name, and 2 DataLoader workers
    assert not ds.split_labels.built and ds.split_labels.kind == "corners-csv"
    want, _ = batches(images)
    for a, b, c in zip(first, again, want):
        assert torch.equal(a[0], b[0]) and torch.equal(a[0], c[0])
        assert torch.equal(a[1], b[1]) and torch.equal(a[1], c[1])
