"""LabelMe JSON read in place: a folder of images with one LabelMe ``.json`` beside each (same name,
``.json`` suffix), the form people convert today with labelme2yolo or labelme2coco.

Each JSON holds ``shapes`` (``label``, ``points`` in pixels from the top-left corner, ``shape_type``),
``imagePath``, ``imageWidth`` and ``imageHeight``.  A ``rectangle`` (two opposite corners, in any order)
becomes a box; a ``polygon`` (3 or more points; LabelMe's default when ``shape_type`` is absent)
becomes the row's segment and its envelope the box.  Coordinates are normalised by the size the JSON
states, checked against the image's as for VOC and COCO.  Class ids: the dataset yaml's ``names``, or
else the sorted labels found in every JSON of the split.

Nothing is silently lost: other shape types (circle, line, linestrip, point, mask), a label that is
not one of the names, shapes of fewer points than their type needs or of no area, points outside the
image (clipped) and an ``imagePath`` naming another file are named problems, and so is a JSON with no
image beside it.  An image with no JSON is a background, as a YOLO image without a label file.  The
image data a JSON may embed (``imageData``) is never decoded: the image file beside it is read.
Nothing is written.

A folder is LabelMe's when it holds images with a JSON beside them and no YOLO label files for them
(a folder with both stays YOLO's: its labels win, as they always have).
"""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .base import LabelFormat, SourceOptions, SplitSource
from .labelfile import NotRegular, normalising_size, open_regular, without_duplicates
from .problems import LabelError, Problem
from .sources import IMG_FORMATS, default_cache_file, img2label_path, walk_files

# LabelMe embeds the image (base64) by default, so its JSONs run to a few times an image's size
MAX_JSON_BYTES = 64 * 2**20
CLAIM_PROBES = 32  # images with a JSON beside them that decide whether YOLO labels exist for the folder
SHAPES = ("rectangle", "polygon")
_IMAGE_SUFFIXES = frozenset(IMG_FORMATS)


def json_of(im_file: str) -> str:
    """An image's LabelMe file: the same path with the ``.json`` suffix."""
    return im_file.rpartition(".")[0] + ".json"


def _annotated_images(folder: Path) -> List[str]:
    """Up to CLAIM_PROBES images directly in ``folder`` with a JSON of their name beside them; [] as
    soon as an image has a ``.txt`` of its name beside it (YOLO labels there), so a YOLO folder is
    rarely read far.  Hidden names are skipped."""
    images: dict = {}  # stem -> path
    jsons, texts, found = set(), set(), []
    try:
        entries = os.scandir(folder)
    except OSError:
        return []
    with entries:
        for e in entries:
            stem, _, suffix = e.name.rpartition(".")
            if e.name.startswith(".") or not stem:
                continue
            suffix = suffix.lower()
            if suffix in _IMAGE_SUFFIXES:
                if stem in texts:
                    return []
                images[stem] = e.path
                if stem in jsons:
                    found.append(e.path)
            elif suffix == "txt":
                if stem in images:
                    return []
                texts.add(stem)
            elif suffix == "json":
                jsons.add(stem)
                if stem in images:
                    found.append(images[stem])
            if len(found) >= CLAIM_PROBES:
                break
    return found


def _parse(json_file: str) -> Optional[dict]:
    """The JSON's object, or None when there is no file.  Raises LabelError."""
    try:
        f, st = open_regular(json_file)
    except FileNotFoundError:
        return None
    except NotRegular as e:
        raise LabelError(f"LabelMe file is not a regular file ({e.kind})") from None
    except OSError as e:
        raise LabelError(f"cannot read LabelMe file ({e})") from None
    with f:
        if st.st_size > MAX_JSON_BYTES:
            raise LabelError(f"LabelMe file is {st.st_size:,} bytes, over the limit of {MAX_JSON_BYTES:,} "
                             "(yolo_data.formats.labelme.MAX_JSON_BYTES)")
        raw = f.read(MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        raise LabelError(f"LabelMe file is more than {MAX_JSON_BYTES:,} bytes (yolo_data.formats.labelme.MAX_JSON_BYTES)")
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise LabelError("LabelMe file is not UTF-8 text") from None
    except RecursionError:
        raise LabelError("not a LabelMe file (JSON nested too deeply to read)") from None
    except ValueError as e:
        raise LabelError(f"not valid JSON ({str(e)[:80]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("shapes"), list):
        raise LabelError("not a LabelMe file (expected an object with a 'shapes' list)")
    return data


def _stated_size(data: dict) -> Optional[Tuple[float, float]]:
    """The JSON's (imageWidth, imageHeight), or None when it has no usable one."""
    w, h = data.get("imageWidth"), data.get("imageHeight")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in (w, h)):
        return float(w), float(h)
    return None


def _shape_type(shape: dict):
    """A shape's ``shape_type``; LabelMe writes 'polygon' when it gives none."""
    return shape.get("shape_type") or "polygon"


def _points(shape: dict) -> Optional[np.ndarray]:
    """A shape's points as (k, 2) float64, or None when they are not a list of finite x, y pairs."""
    pts = shape.get("points")
    if not isinstance(pts, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pts):
        return None
    try:
        arr = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError):
        return None
    return arr if np.isfinite(arr).all() else None


def labels_in(json_files: List[str]) -> List[str]:
    """Sorted labels of the rectangles and polygons found in the JSON files (unreadable files are the
    scan's to report)."""
    found = set()
    for j in json_files:
        try:
            data = _parse(j)
        except LabelError:
            continue
        for s in (data or {}).get("shapes", []):
            if isinstance(s, dict) and _shape_type(s) in SHAPES and isinstance(s.get("label"), str):
                found.add(s["label"].strip())
    found.discard("")
    return sorted(found)


@dataclass(frozen=True)
class LabelMeReader:
    """Reads LabelMe JSON files for the scan (base.LabelReader).  ``names``: class names, index =
    class id."""
    names: Tuple[str, ...]

    def describe(self, label: str) -> str:
        return label

    def read(self, json_file: str, shape: Tuple[int, int]):
        data = _parse(json_file)
        if data is None:
            return np.zeros((0, 5), np.float32), None, "missing", []
        (sw, sh), warnings = normalising_size(_stated_size(data), shape, "JSON", "no imageWidth/imageHeight in the JSON")
        path = data.get("imagePath")
        stem = os.path.basename(json_file).rpartition(".")[0]
        if isinstance(path, str) and path and os.path.basename(path.replace("\\", "/")).rpartition(".")[0] != stem:
            warnings.append(f"imagePath {path[:80]!r} names another file; the image beside the JSON is used")
        ids = {n: i for i, n in enumerate(self.names)}
        rows, polygons, unknown, other = [], [], Counter(), Counter()
        for k, s in enumerate(data["shapes"], 1):
            if not isinstance(s, dict):
                warnings.append(f"shape {k} is not an object; left out")
                continue
            label = s.get("label").strip() if isinstance(s.get("label"), str) else ""
            kind = _shape_type(s)
            where = f"shape {k} ({label or 'no label'})"
            if kind not in SHAPES:
                other[str(kind)[:20]] += 1
                continue
            if label not in ids:
                unknown[label] += 1
                continue
            pts = _points(s)
            need = 2 if kind == "rectangle" else 3
            if pts is None or len(pts) < need or (kind == "rectangle" and len(pts) != 2):
                warnings.append(f"{where}: a {kind} needs {'2' if kind == 'rectangle' else '3 or more'} points "
                                f"(x, y numbers), got {str(s.get('points'))[:60]}; left out")
                continue
            inside = (pts >= 0).all() and (pts[:, 0] <= sw).all() and (pts[:, 1] <= sh).all()
            if not inside:
                warnings.append(f"{where}: points reach outside the {sw:g}x{sh:g} image; clipped to it")
                pts = np.stack([pts[:, 0].clip(0, sw), pts[:, 1].clip(0, sh)], 1)
            (x1, y1), (x2, y2) = pts.min(0), pts.max(0)
            if x2 <= x1 or y2 <= y1:
                warnings.append(f"{where}: {kind} has no area; left out")
                continue
            rows.append((ids[label], (x1 + x2) / 2 / sw, (y1 + y2) / 2 / sh, (x2 - x1) / sw, (y2 - y1) / sh))
            polygons.append(pts / (sw, sh) if kind == "polygon" else None)
        for kind, count in sorted(other.items()):
            warnings.append(f"{count} {kind!r} shape{'s' if count > 1 else ''} left out (only rectangle and "
                            "polygon shapes are read)")
        for name, count in sorted(unknown.items()):
            warnings.append(f"{count} shape{'s' if count > 1 else ''} labelled {name[:40]!r}, not one of the "
                            f"{len(self.names)} names; left out")
        if not rows:
            return np.zeros((0, 5), np.float32), None, "empty", warnings
        labels = np.array(rows, dtype=np.float64).astype(np.float32)
        segments = None
        if any(p is not None for p in polygons):  # a rectangle beside polygons gets an empty one (PairRecord)
            segments = [p.clip(0, 1).astype(np.float32) if p is not None else np.zeros((0, 2), np.float32)
                        for p in polygons]
        labels, segments = without_duplicates(labels, segments, warnings)
        return labels, segments, "ok", warnings


class LabelMeFormat(LabelFormat):
    """LabelMe folders (base.LabelFormat).  The fingerprint covers every image and JSON file's
    stat and the names; without names they are read from every JSON, only when the split is scanned."""
    name = "labelme"
    cuts_by_files = False
    tasks = ("detect", "segment")

    def claims(self, entry: Path) -> bool:
        if not entry.is_dir():
            return False
        # YOLO's images/ -> labels/ folder, when it exists, decides with one stat: no listing
        yolo_labels = Path(img2label_path(str(entry / "x.jpg"))).parent
        if yolo_labels != entry and yolo_labels.is_dir():
            return False
        beside = _annotated_images(entry)
        return bool(beside) and not any(os.path.exists(img2label_path(f)) for f in beside)

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        # one walk of each folder (claims takes folders only) gives the images and the JSONs alike
        files = [f for e in entries for f in walk_files(str(e))]
        im_files = sorted(f for f in files if f.rpartition(".")[2].lower() in _IMAGE_SUFFIXES)  # as list_images
        if not im_files:
            raise FileNotFoundError(f"no images found in {entries[0] if len(entries) == 1 else entries}")
        json_files = [json_of(f) for f in im_files]
        problems = _orphans(files, set(json_files))
        names = list(options.names) if options.names else None
        settings = {"format": "labelme", "names": names, "labelme": 1}

        def discover():
            found = labels_in(json_files)
            return found, LabelMeReader(tuple(found))
        return SplitSource(self.name, im_files, json_files, json_files, LabelMeReader(tuple(names)) if names else None,
                           names, settings, default_cache_file(entries, json_files[0]), json_of, problems,
                           discover=discover)

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]:
        return json_of


def _orphans(files: List[str], paired: set) -> List[Problem]:
    """A problem for each JSON of ``files`` with no image of its name beside it (its annotations cannot
    be used)."""
    return [Problem(f, "a LabelMe file with no image of its name beside it (an image embedded as imageData "
                       "is not read); left out", True)
            for f in files if f.rpartition(".")[2].lower() == "json" and f not in paired]


FORMAT = LabelMeFormat()
