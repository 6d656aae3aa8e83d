"""Label formats, and the registry that picks one for a split: asked in order, the first format that
claims an entry reads it.

    memory   memory.py   an in-memory source's ``memory://<id>`` (memory.entry_of names a source so)
    subset   subset.py   a ``.subset.json`` list: some images of a split of any format, with its labels
    ndjson   ndjson.py   an .ndjson export (Ultralytics Platform), ``file.ndjson#split`` for one split
    coco     coco.py     a .json annotation file
    voc      voc.py      a folder with Annotations/ and JPEGImages/, or a list in its ImageSets/
    labelme  labelme.py  a folder of images with a LabelMe .json beside each, and no YOLO labels
    parquet  parquet.py  a .parquet table in the Hugging Face Hub's layout, a folder of them, a table yaml
    yolo     yolotxt.py  anything else: image folders, .txt image lists, images -> labels/*.txt

Each format is one module with one :class:`~yolo_data.formats.base.LabelFormat` object (the protocol is
in base.py); a built-in one is added to ``FORMATS`` below, any other at run time with :func:`register`
(tests/formats/test_registered_format.py registers a CSV of pixel corners from outside the package).  A
split names one format (several entries of it are joined: VOC2007 + VOC2012 lists, or two JSONs).
Nothing is converted and nothing is written here.  What the formats share, beside them:

    base       the protocol every format follows
    problems   a named problem of one file; ``LabelError``
    labelfile  reading one annotation file safely: regular files only, size limits, the normalising size
    sources    a path, a .txt list or a folder -> sorted image files; where labels and caches live
    datayaml   the dataset yaml, bounded and checked
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List

from ..storage import register as register_storage
from . import coco, labelme, memory, ndjson, parquet, subset, voc, yolotxt
from .base import LabelFormat, SourceOptions, SplitSource
from .memory import ItemSource, MemorySource, entry_of  # noqa: F401 (the names callers import from here)

# asked in this order; YOLO claims everything, so it stays last
# (a subset list reads its source through open_source, handed over here so that subset.py does not import this)
FORMATS: List[LabelFormat] = [memory.FORMAT, subset.SubsetFormat(lambda path, options: open_source(path, options)),
                              ndjson.FORMAT, coco.FORMAT, voc.FORMAT, labelme.FORMAT, parquet.FORMAT, yolotxt.FORMAT]
register_storage(memory.SCHEME, memory.MemoryBackend)  # an in-memory source's items are served from it


def register(fmt: LabelFormat) -> None:
    """Add a label format, asked before the built-in ones (a format of the same name is replaced).

    Register it in every process that reads labels (each DDP rank runs the training script, so
    registering at its top does it); DataLoader workers read none.  The label cache stores the
    format's name, and the other ranks and later runs find the format by it (:func:`get`).

    Args:
        fmt: an object following :class:`~yolo_data.formats.base.LabelFormat` (a subclass of it gets
            its defaults: ``tasks`` ('detect',) and no warm start).

    Returns:
        None; ``fmt`` now claims the split entries its ``claims`` accepts.
    """
    FORMATS[:] = [fmt] + [f for f in FORMATS if f.name != fmt.name]


def get(name: str) -> LabelFormat:
    """The format called ``name`` (as a label cache or another rank names it).

    Args:
        name: a format's ``name``.

    Returns:
        The registered format of that name.

    Raises:
        ValueError: no format of that name is registered.
    """
    for f in FORMATS:
        if f.name == name:
            return f
    raise ValueError(f"no label format {name!r} (known: {', '.join(f.name for f in FORMATS)})")


def format_of(entry) -> LabelFormat:
    """The format that reads one split entry.

    Args:
        entry: a split entry (a path or URL: folder, .txt list, annotation file).

    Returns:
        The first registered format whose ``claims`` accepts it (YOLO's, asked last, claims anything).
    """
    p = Path(entry)
    return next(f for f in FORMATS if f.claims(p))


def kind_of(entry) -> str:
    """The name of the format that reads one split entry.

    Args:
        entry: a split entry.

    Returns:
        ``format_of(entry).name``.
    """
    return format_of(entry).name


def entries(path) -> List[Any]:
    """The split entries ``path`` names.

    Args:
        path: one split entry, or a list or tuple of them.

    Returns:
        ``[path]``, or the list's items.
    """
    return list(path) if isinstance(path, (list, tuple)) else [path]


def split_format(path) -> LabelFormat:
    """The one format of every entry of ``path``.

    Args:
        path: one split entry, or a list of them.

    Returns:
        The format that reads them all.

    Raises:
        ValueError: the entries are read by different formats.
    """
    listed = entries(path)
    found = [format_of(e) for e in listed]
    if len({f.name for f in found}) > 1:
        raise ValueError(f"a split mixes label formats ({', '.join(sorted({f.name for f in found}))}): "
                         + ", ".join(f"{e} ({f.name})" for e, f in zip(listed, found))
                         + "; give each format its own split")
    return found[0]


def open_source(path, options: SourceOptions = SourceOptions()) -> SplitSource:
    """What the scan reads for the split ``path`` names, as its format lists it.

    Args:
        path: one split entry, or a list of entries of one format.
        options: the split's settings that are not files (class names, task, ...).

    Returns:
        The split's :class:`~yolo_data.formats.base.SplitSource`.

    Raises:
        FileNotFoundError, ValueError: naming the entry that cannot be read.
    """
    return split_format(path).open(entries(path), options)


def admit(path) -> None:
    """Let the storage in use read what the split's entries name and no path does (an NDJSON's
    http(s) image URLs): asked in every process that reads the split's images, before it reads them
    (a format with an ``admit(entries)`` method does this; the others need nothing).

    Args:
        path: one split entry, or a list of entries of one format.

    Returns:
        None.
    """
    # only formats that admit anything are asked (a claim of another format may list a folder: requests)
    admitting = [f for f in FORMATS if hasattr(f, "admit")]
    if any(f.claims(Path(e)) for f in admitting for e in entries(path)):
        fmt = split_format(path)
        if hasattr(fmt, "admit"):
            fmt.admit(entries(path))
