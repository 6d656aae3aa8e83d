"""The label cache: fingerprint, file format, safe save, load, and where the file lives.

File format (little endian), designed so that loading can never run code::

    b"YOLODATA" | u32 format version | u32 header length | header (UTF-8 JSON) | zero padding
    | raw array bytes, each 64-byte aligned | CRC-32 of everything before (4 bytes)

The header lists each array's dtype (plain numeric only), shape and offset, the fingerprint of the
inputs, the scan counts and the problems found.  Arrays are read with ``np.frombuffer``: no pickle,
no object arrays.  A file that fails any check is reported and rebuilt, never trusted.

The checksum detects damage (CRC-32 catches every burst error up to 32 bits, so any flipped byte); it
is not a signature, since whoever can write the file can recompute any checksum: safety comes from the
format, which holds nothing that runs.  The file is memory-mapped, not read: a million-image cache
(about 300 MB) loads in about 0.1 s, and every DataLoader worker and rank on a node shares its pages.
"""
from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import socket
import stat
import struct
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from .labels import COORD_TOLERANCE, MIN_IMAGE_SIDE, Problem
from .store import LabelStore

LOGGER = logging.getLogger("yolo_data")

MAGIC = b"YOLODATA"
FORMAT_VERSION = 2
_PREFIX = struct.Struct("<8sII")
_ALIGN = 64
_DIGEST = 4
_SAFE_DTYPES = {"<f4", "<i4", "<i8", "|u1"}
_STALE_TMP_SECONDS = 24 * 3600
CACHE_DIR_ENV = "YOLO_DATA_CACHE_DIR"


class CacheError(ValueError):
    """A cache file that cannot be used (damaged, foreign, old or stale); the reason is the message."""


@dataclass
class CacheContents:
    """What a cache file holds besides the arrays."""
    store: LabelStore
    fingerprint: str
    counts: Dict[str, int]
    problems: List[Problem] = field(default_factory=list)


# -- fingerprint ------------------------------------------------------------------------------------
def _stat_line(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}\0-\n"
    kind = "d" if stat.S_ISDIR(st.st_mode) else ""
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}{kind}\n"


def fingerprint(im_files: Sequence[str], lb_files: Sequence[str], nc: Optional[int]) -> str:
    """sha256 of everything that decides the scan's result: the format version, the scan settings and
    each image and label file's path, size and modification time (a missing file counts too)."""
    h = hashlib.sha256()
    h.update(json.dumps({"version": FORMAT_VERSION, "nc": nc, "tol": COORD_TOLERANCE,
                         "min_side": MIN_IMAGE_SIDE}).encode())
    for im, lb in zip(im_files, lb_files):
        h.update((_stat_line(im) + _stat_line(lb)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


# -- encode / decode --------------------------------------------------------------------------------
def _checksum(body) -> bytes:
    return zlib.crc32(body).to_bytes(4, "little")


def _pad(n: int) -> int:
    return -n % _ALIGN


def encode(contents: CacheContents) -> bytes:
    """The whole cache file as bytes."""
    arrays = contents.store.arrays()
    layout, offset = {}, 0
    for name, a in arrays.items():
        layout[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset}
        offset += a.nbytes + _pad(a.nbytes)
    header = json.dumps({
        "fingerprint": contents.fingerprint,
        "counts": contents.counts,
        "problems": [[p.file, p.reason, p.dropped] for p in contents.problems],
        "arrays": layout,
    }).encode("utf-8")
    head = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header
    parts = [head, b"\0" * _pad(len(head))]
    for a in arrays.values():
        parts += [np.ascontiguousarray(a).tobytes(), b"\0" * _pad(a.nbytes)]
    body = b"".join(parts)
    return body + _checksum(body)


def decode(data: bytes) -> CacheContents:
    """Parse and check a cache file's bytes.  Raises CacheError saying what is wrong."""
    if len(data) < _PREFIX.size + _DIGEST:
        raise CacheError(f"too short ({len(data)} bytes): truncated")
    magic, version, header_len = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        kind = "a pickle" if data[:1] == b"\x80" else "a zip/npz or torch.save file" if data[:2] == b"PK" \
            else "a NumPy .npy file" if data[:6] == b"\x93NUMPY" else "not a yolo_data cache"
        raise CacheError(f"{kind} (wrong magic bytes); it was not loaded")
    if version != FORMAT_VERSION:
        raise CacheError(f"format version {version}, this yolo_data reads {FORMAT_VERSION}")
    body = memoryview(data)[:-_DIGEST]
    if _checksum(body) != bytes(data[-_DIGEST:]):
        raise CacheError("checksum mismatch: the file is damaged or truncated")
    try:
        header = json.loads(bytes(body[_PREFIX.size:_PREFIX.size + header_len]).decode("utf-8"))
        start = _PREFIX.size + header_len
        start += _pad(start)
        arrays = {}
        for name, spec in header["arrays"].items():
            dtype = np.dtype(spec["dtype"])
            if dtype.str not in _SAFE_DTYPES:
                raise CacheError(f"array {name} has dtype {dtype.str}, not a plain number type")
            shape = tuple(int(s) for s in spec["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            offset = start + int(spec["offset"])
            if offset + count * dtype.itemsize > len(body):
                raise CacheError(f"array {name} runs past the end of the file")
            arrays[name] = np.frombuffer(body, dtype=dtype, count=count, offset=offset).reshape(shape)
        store = LabelStore.from_arrays(arrays)
        problems = [Problem(str(f), str(r), bool(d)) for f, r, d in header["problems"]]
        return CacheContents(store, str(header["fingerprint"]), dict(header["counts"]), problems)
    except CacheError:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
        raise CacheError(f"malformed header ({type(e).__name__}: {e})") from None


# -- files ------------------------------------------------------------------------------------------
def load(path: Path) -> CacheContents:
    """Map and check a cache file.  Raises FileNotFoundError or CacheError.

    The store's arrays are read-only views of the mapping (kept alive by them).  yolo_data's writers
    never change a file in place (they rename a new one over it), so the mapping stays valid.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _PREFIX.size + _DIGEST:  # also avoids mapping an empty file, which mmap refuses
            raise CacheError(f"too short ({size} bytes): truncated")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return decode(data)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: Path) -> None:
    """Delete temporary files left by writers of ``path`` that were killed: on this host when their
    process is gone, on any host once they are a day old."""
    host = socket.gethostname()
    now = time.time()
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            t_host, t_pid, _ = tmp.name[len(path.name) + 2:-len(".tmp")].rsplit(".", 2)
            dead = t_host == host and not _pid_alive(int(t_pid))
        except ValueError:
            dead = False
        try:
            if dead or now - tmp.stat().st_mtime > _STALE_TMP_SECONDS:
                tmp.unlink()
        except OSError:
            pass


def save(path: Path, contents: CacheContents) -> None:
    """Write atomically: a unique temporary file in the same folder, fsync, then ``os.replace``.

    A crash leaves the old file (or none) in place, never a torn one; concurrent writers each replace
    the file whole.  Raises OSError when the folder is not writable.
    """
    path = Path(path)
    data = encode(contents)
    fd, tmp = tempfile.mkstemp(dir=path.parent,
                               prefix=f".{path.name}.{socket.gethostname()}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    remove_stale_temps(path)


# -- where ------------------------------------------------------------------------------------------
def user_cache_dir() -> Path:
    """The per-user cache folder: $YOLO_DATA_CACHE_DIR, else $XDG_CACHE_HOME/yolo_data, else
    ~/.cache/yolo_data.  Read at call time."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "yolo_data"


def folder_cache_file(default: Path, folder: Path) -> Path:
    """The file for ``default`` inside a shared cache folder; the hash of the full default path keeps
    two datasets with a split of the same name apart."""
    digest = hashlib.sha256(str(Path(default).absolute()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(folder) / f"{Path(default).stem}-{digest}.cache"

