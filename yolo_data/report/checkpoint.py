"""Which data a checkpoint's model was trained on: the record the Ultralytics plug-in writes into its
checkpoints, read back without running any code the file holds, and compared with a dataset now
(``yolo-data report DATA --checkpoint best.pt``).

The record is the checkpoint dict's top-level key ``yolo_data``, plain data only (str, int, float,
bool, list, dict, None), so that it is read without unpickling anything else:

    {"version": 1, "yolo_data": "0.3.0", "data": "data/sample.yaml",
     "splits": {"train": {"digest": "9f86d081884c7d65...", "images": 16}, "val": {...}}}

A split's ``digest`` is ``LabelStore.names_digest`` of the split as read (its images' file names and
labels in file order, the images that fit the dataset's channels), before the loader's filters
(``classes``, ``single_cls``) and its rect order: the report computes the same of the same split, and
the training loader's ``state_dict()['dataset']`` is the same too where it has no filter and no rect
order (Ultralytics' train loader).  ``fraction`` (below 1) is there when the model was trained on the
first images of the split only.

Reading: the checkpoint is a torch zip archive whose ``data.pkl`` pickles the dict.  It is unpickled
with every global it names (Ultralytics' model classes, torch's rebuild functions, or anything a
stranger's file names, ``os.system`` included) replaced by an inert placeholder and every tensor's
storage by None, so no code of the file runs and no tensor is read; then only the ``yolo_data`` entry
is kept, and only when it is plain data.

Writing (:func:`add_record`, into the file Ultralytics has just saved): no object of the file is
unpickled either.  The pickle of the dict ends with STOP; the key, the record and a SETITEM go before
it, and the archive is written again with every other record copied byte for byte at torch's alignment.
"""
from __future__ import annotations

import io
import pickle
import pickletools
import struct
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

from ..labels.summary import plural
from ..storage import write_whole
from ..version import __version__

RECORD_KEY = "yolo_data"
RECORD_VERSION = 1
MAX_PICKLE_BYTES = 64 << 20  # a model's data.pkl is a few MB at most; beyond this the file is refused
MAX_DEPTH = 16  # of the record's nesting (it has 3 levels)
ALIGNMENT = 64  # where torch.save puts each record of its archive (its .storage_alignment)


def split_record(store, fraction=1.0) -> dict:
    """The record of one split as a loader read it: ``store`` is its LabelStore (``dataset.split_labels.store``:
    in file order, before filters); ``fraction`` below 1 says only its first images were read."""
    out = {"digest": store.names_digest(), "images": int(len(store))}
    if fraction != 1.0:  # a ratio, or a count of images (Ultralytics' fraction takes both)
        out["fraction"] = int(fraction) if isinstance(fraction, int) else float(fraction)
    return out


def make_record(data, splits: Dict[str, dict]) -> dict:
    """The checkpoint's ``yolo_data`` entry.

    Args:
        data: the training's data argument (a dataset yaml, an NDJSON export, ...), kept as text.
        splits: split name ('train', 'val') -> :func:`split_record`.

    Returns:
        A dict of plain data (see the module's docstring).
    """
    return {"version": RECORD_VERSION, "yolo_data": __version__, "data": str(data), "splits": dict(splits)}


def add_record(written, record: dict, copies=()) -> None:
    """Give the checkpoint file ``written`` (torch.save's archive of a dict) ``record`` as its top-level key
    ``yolo_data``; and each file of ``copies`` that holds the same bytes.  Nothing in the file is unpickled
    (:func:`with_record`).  Each file is replaced whole: a temporary beside it, renamed over it.

    Args:
        written: torch.save's file of a checkpoint dict.
        record: from :func:`make_record`.
        copies: files that may have been written with the same bytes (missing ones are skipped).

    Raises:
        ValueError: ``written`` is not torch.save's archive of a dict (naming it).
    """
    written = Path(written)
    blob = written.read_bytes()
    out = with_record(blob, record, written)
    same = [Path(c) for c in copies if Path(c).is_file() and Path(c).stat().st_size == len(blob)
            and Path(c).read_bytes() == blob]
    for path in [written] + same:
        write_whole(path, out)


def with_record(blob: bytes, record: dict, path) -> bytes:
    """torch.save's archive ``blob`` of a dict, with ``record`` set as the dict's key ``yolo_data``.

    The pickle of the dict ends with STOP; the key and the record's pickle (plain data) and a SETITEM go before
    it, so loading sets the key last (a record already there is replaced).  No object of the file is unpickled:
    the pickle is only parsed, with every global inert, to check that it is a dict.  The other records are
    copied byte for byte, each at an offset that is a multiple of ALIGNMENT, as torch.save lays them out (a
    storage loaded with ``mmap=True`` is mapped where it lies).
    """
    try:
        src = zipfile.ZipFile(io.BytesIO(blob))
        infos = src.infolist()
        pkl = _data_pkl(infos, path)
        old = src.read(pkl)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError) as e:
        raise ValueError(f"{path}: not a torch checkpoint (torch.save's zip archive): {e}") from None
    if type(_inert_load(old, path)) is not dict or not old.endswith(pickle.STOP):
        raise ValueError(f"{path}: not a checkpoint dict: its record cannot be added")
    value = io.BytesIO()
    pickler = pickle.Pickler(value, protocol=2)
    pickler.fast = True  # no memo entries: the pickle before it may still name its own
    pickler.dump((RECORD_KEY, record))
    # the pair's pickle is PROTO 2, key, record, TUPLE2, STOP: the key and the record are what SETITEM takes
    body = value.getvalue()[2:-2]
    new = old[:-1] + body + pickle.SETITEM + pickle.STOP
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in infos:
            entry = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            start = out.tell() + 30 + len(info.filename.encode("utf-8")) + 4  # local header, then the padding's
            pad = -start % ALIGNMENT
            entry.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad  # torch.save pads its records so too
            dst.writestr(entry, new if info is pkl else src.read(info))
    return out.getvalue()


class _Inert:
    """What every global of the file becomes.  Made, called, filled or given a state, it does nothing
    and keeps nothing: the pickle's opcodes that build objects (REDUCE, NEWOBJ, BUILD, SETITEMS,
    APPENDS, ADDITEMS) all run through these methods."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass

    def add(self, item):
        pass


class _InertUnpickler(pickle.Unpickler):
    """An unpickler that looks up no global (``find_class`` is also what the EXT opcodes go through)
    and reads no storage (``persistent_load``: torch's tensors refer to their storages so)."""

    def find_class(self, module, name):
        return _Inert

    def persistent_load(self, pid):
        return None


def _data_pkl(infos: List[zipfile.ZipInfo], path) -> zipfile.ZipInfo:
    """The ``<archive>/data.pkl`` entry among a torch archive's ``infos`` (ValueError naming ``path`` when
    there is none, or it is larger than a checkpoint's)."""
    pkl = [i for i in infos if i.filename.count("/") == 1 and i.filename.endswith("/data.pkl")]
    if not pkl:
        raise ValueError(f"{path}: a zip file without data.pkl, not a torch checkpoint")
    if pkl[0].file_size > MAX_PICKLE_BYTES:
        raise ValueError(f"{path}: its data.pkl has {pkl[0].file_size:,} bytes, more than a checkpoint's "
                         f"({MAX_PICKLE_BYTES:,} at most)")
    return pkl[0]


def _inert_load(data: bytes, path):
    """The pickle ``data`` loaded with every global inert and no storage read (ValueError naming ``path`` when it
    cannot be)."""
    try:
        # every opcode's length checked against the bytes there are, before any is acted on: a length
        # that lies would otherwise have the unpickler allocate it
        for _ in pickletools.genops(data):
            pass
        return _InertUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # what a damaged or hostile pickle raises has no fixed list
        raise ValueError(f"{path}: its data.pkl cannot be read as a checkpoint: {type(e).__name__}: {e}") from None


def _pickle_bytes(path: Path) -> bytes:
    """The ``<archive>/data.pkl`` of the torch zip archive at ``path`` (ValueError naming the file when it
    is not one)."""
    try:
        with zipfile.ZipFile(path) as z:
            with z.open(_data_pkl(z.infolist(), path)) as f:
                data = f.read(MAX_PICKLE_BYTES + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError) as e:
        raise ValueError(f"{path}: not a torch checkpoint (torch.save's zip archive): {e}") from None
    if len(data) > MAX_PICKLE_BYTES:
        raise ValueError(f"{path}: its data.pkl is larger than {MAX_PICKLE_BYTES:,} bytes")
    return data


def _plain(value, depth: int = 0) -> bool:
    """True when ``value`` is plain data: str, int, float, bool, None, and lists and str-keyed dicts of them."""
    if depth > MAX_DEPTH:
        return False
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is list:
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


def _checked(record, path) -> dict:
    """``record`` when it is a record this version reads; else ValueError naming ``path``."""
    if not _plain(record) or type(record) is not dict:
        raise ValueError(f"{path}: its '{RECORD_KEY}' entry is not plain data (str, int, float, list, dict)")
    version = record.get("version")
    if type(version) is not int or not 1 <= version <= RECORD_VERSION:
        raise ValueError(f"{path}: its '{RECORD_KEY}' entry has version {version!r}; this yolo_data reads "
                         f"version {RECORD_VERSION} (written by a newer yolo_data?)")
    splits = record.get("splits")
    if type(splits) is not dict or not all(type(s) is dict and type(s.get("digest")) is str
                                           and type(s.get("images")) is int
                                           and type(s.get("fraction", 1.0)) in (int, float) for s in splits.values()):
        raise ValueError(f"{path}: its '{RECORD_KEY}' entry names no splits with a digest and an image count "
                         "(and a number as fraction)")
    return record


def read_record(path) -> Optional[dict]:
    """The ``yolo_data`` entry of the checkpoint at ``path``, read without running any code it holds.

    Args:
        path: a torch checkpoint (``last.pt``, ``best.pt``): torch.save's zip archive of a dict.

    Returns:
        The record (a dict of plain data, see the module's docstring), or None when the checkpoint has
        none (a checkpoint of plain Ultralytics training, or not a dict).

    Raises:
        OSError: the file cannot be read.
        ValueError: the file is not a torch checkpoint (naming it), or its ``yolo_data`` entry is not a
            record this version reads.
    """
    path = Path(path)
    obj = _inert_load(_pickle_bytes(path), path)
    if type(obj) is not dict or RECORD_KEY not in obj:
        return None
    return _checked(obj[RECORD_KEY], path)


def compare_record(record: Optional[dict], splits: Dict[str, dict], file) -> dict:
    """The report's ``checkpoint`` figures: each split ``record`` names against the split of that name now.

    Args:
        record: from :func:`read_record` (None: the checkpoint has no record).
        splits: the report's figures per split (each with ``digest`` and ``images``, or ``error``).
        file: the checkpoint, as given.

    Returns:
        {'file', 'recorded' (bool), 'data' and 'yolo_data' (the training's), 'splits': {name: {'status':
        'same' | 'changed' | 'absent' | 'not-compared', 'images_then', 'images_now', 'digest_then',
        'digest_now', 'text'}}, 'changed' (splits changed or absent: the ``data-changed`` finding)}.
    """
    if record is None:
        return {"file": str(file), "recorded": False, "splits": {}, "changed": 0}
    out = {}
    for name, then in record["splits"].items():
        now = splits.get(name) or {}
        row = {"images_then": then["images"], "images_now": now.get("images"), "digest_then": then["digest"],
               "digest_now": now.get("digest")}
        fraction = then.get("fraction", 1.0)
        if "digest" not in now:
            row.update(status="absent", text="not in this dataset (or not readable): not compared")
        elif fraction != 1.0:
            row.update(status="not-compared", text=f"trained on its first {plural(then['images'], 'image')} "
                                                   f"(fraction {fraction:g}): not compared")
        elif now["digest"] == then["digest"]:
            row.update(status="same", text=f"same data ({plural(now['images'], 'image')})")
        else:
            counts = (f"{then['images']:,} images then and now, other names or labels"
                      if then["images"] == now["images"] else f"{then['images']:,} images then, {now['images']:,} now")
            row.update(status="changed", text=f"changed since that training ({counts})")
        out[name] = row
    return {"file": str(file), "recorded": True, "data": record.get("data"), "yolo_data": record.get("yolo_data"),
            "splits": out, "changed": sum(r["status"] in ("changed", "absent") for r in out.values())}


def checkpoint_lines(figures: Optional[dict]) -> List[str]:
    """The terminal's lines for the report's ``checkpoint`` figures (none without them)."""
    if not figures:
        return []
    if not figures["recorded"]:
        return [f"checkpoint {figures['file']}: no record of its data (not trained through yolo_data's "
                "Ultralytics plug-in): not compared"]
    head = f"checkpoint {figures['file']}: trained on {figures['data']} with yolo_data {figures['yolo_data']}"
    return [head] + [f"  {name}: {row['text']}" for name, row in figures["splits"].items()]
