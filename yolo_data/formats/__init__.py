"""The registry of label formats: which format reads a split, asked in order, the first that claims
an entry reads it.

    coco     coco.py     a .json annotation file
    voc      voc.py      a folder with Annotations/ and JPEGImages/, or a list in its ImageSets/
    labelme  labelme.py  a folder of images with a LabelMe .json beside each, and no YOLO labels
    yolo     yolotxt.py  anything else: image folders, .txt image lists, images -> labels/*.txt

Each format is one module with one :class:`~yolo_data.formats.base.LabelFormat` object (the protocol is
in labelformat.py); a new one is written there and added to ``FORMATS`` below, or at run time with
:func:`register`.  A split names one format (several entries of it are joined: VOC2007 + VOC2012
lists, or two JSONs).  Nothing is converted and nothing is written here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List

from . import coco, labelme, voc, yolotxt
from .base import LabelFormat, SourceOptions, SplitSource

# asked in this order; YOLO claims everything, so it stays last
FORMATS: List[LabelFormat] = [coco.FORMAT, voc.FORMAT, labelme.FORMAT, yolotxt.FORMAT]


def register(fmt: LabelFormat) -> None:
    """Add a label format, asked before the built-in ones (a format of the same name is replaced)."""
    FORMATS[:] = [fmt] + [f for f in FORMATS if f.name != fmt.name]


def get(name: str) -> LabelFormat:
    """The format called ``name`` (as a label cache or another rank names it)."""
    for f in FORMATS:
        if f.name == name:
            return f
    raise ValueError(f"no label format {name!r} (known: {', '.join(f.name for f in FORMATS)})")


def format_of(entry) -> LabelFormat:
    """The format that reads one split entry."""
    p = Path(entry)
    return next(f for f in FORMATS if f.claims(p))


def kind_of(entry) -> str:
    """The name of the format that reads one split entry."""
    return format_of(entry).name


def entries(path) -> List[Any]:
    """The split entries ``path`` names: itself, or the items of a list or tuple."""
    return list(path) if isinstance(path, (list, tuple)) else [path]


def split_format(path) -> LabelFormat:
    """The one format of every entry of ``path`` (an entry or a list of them).  Raises ValueError for
    a split that mixes formats."""
    listed = entries(path)
    found = [format_of(e) for e in listed]
    if len({f.name for f in found}) > 1:
        raise ValueError(f"a split mixes label formats ({', '.join(sorted({f.name for f in found}))}): "
                         + ", ".join(f"{e} ({f.name})" for e, f in zip(listed, found))
                         + "; give each format its own split")
    return found[0]


def open_source(path, options: SourceOptions = SourceOptions()) -> SplitSource:
    """The :class:`SplitSource` of what ``path`` names (an entry or a list of entries of one format).
    Raises FileNotFoundError / ValueError naming the entry."""
    return split_format(path).open(entries(path), options)
