"""Rows of Parquet tables as objects: the encoded image in one cell of a row, read in place, a row group
at a time (the label format in formats/parquet.py names them; pyarrow is the optional ``parquet`` extra).

A row's URL is the table's own URL (``file:///abs/t.parquet``, ``s3://bucket/t.parquet``, any scheme a
backend reads) behind ``parquet+``, and after ``#`` which cell of which row, its size in bytes and a
name that ends with the image's suffix (decoders choose by it, as they do for files)::

    parquet+file:///data/train.parquet#row=00017&col=image&size=48211&name=000000000139.jpg

``stat`` needs no read: the size is in the URL and the tag is the table's (its size and tag cover
every row: a changed table changes the tag of each of its rows).  ``read`` fetches the row's row
group, only the image column's bytes, through the table's own backend (ranged reads: a file-like
object over them for pyarrow) and keeps it in a small LRU of this process (ROW_GROUPS_KEPT groups, at
most ROW_GROUP_BYTES_KEPT bytes, one group past them while it is read): a batch's rows of one group,
and a scan's, cost one read of it.  Never the whole table: memory is bounded by the LRU, whatever the
table's size.  Threads that want a group being read wait for that read instead of making their own.
"""
from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .base import Backend, ObjectInfo, StorageOptions, scheme_of
from .remotefile import RangedFile

PREFIX = "parquet+"
ROW_GROUPS_KEPT = 4  # row groups a process keeps: a batch spans one or two, a scan's threads a few
ROW_GROUP_BYTES_KEPT = 256 * 2**20  # and at most this many bytes of them (the one being read aside)
EXTRA = 'pip install "yolo-data[parquet]"'


def pyarrow_parquet():
    """pyarrow.parquet, imported where a table is read.  Raises ModuleNotFoundError naming the extra."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ModuleNotFoundError(f"Parquet tables are read with pyarrow, which is not installed ({e}); "
                                  f"{EXTRA} installs it") from None
    return pq


@dataclass(frozen=True)
class RowRef:
    """One cell of a table (see the module's docstring): ``table`` the table's URL or path, ``row`` its
    row (0-based), ``column`` the image column, ``size`` the cell's bytes, ``name`` the image's name."""
    table: str
    row: int
    column: str
    size: int
    name: str


def row_url(table: str, row: int, column: str, size: int, name: str, digits: int = 1) -> str:
    """The URL of one cell (``digits``: the row number zero-padded to this width, so that a table's
    URLs sort in row order).  ``table``: a URL, or an absolute local path (named ``file://``)."""
    inner = table if scheme_of(table) else "file://" + table
    return f"{PREFIX}{inner}#row={row:0{digits}d}&col={column}&size={size}&name={name}"


def parse_row_url(url: str) -> RowRef:
    """The cell a row URL names.  Raises FileNotFoundError for a URL that names none."""
    head, sep, frag = url.partition("#row=")
    parts = frag.split("&", 3)
    if not head.lower().startswith(PREFIX) or not sep or len(parts) != 4 or not all(
            p.startswith(k) for p, k in zip(parts[1:], ("col=", "size=", "name="))):
        raise FileNotFoundError(errno.ENOENT, "not a Parquet row URL "
                                "(parquet+<table URL>#row=..&col=..&size=..&name=..)", url)
    try:
        row, size = int(parts[0]), int(parts[2][5:])
    except ValueError:
        raise FileNotFoundError(errno.ENOENT, "a Parquet row URL whose row or size is not a number", url) from None
    inner = head[len(PREFIX):]
    table = inner[len("file://"):] if inner.lower().startswith("file:///") else inner
    return RowRef(table, row, parts[1][4:], size, parts[3][5:])


def open_table(backend: Backend, url: str, size: int):
    """A file pyarrow reads the table ``url`` from: a local one opened by its path, any other over ranged
    reads of ``backend``."""
    if not scheme_of(url):
        return open(url, "rb")
    return RangedFile(backend, url, size)


@dataclass
class _Table:
    """What this process knows of one table: its stat, footer (metadata), first row of each row group
    and whether the image column is a struct {bytes, path} (the Hub's) or plain binary."""
    info: ObjectInfo
    metadata: object = None
    starts: Optional[np.ndarray] = None
    struct: Dict[str, bool] = None


class ParquetRowsBackend(Backend):
    """Rows of Parquet tables (see the module's docstring).  ``inner(url)``: the backend that reads a
    table's own URL (a plain path: local disk).  ``groups_kept``, ``bytes_kept``: the LRU's bounds."""

    concurrency = 8

    def __init__(self, options: Optional[StorageOptions] = None, inner: Optional[Callable[[str], Backend]] = None,
                 groups_kept: int = ROW_GROUPS_KEPT, bytes_kept: int = ROW_GROUP_BYTES_KEPT):
        self.options = options or StorageOptions()
        self.inner = inner
        self.groups_kept, self.bytes_kept = max(1, int(groups_kept)), int(bytes_kept)
        self._pid = None  # the state below is this process's own: made anew after a fork or in a spawn

    def _state(self):
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._tables: Dict[str, _Table] = {}
            self._groups: "OrderedDict[tuple, Tuple[object, int]]" = OrderedDict()
            self._loading: Dict[tuple, threading.Event] = {}
            self._reads = 0
            self._pid = os.getpid()
        return self._lock

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        state["_pid"] = None
        return state

    # -- the table ---------------------------------------------------------------------------------
    def _backend(self, table: str) -> Backend:
        if self.inner is None:
            raise ValueError(f"{table}: this backend was made without a way to read tables")
        return self.inner(table)

    def _table(self, table: str) -> Optional[_Table]:
        lock = self._state()
        with lock:
            known = self._tables.get(table)
        if known is None:
            info = self._backend(table).stat(table)
            if info is None:
                return None
            with lock:
                known = self._tables.setdefault(table, _Table(info))
        return known

    def _footer(self, ref: RowRef, known: _Table) -> _Table:
        if known.metadata is None:
            pq = pyarrow_parquet()
            try:
                with open_table(self._backend(ref.table), ref.table, known.info.size) as f:
                    md = pq.read_metadata(f)
            except Exception as e:  # noqa: BLE001 - pyarrow's errors are not OSErrors: named as one
                raise OSError(errno.EIO, f"not a Parquet table pyarrow reads ({e})", ref.table) from None
            rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
            schema = md.schema.to_arrow_schema()
            struct = {n: schema.field(n).type.num_fields > 0 for n in schema.names}
            known.starts, known.struct = np.cumsum([0] + rows), struct
            known.metadata = md
        return known

    def _locate(self, ref: RowRef, url: str) -> Tuple[_Table, int]:
        known = self._table(ref.table)
        if known is None:
            raise FileNotFoundError(errno.ENOENT, "no such table", url)
        known = self._footer(ref, known)
        if not 0 <= ref.row < known.starts[-1] or ref.column not in known.struct:
            raise FileNotFoundError(errno.ENOENT, f"the table has no row {ref.row} or column {ref.column!r}", url)
        return known, int(np.searchsorted(known.starts, ref.row, "right") - 1)

    # -- row groups --------------------------------------------------------------------------------
    def _read_group(self, ref: RowRef, known: _Table, group: int):
        pq = pyarrow_parquet()
        column = f"{ref.column}.bytes" if known.struct[ref.column] else ref.column
        try:
            with open_table(self._backend(ref.table), ref.table, known.info.size) as f:
                got = pq.ParquetFile(f, metadata=known.metadata).read_row_group(group, [column], use_threads=False)
        except OSError as e:
            raise OSError(e.errno or errno.EIO, f"row group {group} cannot be read ({e})", ref.table) from None
        except Exception as e:  # noqa: BLE001 - a damaged table: pyarrow's errors are not OSErrors
            raise OSError(errno.EIO, f"row group {group} cannot be read ({e})", ref.table) from None
        cells = got.column(0).combine_chunks()
        if known.struct[ref.column]:
            cells = cells.flatten()[0]  # the parent's nulls applied to its child
        return cells

    def _group(self, ref: RowRef, known: _Table, group: int):
        """The image cells of one row group (a pyarrow BinaryArray), from the LRU or read now."""
        key = (ref.table, known.info.tag, ref.column, group)
        lock = self._state()
        while True:
            with lock:
                held = self._groups.get(key)
                if held is not None:
                    self._groups.move_to_end(key)
                    return held[0]
                wait = self._loading.get(key)
                if wait is None:
                    self._loading[key] = mine = threading.Event()
            if wait is None:
                break
            wait.wait()  # another thread reads it; taken from the LRU when it is there
        try:
            cells = self._read_group(ref, known, group)
            with lock:
                self._reads += 1
                self._groups[key] = (cells, cells.nbytes)
                while len(self._groups) > 1 and (len(self._groups) > self.groups_kept
                                                 or sum(n for _, n in self._groups.values()) > self.bytes_kept):
                    self._groups.popitem(last=False)
            return cells
        finally:
            with lock:
                self._loading.pop(key, None)
            mine.set()

    def cell(self, url: str) -> bytes:
        """The bytes of the cell ``url`` names.  Raises FileNotFoundError (no such table, row or
        column, or an empty cell) or OSError (a table that cannot be read)."""
        ref = parse_row_url(url)
        known, group = self._locate(ref, url)
        value = self._group(ref, known, group)[ref.row - int(known.starts[group])]
        if not value.is_valid:
            raise FileNotFoundError(errno.ENOENT, "the row's image cell is empty", url)
        return value.as_py()

    def held(self) -> Tuple[int, int]:
        """(row groups, bytes of their cells) this process holds now."""
        lock = self._state()
        with lock:
            return len(self._groups), sum(n for _, n in self._groups.values())

    # -- the Backend interface ---------------------------------------------------------------------
    def read(self, url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
        data = self.cell(url)
        if start or length > 0:
            return data[start:start + length] if length > 0 else data[start:]
        return data

    def stat(self, url: str) -> Optional[ObjectInfo]:
        try:
            ref = parse_row_url(url)
        except FileNotFoundError:
            return None
        known = self._table(ref.table)
        return None if known is None else ObjectInfo(url, ref.size, known.info.tag)

    def list(self, url: str, recursive: bool = True) -> List[ObjectInfo]:
        return []  # a row is no folder; the format lists a table's rows (formats/parquet.py)

    def read_many(self, urls: Sequence[str], threads: Optional[int] = None) -> List[Union[bytes, OSError]]:
        """Each URL's bytes (or its OSError), the rows of one row group read with one read of it."""
        out: List[Union[bytes, OSError]] = []
        for url in urls:  # in order: a batch's rows of one group follow the first read of it
            try:
                out.append(self.cell(url))
            except OSError as e:
                out.append(e)
        return out

    def forget(self) -> None:
        lock = self._state()
        with lock:
            self._tables.clear()

    def counts(self) -> Dict[str, int]:
        self._state()
        return {"row_groups": self._reads}


def parquet_rows_backend(options: StorageOptions, inner: Callable[[str], Backend]) -> ParquetRowsBackend:
    """A backend of rows whose tables ``inner(url)`` reads."""
    return ParquetRowsBackend(options, inner)
