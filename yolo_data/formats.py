"""Which label format a split is in, and what the scan needs from it: the images, beside each what its
reader reads, the files and settings the label cache's fingerprint covers, and the class names.

    YOLO   image folders, .txt image lists, images     -> labels/*.txt beside images/ (sources.py)
    COCO   a .json annotation file                     -> coco.py
    VOC    a folder with Annotations/ and JPEGImages/,
           or a list in its ImageSets/ (ids, not paths) -> voc.py

A split names one format (several entries of it are joined: VOC2007 + VOC2012 lists, or two JSONs).
Nothing is converted and nothing is written here.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import coco, voc
from .labels import LabelReader, Problem, YoloReader
from .sources import default_cache_file, img2label_path, list_images


@dataclass(frozen=True)
class SourceOptions:
    """Settings of a split's labels that are not files (the fingerprint covers them).

    ``names``: the dataset yaml's class names (index = class id), or None; ``keep_difficult``: keep
    VOC objects marked difficult (left out by default, as YOLOv5's and Ultralytics' converters do).
    """
    names: Optional[Sequence[str]] = None
    keep_difficult: bool = False
    nc: Optional[int] = None  # YOLO only: the number of classes when the names are not known


@dataclass
class SplitSource:
    """One split's inputs to the scan.

    ``labels[i]``: what ``reader`` reads for ``im_files[i]`` (a label file, or a COCO image's
    annotations).  ``label_files``: files the fingerprint stats pair by pair with the images (None: the
    images only; COCO's one JSON is in ``settings``).  ``names``: class names, or None until
    :meth:`find_names` reads them (VOC without a yaml).  ``problems``: found while listing.
    """
    kind: str
    im_files: List[str]
    labels: Sequence[Any]
    label_files: Optional[List[str]]
    reader: Optional[LabelReader]
    names: Optional[List[str]]
    settings: Dict[str, Any]
    default_cache: Path
    problems: List[Problem] = field(default_factory=list)
    keep_difficult: bool = False
    nc: Optional[int] = None  # YOLO labels' class ids must be below it (None: unknown)

    def find_names(self) -> List[str]:
        """The class names, reading them from the annotations when no yaml gave them (VOC: the sorted
        object names of every XML file; only needed when the split is scanned, not when cached)."""
        if self.names is None:
            self.names = voc.names_in(self.label_files or [])
            self.reader = voc.VocReader(tuple(self.names), self.keep_difficult)
        return self.names

    @property
    def label_file_of(self) -> Callable[[str], str]:
        """image file -> its annotation file, for ``dataset.label_files``."""
        return annotation_file_of(self.kind, self.settings["json"][0][0] if self.kind == "coco" else None)


def annotation_file_of(kind: str, json_file: Optional[str] = None) -> Callable[[str], str]:
    """image file -> its annotation file in format ``kind``: YOLO's ``labels/<stem>.txt``, VOC's
    ``Annotations/<stem>.xml``, or the COCO JSON (the first of a split of several)."""
    if kind == "coco":  # a partial, not a lambda: datasets travel to spawned DataLoader workers by pickle
        return functools.partial(_same_file, str(json_file))
    if kind == "voc":
        return _voc_annotation
    return img2label_path


def _same_file(json_file: str, im_file: str) -> str:
    return json_file


def _voc_annotation(im_file: str) -> str:
    head, _, name = im_file.rpartition(os.sep + voc.IMAGES + os.sep)
    return os.path.join(head, voc.ANNOTATIONS, name.rpartition(".")[0] + ".xml")


def kind_of(entry) -> str:
    """'coco', 'voc' or 'yolo' for one split entry."""
    p = Path(entry)
    if p.suffix.lower() == ".json":
        return "coco"
    if voc.voc_root_of(p) is not None:
        return "voc"
    return "yolo"


def _file_stat(path: Path) -> List:
    st = os.stat(path)
    return [str(path.absolute()), st.st_size, st.st_mtime_ns]


def coco_shortcut(path, options: SourceOptions):
    """(settings, default cache file) of a COCO split, made without reading its JSON, or None for other
    formats: a warm start compares them with the cache's and takes the image list from there (a
    290 MB JSON takes about 7 s to read; its size and mtime, microseconds)."""
    entries = list(path) if isinstance(path, (list, tuple)) else [path]
    if any(kind_of(e) != "coco" for e in entries) or not all(Path(e).is_file() for e in entries):
        return None
    return _coco_settings(entries, options), default_cache_file(path, None)


def _coco_settings(entries, options: SourceOptions) -> Dict[str, Any]:
    names = list(options.names) if options.names else None
    return {"format": "coco", "names": names, "json": [_file_stat(Path(e)) for e in entries], "coco": 1}


def open_source(path, options: SourceOptions = SourceOptions()) -> SplitSource:
    """The :class:`SplitSource` of what ``path`` names (a folder, .txt list, image, .json or VOC folder,
    or a list of those).  Raises FileNotFoundError / ValueError naming the entry."""
    entries = list(path) if isinstance(path, (list, tuple)) else [path]
    kinds = {kind_of(e) for e in entries}
    if len(kinds) > 1:
        raise ValueError(f"a split mixes label formats ({', '.join(sorted(kinds))}): "
                         + ", ".join(f"{e} ({kind_of(e)})" for e in entries) + "; give each format its own split")
    kind = kinds.pop()
    names = list(options.names) if options.names else None
    if kind == "yolo":
        listing = list_images(path)
        im_files = listing.files
        if not im_files:
            raise FileNotFoundError(f"no images found in {path}")
        lb_files = [img2label_path(f) for f in im_files]
        nc = len(names) if names else options.nc
        return SplitSource("yolo", im_files, lb_files, lb_files, YoloReader(nc), names or [], {},
                           default_cache_file(path, lb_files[0]), listing.problems, nc=nc)
    if kind == "voc":
        im_files, xml_files, problems = [], [], []
        for e in entries:
            listing = voc.list_voc(Path(e))
            im_files += listing.im_files
            xml_files += listing.xml_files
            problems += listing.problems
        if not im_files:
            raise FileNotFoundError(f"no images listed in {path}")
        reader = voc.VocReader(tuple(names), options.keep_difficult) if names else None
        settings = {"format": "voc", "names": names, "keep_difficult": options.keep_difficult, "voc": 1}
        return SplitSource("voc", im_files, xml_files, xml_files, reader, names, settings,
                           default_cache_file(path, xml_files[0]), problems, keep_difficult=options.keep_difficult)
    for e in entries:
        if not Path(e).is_file():
            raise FileNotFoundError(f"COCO annotation file {e} does not exist")
    splits = [coco.read_coco(e, names) for e in entries]
    found = splits[0].names
    for s in splits[1:]:
        if s.names != found:
            raise ValueError(f"{s.json_file} and {splits[0].json_file} define other classes "
                             f"({s.names[:5]} vs {found[:5]}); give the dataset yaml 'names' to map both")
    pairs = sorted(((f, im) for s in splits for f, im in zip(s.im_files, s.images)), key=lambda p: p[0])
    if not pairs:
        raise FileNotFoundError(f"no images listed in {path}")
    settings = _coco_settings(entries, options)
    return SplitSource("coco", [p[0] for p in pairs], [p[1] for p in pairs], None, coco.CocoReader(),
                       names or found, settings, default_cache_file(path, None),
                       [p for s in splits for p in s.problems])
