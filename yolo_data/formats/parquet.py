"""Parquet tables in the layout the Hugging Face Hub serves detection datasets, read in place with
pyarrow (the optional ``parquet`` extra: ``pip install "yolo-data[parquet]"``).

The layout (``datasets``' Image feature and a Sequence of objects, as cppe-5 or detection-datasets/coco
are stored): an ``image`` column, a struct {bytes: the encoded file, path: its original name} (or plain
binary), and an ``objects`` column whose ``bbox`` holds one box of 4 numbers per object and whose
``category`` its class id (a struct of lists, or a list of structs: both are read).  ``width`` and
``height`` columns, where there are, are the size pixel boxes are normalised by (checked against the
image, as COCO's JSON sizes are); else the image's own.  Class names: the dataset yaml's ``names``,
else the ClassLabel names in the table's ``huggingface`` schema metadata.

Box formats (``bbox_format``): ``coco`` (the default, as the Hub's detection sets: x, y of the top-left
corner, w, h, in pixels), ``xyxy`` (corners in pixels) or ``yolo`` (centre x, y, w, h normalised).
Boxes reaching outside the image are clipped to it and boxes of no size left out, each with a warning.

A split entry is a ``.parquet`` file (local or at a URL), a local folder of them, or a table yaml that
names them and says how to read them (paths relative to the yaml)::

    parquet: [data/train-00000-of-00002.parquet, data/train-00001-of-00002.parquet]  # or a folder
    bbox_format: xyxy          # coco (default) | xyxy | yolo
    image_column: image        # default image
    objects_column: objects    # default objects

Each image is named by a row URL (storage/parquetrows.py, ``parquet+file:///abs/t.parquet#row=..``),
its bytes read a row group at a time through the storage layer; listing a table reads it one row group
at a time too (objects, the image cells' sizes and names), never whole.  The fingerprint covers each
table's (size, tag), the names, the box format and the columns.  Nothing is written.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from ..storage import backend_for, is_url
from ..storage.parquetrows import open_table, pyarrow_parquet, row_url
from .base import LabelError, LabelFormat, SourceOptions, SplitSource, WarmStart
from .labelfile import COORD_TOLERANCE, normalising_size, without_duplicates
from .problems import Problem
from .sources import IMG_FORMATS, default_cache_file

BBOX_FORMATS = ("coco", "xyxy", "yolo")
TABLE_KEYS = ("parquet", "bbox_format", "image_column", "objects_column")
MAX_TABLE_YAML_BYTES = 1 << 20
_BOX_KEYS = ("bbox", "bboxes", "boxes")
_CLASS_KEYS = ("category", "category_id", "label", "labels")
_MAGIC = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"II*\x00", "tif"), (b"MM\x00*", "tif"),
          (b"BM", "bmp"))


@dataclass(frozen=True)
class TableSpec:
    """The tables of a split and how to read them: ``tables`` (absolute paths or URLs), ``bbox_format``,
    ``image_column``, ``objects_column``; ``source``: the yaml that said so, or None."""
    tables: Tuple[str, ...]
    bbox_format: str = "coco"
    image_column: str = "image"
    objects_column: str = "objects"
    source: Optional[str] = None


@dataclass
class ParquetRow:
    """One row's objects, unconverted, for the scan's worker (ParquetReader): ``boxes`` (n, 4) float64
    as the table gives them (None: no objects cell), ``classes`` (n,) int64, ``size`` (width, height)
    from the table's columns or None, ``warnings`` found while listing."""
    table: str
    row: int
    boxes: Optional[np.ndarray]
    classes: np.ndarray
    size: Optional[Tuple[float, float]]
    warnings: List[str] = field(default_factory=list)


def _is_table_yaml(path: Path) -> bool:
    if path.suffix.lower() not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            data = yaml.safe_load(f.read(MAX_TABLE_YAML_BYTES))
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and "parquet" in data


def _holds_tables(folder: Path) -> bool:
    """A folder of tables: a .parquet file found before any image (a YOLO image folder shows an image
    among its first entries, so its listing is not read to the end)."""
    try:
        with os.scandir(folder) as it:
            for e in it:
                suffix = e.name.rpartition(".")[2].lower()
                if suffix == "parquet":
                    return True
                if suffix in IMG_FORMATS:
                    return False
    except OSError:
        return False
    return False


def _tables_in(entry: str) -> List[str]:
    if is_url(entry):
        if entry.lower().endswith(".parquet"):
            return [entry]
        return [o.url for o in backend_for(entry).list(entry, recursive=False) if o.url.lower().endswith(".parquet")]
    p = Path(entry).absolute()
    if p.is_dir():
        return sorted(str(f) for f in p.iterdir() if f.suffix.lower() == ".parquet" and f.is_file())
    if not p.is_file():
        raise FileNotFoundError(f"Parquet table {entry} does not exist")
    return [str(p)]


def _read_table_yaml(path: Path) -> TableSpec:
    with open(path, "rb") as f:
        raw = f.read(MAX_TABLE_YAML_BYTES + 1)
    if len(raw) > MAX_TABLE_YAML_BYTES:
        raise ValueError(f"{path}: a table yaml over {MAX_TABLE_YAML_BYTES} bytes")
    data = yaml.safe_load(raw)
    unknown = sorted(set(data) - set(TABLE_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown} (a table yaml has {', '.join(TABLE_KEYS)})")
    fmt = data.get("bbox_format", "coco")
    if fmt not in BBOX_FORMATS:
        raise ValueError(f"{path}: bbox_format {fmt!r} is not one of {', '.join(BBOX_FORMATS)} (coco: x, y, w, h "
                         "pixels from the top-left corner; xyxy: corners in pixels; yolo: centre x, y, w, h "
                         "normalised)")
    named = data["parquet"] if isinstance(data["parquet"], list) else [data["parquet"]]
    if not named or not all(isinstance(n, str) and n for n in named):
        raise ValueError(f"{path}: 'parquet' must name a table, a folder of tables or a list of them")
    base = path.absolute().parent
    tables = [t for n in named for t in _tables_in(n if is_url(n) else str(base / n))]
    cols = {k: data.get(k, d) for k, d in (("image_column", "image"), ("objects_column", "objects"))}
    if not all(isinstance(v, str) and v for v in cols.values()):
        raise ValueError(f"{path}: image_column and objects_column must be column names")
    return TableSpec(tuple(tables), fmt, cols["image_column"], cols["objects_column"], str(path.absolute()))


def table_spec(entries: Sequence[Any]) -> TableSpec:
    """The tables the split entries name and how to read them.

    Args:
        entries: .parquet files (paths or URLs), local folders of them, or one table yaml.

    Returns:
        A :class:`TableSpec` (the defaults where no table yaml says otherwise).

    Raises:
        FileNotFoundError: an entry that is not there, or no table at all.
        ValueError: a table yaml that is malformed, or entries that mix a yaml with others.
    """
    yamls = [e for e in entries if not is_url(e) and _is_table_yaml(Path(e))]
    if yamls and len(entries) > 1:
        raise ValueError(f"a table yaml ({yamls[0]}) must be a split's only entry")
    if yamls:
        spec = _read_table_yaml(Path(yamls[0]))
    else:
        spec = TableSpec(tuple(t for e in entries for t in _tables_in(str(e))))
    if not spec.tables:
        raise FileNotFoundError(f"no .parquet tables in {entries[0] if len(entries) == 1 else list(entries)}")
    return spec


def _stat(table: str) -> List:
    info = backend_for(table).stat(table)
    if info is None:
        raise FileNotFoundError(f"Parquet table {table} does not exist")
    return [table, info.size, info.tag]


def _settings(spec: TableSpec, stats: List[List], options: SourceOptions) -> Dict[str, Any]:
    return {"format": "parquet", "names": list(options.names) if options.names else None, "tables": stats,
            "bbox_format": spec.bbox_format, "columns": [spec.image_column, spec.objects_column], "parquet": 1}


def _class_names(features: Any) -> Optional[List[str]]:
    """The first ClassLabel's names under an objects feature of ``datasets``' metadata (any nesting:
    Sequence or List of dicts, dicts of Sequences)."""
    if isinstance(features, dict):
        if features.get("_type") == "ClassLabel" and isinstance(features.get("names"), list):
            return [str(n) for n in features["names"]]
        keys = [k for k in _CLASS_KEYS if k in features] + [k for k in features if k not in _CLASS_KEYS]
        for k in keys:
            found = _class_names(features[k])
            if found:
                return found
    elif isinstance(features, list):
        for f in features:
            found = _class_names(f)
            if found:
                return found
    return None


def table_names(schema, objects_column: str) -> Optional[List[str]]:
    """The class names in a table's ``huggingface`` schema metadata (None where there are none)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        features = json.loads(raw)["info"]["features"][objects_column] if raw else None
    except (ValueError, KeyError, TypeError):
        return None
    return _class_names(features)


def _suffix(path: Optional[str], head: bytes) -> str:
    """The image's suffix: its original name's, where it is an image format's, else by its first bytes."""
    ext = (path or "").rpartition(".")[2].lower() if "." in (path or "") else ""
    if ext in IMG_FORMATS:
        return ext
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return next((s for magic, s in _MAGIC if head.startswith(magic)), "bin")


def _objects(cell: Any) -> Tuple[Optional[list], Optional[list]]:
    """(boxes, classes) of one objects cell: a struct of lists or a list of structs."""
    if cell is None:
        return None, None
    if isinstance(cell, list):  # a list of {bbox, category}
        boxes = [next((o.get(k) for k in _BOX_KEYS if k in o), None) for o in cell if isinstance(o, dict)]
        classes = [next((o.get(k) for k in _CLASS_KEYS if k in o), None) for o in cell if isinstance(o, dict)]
        return boxes, classes
    boxes = next((cell[k] for k in _BOX_KEYS if k in cell), None)
    classes = next((cell[k] for k in _CLASS_KEYS if k in cell), None)
    return boxes, classes


def _row_label(table: str, row: int, cell: Any, size, names: Optional[List[str]]) -> ParquetRow:
    boxes, classes = _objects(cell)
    if boxes is None:
        return ParquetRow(table, row, None, np.zeros(0, np.int64), size)
    warnings, kept_b, kept_c = [], [], []
    by_name = {n: i for i, n in enumerate(names or [])}
    for k, (b, c) in enumerate(zip(boxes, classes or [None] * len(boxes))):
        cls = by_name.get(c) if isinstance(c, str) else c
        try:
            box = np.asarray(b, dtype=np.float64).reshape(4)
        except (TypeError, ValueError):
            warnings.append(f"object {k}: bbox {str(b)[:60]} is not 4 numbers; left out")
            continue
        if isinstance(cls, bool) or not isinstance(cls, (int, np.integer)) or cls < 0:
            warnings.append(f"object {k}: category {c!r} is not a class (a class id, or one of the names); left out")
            continue
        kept_b.append(box)
        kept_c.append(int(cls))
    arr = np.array(kept_b, np.float64).reshape(-1, 4)
    return ParquetRow(table, row, arr, np.array(kept_c, np.int64), size, warnings)


def _check_columns(table: str, schema, spec: TableSpec) -> List[str]:
    """The columns to read; raises ValueError naming what the table lacks."""
    where = f" (set in {spec.source})" if spec.source else " (a table yaml's image_column, objects_column)"
    for col in (spec.image_column, spec.objects_column):
        if col not in schema.names:
            raise ValueError(f"{table}: no column {col!r}{where}; its columns: {', '.join(schema.names)}")
    image = schema.field(spec.image_column).type
    if image.num_fields and "bytes" not in [image.field(i).name for i in range(image.num_fields)]:
        raise ValueError(f"{table}: column {spec.image_column!r} is a struct without 'bytes' (the Hub's image "
                         "column is {bytes, path})")
    sizes = [c for c in ("width", "height") if c in schema.names]
    return [spec.image_column, spec.objects_column] + (sizes if len(sizes) == 2 else [])


def _list_table(table: str, spec: TableSpec, names: Optional[List[str]]):
    """(the row URLs and their ParquetRows, the table's class names, problems), a row group at a time."""
    pq = pyarrow_parquet()
    size = _stat(table)[1]
    with open_table(backend_for(table), table, size) as f:
        try:
            pf = pq.ParquetFile(f)
        except Exception as e:  # noqa: BLE001 - pyarrow's errors are not OSErrors
            raise ValueError(f"{table}: not a Parquet table pyarrow reads ({e})") from None
        schema = pf.schema_arrow
        columns = _check_columns(table, schema, spec)
        found = table_names(schema, spec.objects_column)
        use = names or found
        digits = len(str(max(pf.metadata.num_rows - 1, 0)))
        urls, labels, problems, row = [], [], [], 0
        for g in range(pf.metadata.num_row_groups):
            part = pf.read_row_group(g, columns, use_threads=False)
            sizes, heads, paths = _cells(part.column(spec.image_column).combine_chunks())
            objects = part.column(spec.objects_column).to_pylist()
            wh = list(zip(*(part.column(c).to_pylist() for c in columns[2:]))) if len(columns) > 2 else None
            del part  # the group's image bytes: only their sizes and first bytes are kept
            for k, (n, head, path, cell) in enumerate(zip(sizes, heads, paths, objects)):
                if not n:
                    problems.append(Problem(table, f"row {row}: no image bytes; left out", True))
                else:
                    # the name is only shown: no '&' (the URL's separator) or NUL (no path holds one)
                    name = os.path.basename(path or "").replace("&", "_").replace("\0", "_") or str(row)
                    ext = _suffix(path, head)
                    name = name if name.lower().endswith("." + ext) else f"{name}.{ext}"
                    stated = wh[k] if wh and all(isinstance(v, (int, float)) and v > 0 for v in wh[k]) else None
                    urls.append(row_url(table, row, spec.image_column, n, name, digits))
                    labels.append(_row_label(table, row, cell, stated, use))
                row += 1
    return urls, labels, found, problems


def _cells(images) -> Tuple[list, list, list]:
    """(size in bytes or None, first 16 bytes, original name or None) of each image cell of a row group
    (a struct {bytes, path} or binary array), computed by pyarrow: no Python copy of the images."""
    import pyarrow.compute as pc
    if images.type.num_fields:
        fields = [images.type.field(i).name for i in range(images.type.num_fields)]
        parts = dict(zip(fields, images.flatten()))  # the parent's nulls applied to each child
        data, paths = parts["bytes"], (parts["path"].to_pylist() if "path" in parts else [None] * len(images))
    else:
        data, paths = images, [None] * len(images)
    return pc.binary_length(data).to_pylist(), pc.binary_slice(data, 0, 16).to_pylist(), paths


@dataclass(frozen=True)
class ParquetReader:
    """Converts a :class:`ParquetRow` in the scan's worker once the image's (h, w) is known (see
    base.LabelReader): boxes in ``bbox_format`` to [class, x, y, w, h] normalised, class ids below
    ``nc`` (None: any)."""
    bbox_format: str = "coco"
    nc: Optional[int] = None

    def describe(self, label: ParquetRow) -> str:
        return f"{label.table} (row {label.row})"

    def read(self, label: ParquetRow, shape: Tuple[int, int]):
        warnings = list(label.warnings)
        if label.boxes is None:
            return np.zeros((0, 5), np.float32), None, "missing", warnings
        b, cls = label.boxes, label.classes.astype(np.float64)
        if self.nc is not None and (cls >= self.nc).any():
            bad = sorted({int(c) for c in cls[cls >= self.nc]})
            raise LabelError(f"class ids {bad} are not below the {self.nc} class names")
        if self.bbox_format == "yolo":
            xywh = b
        else:
            h, w = shape
            sw, sh = float(w), float(h)
            if label.size is not None:
                (sw, sh), more = normalising_size(label.size, shape, "table", "")
                warnings += more
            if self.bbox_format == "xyxy":
                b = np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], 1)
            # COCO's converters' arithmetic (centre = corner + size / 2, then / size), as coco.py
            xywh = np.concatenate([(b[:, :2] + b[:, 2:] / 2) / (sw, sh), b[:, 2:] / (sw, sh)], 1)
        keep = np.isfinite(xywh).all(1) & (xywh[:, 2] > 0) & (xywh[:, 3] > 0)
        if not keep.all():
            n = int((~keep).sum())
            warnings.append(f"{n} box{'es' if n > 1 else ''} of no size (or not finite) in bbox_format "
                            f"{self.bbox_format} left out")
        labels = np.concatenate([cls[:, None], xywh], 1)[keep]
        xyxy = np.concatenate([labels[:, 1:3] - labels[:, 3:5] / 2, labels[:, 1:3] + labels[:, 3:5] / 2], 1)
        # a box past the edge by less than YOLO's tolerance (a writer's rounding) is kept as given, as a
        # YOLO .txt row is; only those further out are recomputed, clipped: the others keep the table's numbers
        outside = (xyxy.min(1) < -COORD_TOLERANCE) | (xyxy.max(1) > 1 + COORD_TOLERANCE)
        if outside.any():
            clipped = xyxy[outside].clip(0, 1)
            labels[outside, 1:3] = (clipped[:, :2] + clipped[:, 2:]) / 2
            labels[outside, 3:5] = clipped[:, 2:] - clipped[:, :2]
            labels = labels[(labels[:, 3] > 0) & (labels[:, 4] > 0)]
            n = int(outside.sum())
            warnings.append(f"{n} box{'es' if n > 1 else ''} reaching outside the image clipped to it "
                            f"(bbox_format {self.bbox_format}: is it the table's?)")
        labels = labels.astype(np.float32)
        if not len(labels):
            return labels, None, "empty", warnings
        labels, _ = without_duplicates(labels, None, warnings)
        return labels, None, "ok", warnings


def _same_file(table: str, im_file: str) -> str:
    return table


class ParquetFormat(LabelFormat):
    """Parquet tables in the Hub's layout (base.LabelFormat; see the module's docstring).  A warm start
    needs only the tables' stats: the cache keeps the rows it listed."""
    name = "parquet"
    cuts_by_files = False
    tasks = ("detect",)

    def claims(self, entry: Path) -> bool:
        p = Path(entry)
        if p.suffix.lower() == ".parquet":
            return True
        return _is_table_yaml(p) or p.is_dir() and _holds_tables(p)

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        spec = table_spec(entries)
        names = list(options.names) if options.names else None
        urls, labels, problems, found = [], [], [], None
        for t in spec.tables:
            u, lab, names_here, probs = _list_table(t, spec, names)
            if found is not None and names_here != found and not names:
                raise ValueError(f"{t} and {spec.tables[0]} name other classes ({(names_here or [])[:5]} vs "
                                 f"{found[:5]}); give the dataset yaml 'names'")
            found = names_here if found is None else found
            urls += u
            labels += lab
            problems += probs
        if not urls:
            raise FileNotFoundError(f"no images in {spec.source or list(spec.tables)}")
        use = names or found or []
        nc = len(use) or options.nc  # the reader checks class ids (a warm start's fingerprint has no nc)
        stats = [_stat(t) for t in spec.tables]
        return SplitSource(self.name, urls, labels, None, ParquetReader(spec.bbox_format, nc), use,
                           _settings(spec, stats, options), default_cache_file([spec.source or spec.tables[0]], None),
                           self.annotation_file_of(spec.tables[0]), problems, keeps_listing=True)

    def warm_start(self, entries: List[Any], options: SourceOptions) -> Optional[WarmStart]:
        try:
            spec = table_spec(entries)
            stats = [_stat(t) for t in spec.tables]
        except (OSError, ValueError):
            return None
        return WarmStart(_settings(spec, stats, options), default_cache_file([spec.source or spec.tables[0]], None),
                         self.annotation_file_of(spec.tables[0]))

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]:
        return functools.partial(_same_file, str(first_label_file))


FORMAT = ParquetFormat()
