"""Pascal VOC read in place: a folder with ``Annotations/*.xml`` and ``JPEGImages/``, its
``ImageSets/Main/*.txt`` id lists, and the reader that turns one XML file into YOLO rows.

Boxes are converted as YOLOv5's and Ultralytics' VOC converter does (``data/VOC.yaml``): pixel corners,
1-based, normalised by the size the XML states, ``x = ((xmin + xmax) / 2 - 1) / width``,
``w = (xmax - xmin) / width``; ``difficult`` objects are left out unless ``keep_difficult``.  Unlike the
converter, nothing is silently lost: an object whose name is not one of the names, a box outside the
image or of no size, and a stated size that disagrees with the image are named problems.  Nothing is
written: no ``labels/`` folder is made.
"""
from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from xml.parsers import expat

import numpy as np

from .base import LabelFormat, SourceOptions, SplitSource
from .labelfile import NotRegular, normalising_size, open_regular, read_limited, without_duplicates
from .problems import LabelError, Problem
from .sources import IMG_FORMATS, default_cache_file, read_list

ANNOTATIONS, IMAGES, IMAGE_SETS = "Annotations", "JPEGImages", "ImageSets"


def is_voc_root(folder: Path) -> bool:
    """A VOC folder: ``Annotations/`` and ``JPEGImages/`` side by side."""
    return (folder / ANNOTATIONS).is_dir() and (folder / IMAGES).is_dir()


def voc_root_of(entry: Path) -> Optional[Path]:
    """The VOC folder ``entry`` names: itself, or, for a ``.txt`` under its ``ImageSets/``
    (``ImageSets/Main/train.txt``), the folder holding ``ImageSets``.  None otherwise."""
    if entry.is_dir():
        return entry if is_voc_root(entry) else None
    if entry.suffix.lower() != ".txt":
        return None
    for parent in list(entry.parents)[:3]:
        if parent.name == IMAGE_SETS and is_voc_root(parent.parent):
            return parent.parent
    return None


@dataclass
class VocListing:
    """One VOC entry's pairs: ``im_files[i]`` and its ``xml_files[i]``, sorted by image path;
    ``problems``: the list's lines that were left out."""
    root: Path
    im_files: List[str]
    xml_files: List[str]
    problems: List[Problem] = field(default_factory=list)


def list_voc(entry: Path) -> VocListing:
    """The images and XML files of a VOC folder (every XML in ``Annotations/``) or of one of its
    ``ImageSets`` lists (one image id a line; a class list's second column, ``id  1``, is ignored; a
    line holding a NUL byte is a problem, see ``sources.read_list``).

    An id's image is ``JPEGImages/<id>.<suffix>`` for any image suffix (``.jpg`` first when several);
    an id without an image keeps ``<id>.jpg``, which the scan then reports missing.
    """
    root = voc_root_of(entry)
    if root is None:
        raise ValueError(f"{entry} is not a VOC folder (Annotations/ and JPEGImages/) or a list in its ImageSets/")
    ann, img = root / ANNOTATIONS, root / IMAGES
    problems: List[Problem] = []
    if entry.is_dir():
        ids = sorted(f[:-4] for f in os.listdir(ann) if f.lower().endswith(".xml") and not f.startswith("."))
    else:
        lines, problems = read_list(entry)
        ids = [line.split()[0] for line in lines]
    by_stem: Dict[str, str] = {}
    for name in sorted(os.listdir(img), key=lambda f: (not f.lower().endswith(".jpg"), f)):
        stem, _, suffix = name.rpartition(".")
        if suffix.lower() in IMG_FORMATS and stem not in by_stem:
            by_stem[stem] = name
    pairs = sorted({(os.path.join(img, by_stem.get(i, i + ".jpg")), os.path.join(ann, i + ".xml")) for i in ids})
    return VocListing(root, [p[0] for p in pairs], [p[1] for p in pairs], problems)


def _refuse_declarations(*_) -> None:
    # A VOC file never declares a DOCTYPE or entities; entity bombs ("billion laughs") do.  Refused by
    # the parser, which has decoded the text, so no encoding (UTF-16 with or without a BOM) hides one.
    raise LabelError("XML with a DOCTYPE or entity declarations is not a VOC annotation")


def _tree(raw: bytes) -> ET.Element:
    """Parse XML bytes into elements with expat (which detects the encoding from the BOM or the
    declaration), refusing any DOCTYPE or entity declaration.  Raises LabelError."""
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = _refuse_declarations
    parser.EntityDeclHandler = _refuse_declarations
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.buffer_text = True  # one data call per text run, not one per line
    try:
        parser.Parse(raw, True)
        return builder.close()
    except (expat.ExpatError, LookupError, ValueError) as e:  # an encoding without a codec, or multi-byte
        raise LabelError(f"not valid XML ({e})") from None


def _parse(xml_file: str) -> ET.Element:
    """The XML's root element, read with the label files' limits.  Raises FileNotFoundError or LabelError."""
    try:
        f, st = open_regular(xml_file)
    except NotRegular as e:
        raise LabelError(f"annotation is not a regular file ({e.kind})") from None
    with f:
        raw = read_limited(f, st.st_size, "annotation")
    return _tree(raw)


def names_in(xml_files: Sequence[str]) -> List[str]:
    """Sorted object names found in the XML files (unreadable files are the scan's to report)."""
    found = set()
    for x in xml_files:
        try:
            root = _parse(x)
        except (OSError, LabelError):
            continue
        found.update((o.findtext("name") or "").strip() for o in root.iter("object"))
    found.discard("")
    return sorted(found)


def _number(obj: ET.Element, path: str, where: str) -> float:
    text = obj.findtext(path)
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise LabelError(f"{where}: {path} is {'missing' if text is None else repr(text[:20])}, not a number") from None
    if not math.isfinite(v):
        raise LabelError(f"{where}: {path} is {text.strip()!r}")
    return v


def _stated_size(root: ET.Element) -> Optional[Tuple[float, float]]:
    """The XML's ``<size>`` (width, height), or None when it has no usable one."""
    size = root.find("size")
    try:
        sw, sh = float(size.findtext("width")), float(size.findtext("height"))
    except (AttributeError, TypeError, ValueError):
        return None
    return (sw, sh) if math.isfinite(sw) and math.isfinite(sh) and sw > 0 and sh > 0 else None


@dataclass(frozen=True)
class VocReader:
    """Reads VOC XML files for the scan (base.LabelReader).  ``names``: class names, index = class id."""
    names: Tuple[str, ...]
    keep_difficult: bool = False

    def describe(self, label: str) -> str:
        return label

    def read(self, xml_file: str, shape: Tuple[int, int]):
        try:
            root = _parse(xml_file)
        except FileNotFoundError:
            return np.zeros((0, 5), np.float32), None, "missing", []
        except OSError as e:
            raise LabelError(f"cannot read annotation ({e})") from None
        if root.tag != "annotation":
            raise LabelError(f"root element <{root.tag[:20]}>, not <annotation>")
        (sw, sh), warnings = normalising_size(_stated_size(root), shape, "XML", "no usable <size> in the XML")
        ids = {n: i for i, n in enumerate(self.names)}
        rows, unknown = [], Counter()
        for k, obj in enumerate(root.iter("object"), 1):
            name = (obj.findtext("name") or "").strip()
            where = f"object {k} ({name or 'no name'})"
            difficult = (obj.findtext("difficult") or "0").strip()
            if difficult not in ("0", "1"):
                raise LabelError(f"{where}: difficult is {difficult[:20]!r}, not 0 or 1")
            if difficult == "1" and not self.keep_difficult:
                continue  # as the converters do; keep_difficult=True keeps them
            if name not in ids:
                unknown[name] += 1
                continue
            x1, y1, x2, y2 = (_number(obj, f"bndbox/{t}", where) for t in ("xmin", "ymin", "xmax", "ymax"))
            if not (0 <= x1 and 0 <= y1 and x2 <= sw and y2 <= sh):
                warnings.append(f"{where}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) reaches outside the "
                                f"{sw:g}x{sh:g} image; clipped to it")
                x1, x2 = min(max(x1, 0.0), sw), min(max(x2, 0.0), sw)
                y1, y2 = min(max(y1, 0.0), sh), min(max(y2, 0.0), sh)
            if x2 <= x1 or y2 <= y1:
                warnings.append(f"{where}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) has no area; left out")
                continue
            # YOLOv5's convert_box, in float64: the 1-based corners move one pixel towards the origin
            rows.append((ids[name], ((x1 + x2) / 2 - 1) / sw, ((y1 + y2) / 2 - 1) / sh, (x2 - x1) / sw, (y2 - y1) / sh))
        for name, count in sorted(unknown.items()):
            warnings.append(f"{count} object{'s' if count > 1 else ''} named {name[:40]!r}, not one of the "
                            f"{len(self.names)} names; left out")
        if not rows:
            return np.zeros((0, 5), np.float32), None, "empty", warnings
        labels = np.array(rows, dtype=np.float64)
        # A box touching pixel 0 ends one pixel before the image under the 1-based shift: keep it inside.
        xyxy = np.concatenate([labels[:, 1:3] - labels[:, 3:5] / 2, labels[:, 1:3] + labels[:, 3:5] / 2], 1)
        if xyxy.min() < 0 or xyxy.max() > 1:
            xyxy = xyxy.clip(0, 1)
            labels[:, 1:3], labels[:, 3:5] = (xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]
        labels, _ = without_duplicates(labels.astype(np.float32), None, warnings)
        return labels, None, "ok", warnings


def _voc_annotation(im_file: str) -> str:
    """``.../JPEGImages/<stem>.<suffix>`` -> ``.../Annotations/<stem>.xml``."""
    head, _, name = im_file.rpartition(os.sep + IMAGES + os.sep)
    return os.path.join(head, ANNOTATIONS, name.rpartition(".")[0] + ".xml")


class VocFormat(LabelFormat):
    """Pascal VOC (base.LabelFormat): a VOC folder or lists in its ImageSets/, several joined
    (VOC2007 + VOC2012).  The fingerprint covers every image and XML file's stat, the names and
    ``keep_difficult``; without names they are the sorted object names of every XML file, read only
    when the split is scanned."""
    name = "voc"
    cuts_by_files = False

    def claims(self, entry: Path) -> bool:
        return voc_root_of(entry) is not None

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        im_files, xml_files, problems = [], [], []
        for e in entries:
            listing = list_voc(Path(e))
            im_files += listing.im_files
            xml_files += listing.xml_files
            problems += listing.problems
        if not im_files:
            raise FileNotFoundError(f"no images listed in {entries[0] if len(entries) == 1 else entries}")
        names = list(options.names) if options.names else None
        keep = options.keep_difficult
        settings = {"format": "voc", "names": names, "keep_difficult": keep, "voc": 1}

        def discover():
            found = names_in(xml_files)
            return found, VocReader(tuple(found), keep)
        return SplitSource(self.name, im_files, xml_files, xml_files, VocReader(tuple(names), keep) if names else None,
                           names, settings, default_cache_file(entries, xml_files[0]), _voc_annotation, problems,
                           discover=discover)

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]:
        return _voc_annotation


FORMAT = VocFormat()
