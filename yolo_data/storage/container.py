"""The one file container of every cache yolo_data writes: the label cache and both image caches.

Layout (little endian)::

    b"YOLODATA" | u32 FORMAT | u32 header length | header (UTF-8 JSON) | zero padding
    | arrays, each 64-byte aligned | payload (4 KiB aligned, may be empty)
    | CRC-32 of everything before the payload (4 bytes)

The header is ``{"kind": ..., "meta": {...}, "arrays": {name: {"dtype", "shape", "offset"}},
"payload": [offset, size]}``; offsets are absolute.  Arrays hold plain numbers only and are read with
``np.frombuffer``: nothing in a file can run code.  Before anything is trusted, :func:`read` checks
the magic, the version, the kind, the checksum and every offset and size against the file (arrays
after the header, aligned, in order, not overlapping, before the payload; the payload ending where the
checksum begins).  What an array's values must satisfy is its owner's check (e.g. ``LabelStore.validate``).

The checksum covers the header and the arrays, not the payload: the image caches' pixels are
gigabytes, a CRC over them would cost every process seconds at every start, and a damaged pixel
byte is one wrong pixel, while a damaged index would move whole images.  It detects damage, it is no
signature: the file's owner and mode decide whether it is trusted at all (:func:`check_trust`).

Writing (:class:`NewFile`): the whole size is reserved first (``posix_fallocate``), so a full disk or
/dev/shm is an ``OSError`` before any byte is written, never a SIGBUS while filling a mapping.  A named
file is written under a unique temporary name (host and pid in it, ending ``.yolo_data.tmp``) and
renamed into place, so readers see it whole or not at all; temporaries of writers that died are
removed by the next writer or reader (:func:`remove_stale_temps`), and only those certainly ours.
An anonymous file (the RAM cache) never has a name at all.
"""
from __future__ import annotations

import errno
import glob
import json
import mmap
import os
import secrets
import socket
import stat
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Tuple, Union

import numpy as np

from ..runtime import room
from . import trust

MAGIC = b"YOLODATA"
FORMAT = 3  # 2: label caches only, whole-file CRC; 3: this container
_PREFIX = struct.Struct("<8sII")
_ALIGN = 64
PAGE = 4096
_CRC = 4
_SAFE_DTYPES = {"<f4", "<i4", "<i8", "|u1"}
STALE_TMP_SECONDS = 24 * 3600  # temporaries of writers on other hosts are removed after this
# Ends the name of every temporary we write: a user's own '.notes.123.x.tmp' is never taken for ours.
TEMP_SUFFIX = ".yolo_data.tmp"


class CacheError(ValueError):
    """A cache file that cannot be used (damaged, foreign, untrusted, old or stale); the message says why."""


class NoSpaceError(OSError):
    """Not enough room to reserve a cache file; the message names the size needed and the free space."""


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


# -- layout -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Where everything of a file goes.  ``specs``: {name: (dtype str, shape)} in file order."""
    kind: str
    meta: dict
    specs: Dict[str, Tuple[str, Tuple[int, ...]]]
    payload_size: int = 0
    offsets: Dict[str, int] = field(default_factory=dict)
    payload_offset: int = 0
    header: bytes = b""

    @property
    def size(self) -> int:
        return self.payload_offset + self.payload_size + _CRC


def plan(kind: str, meta: dict, specs: Dict[str, Tuple[str, Tuple[int, ...]]], payload_size: int = 0) -> Layout:
    """Place the header, arrays and payload.  The header holds the offsets it precedes, so grow its
    reserved room until the offsets it names fit behind it."""
    specs = {k: (np.dtype(d).str, tuple(int(s) for s in shape)) for k, (d, shape) in specs.items()}
    room = 0
    while True:
        pos = _align(_PREFIX.size + room, _ALIGN)
        offsets = {}
        for name, (dtype, shape) in specs.items():
            offsets[name] = pos
            pos = _align(pos + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, _ALIGN)
        payload_offset = _align(pos, PAGE) if payload_size else pos
        header = json.dumps({
            "kind": kind, "meta": meta,
            "arrays": {k: {"dtype": d, "shape": list(s), "offset": offsets[k]} for k, (d, s) in specs.items()},
            "payload": [payload_offset, int(payload_size)],
        }).encode("utf-8")
        if len(header) <= room:
            return Layout(kind, meta, specs, int(payload_size), offsets, payload_offset, header)
        room = len(header) + 64


# -- reading ----------------------------------------------------------------------------------------
@dataclass
class Contents:
    """A checked file: ``arrays`` are read-only views of ``mm``; ``payload`` a read-only view of its bytes."""
    kind: str
    meta: dict
    arrays: Dict[str, np.ndarray]
    payload: memoryview
    payload_offset: int
    mm: mmap.mmap
    st: os.stat_result


def describe_foreign(head: bytes) -> str:
    return ("a pickle" if head[:1] == b"\x80" else "a zip/npz or torch.save file" if head[:2] == b"PK"
            else "a NumPy .npy file" if head[:6] == b"\x93NUMPY" else "not a yolo_data cache")


def check_trust(path: Path, st: os.stat_result) -> None:
    """Raise CacheError unless the file may be trusted: a regular file that not every user can write,
    owned by you, by root, or by the owner of its folder when that folder is not writable by every
    user (a read-only dataset whose caches its owner built).  In /dev/shm or /tmp only your own
    (the rule is trust.file_problem's)."""
    why = trust.file_problem(path, st)
    if why is not None:
        raise CacheError(why)


def open_regular(path: Path) -> int:
    """A read-only descriptor of ``path``; a FIFO or device is refused without blocking on it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CacheError("not a regular file")
    return fd


def read(source: Union[Path, str, int], kind: str) -> Contents:
    """Map and check a container file, given its path or an open descriptor (which stays the caller's).

    Raises FileNotFoundError, or CacheError saying what is wrong."""
    own_fd = not isinstance(source, int)
    fd = open_regular(Path(source)) if own_fd else source
    try:
        st = os.fstat(fd)
        if own_fd:
            check_trust(Path(source), st)
        elif not stat.S_ISREG(st.st_mode):
            raise CacheError("not a regular file")
        if st.st_size < _PREFIX.size + _CRC:  # also avoids mapping an empty file, which mmap refuses
            raise CacheError(f"too short ({st.st_size} bytes): truncated")
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        if own_fd:
            os.close(fd)
    return Contents(*_check(mm, kind), mm=mm, st=st)


def _check(mm: mmap.mmap, kind: str):
    size = len(mm)
    magic, version, header_len = _PREFIX.unpack_from(mm)
    if magic != MAGIC:
        raise CacheError(f"{describe_foreign(bytes(mm[:8]))} (wrong magic bytes); it was not loaded")
    if version != FORMAT:
        raise CacheError(f"container format {version}, this yolo_data reads {FORMAT}")
    if _PREFIX.size + header_len + _CRC > size:
        raise CacheError("header runs past the end of the file: truncated")
    try:
        header = json.loads(bytes(mm[_PREFIX.size:_PREFIX.size + header_len]).decode("utf-8"))
        payload_offset, payload_size = (int(v) for v in header["payload"])
        if header["kind"] != kind:
            raise CacheError(f"a {header['kind']} cache, not a {kind} cache")
        specs = [(name, np.dtype(s["dtype"]), tuple(int(d) for d in s["shape"]), int(s["offset"]))
                 for name, s in header["arrays"].items()]
        meta = header["meta"]
    except CacheError:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
        raise CacheError(f"malformed header ({type(e).__name__}: {e})") from None
    # every offset and size against the file, before the checksum is even computed over them
    if payload_size < 0 or payload_offset + payload_size + _CRC != size:
        raise CacheError(f"payload [{payload_offset}, +{payload_size}) does not end where the "
                         f"checksum of a {size}-byte file begins: truncated or inconsistent")
    if payload_size and payload_offset % PAGE:
        raise CacheError("payload offset is not page aligned")
    pos = _PREFIX.size + header_len
    arrays = {}
    for name, dtype, shape, offset in sorted(specs, key=lambda s: s[3]):
        if dtype.str not in _SAFE_DTYPES:
            raise CacheError(f"array {name} has dtype {dtype.str}, not a plain number type")
        if any(d < 0 for d in shape):
            raise CacheError(f"array {name} has a negative dimension {shape}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset < pos or offset % _ALIGN:
            raise CacheError(f"array {name} at offset {offset} overlaps the header or the array before it"
                             if offset < pos else f"array {name} at offset {offset} is not aligned")
        if offset + nbytes > payload_offset:
            raise CacheError(f"array {name} runs past the end of the index")
        arrays[name] = np.frombuffer(mm, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape)
        pos = offset + nbytes
    stored = bytes(mm[size - _CRC:])
    if zlib.crc32(memoryview(mm)[:payload_offset]).to_bytes(_CRC, "little") != stored:
        raise CacheError("checksum mismatch: the file is damaged or truncated")
    payload = memoryview(mm)[payload_offset:payload_offset + payload_size]
    return header["kind"], meta, arrays, payload, payload_offset


# -- writing ----------------------------------------------------------------------------------------
def umask_mode() -> int:
    """0o666 less the process's umask: the mode a plain ``open(..., 'w')`` would give."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def reserve(fd: int, size: int, folder: Path) -> None:
    """Allocate ``size`` bytes of ``fd`` now, so writing them later cannot fail for lack of room (a
    sparse file filled through a mapping dies with SIGBUS instead).  Raises NoSpaceError."""
    try:
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:  # macOS: no reservation exists; at least size it
            os.ftruncate(fd, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise NoSpaceError(e.errno, f"{size / 2**20:,.1f} MiB needed in {folder}, "
                                        f"{room.free_bytes(folder) / 2**20:,.1f} MiB free") from None
        raise


def temp_prefix(path: Path) -> str:
    """Temporaries of ``path``: ``.<name>.<host>.<pid>.<random>.yolo_data.tmp`` in the same folder."""
    return f".{path.name}.{socket.gethostname()}.{os.getpid()}."


class NewFile:
    """A container file being written: reserved whole up front, then committed whole or not at all.

    ``path``: a named file, written under a temporary name and renamed over ``path`` by
    :meth:`commit` (mode ``mode``, default: as the umask allows).  ``anonymous_in``: a file without any
    name in that folder's filesystem (``O_TMPFILE``), mode 0600, gone when its last descriptor and
    mapping close.  Use as a context manager: an exception discards the file.
    """

    def __init__(self, layout: Layout, path: Optional[Path] = None, anonymous_in: Optional[Path] = None,
                 mode: Optional[int] = None):
        self.layout, self.path, self.tmp = layout, path, None
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if anonymous_in is not None:
            self.folder = Path(anonymous_in)
            self.fd = _open_anonymous(self.folder, flags)
            self.mode = 0o600
        else:
            self.folder = Path(path).parent
            self.tmp = self.folder / f"{temp_prefix(Path(path))}{secrets.token_hex(4)}{TEMP_SUFFIX}"
            self.fd = os.open(self.tmp, flags | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            self.mode = umask_mode() if mode is None else mode
        self._mm = None
        try:
            reserve(self.fd, layout.size, self.folder)
        except BaseException:
            self.discard()
            raise

    def payload(self) -> memoryview:
        """The payload's bytes, writable (a shared mapping of the reserved file)."""
        if self._mm is None:
            self._mm = mmap.mmap(self.fd, self.layout.size)
        return memoryview(self._mm)[self.layout.payload_offset:self.layout.payload_offset + self.layout.payload_size]

    def commit(self, arrays: Dict[str, np.ndarray]) -> int:
        """Write the header, ``arrays`` (as planned) and the checksum; fsync; put a named file in place.
        Returns the descriptor (still open; the caller closes it, or keeps it for an anonymous file)."""
        lay = self.layout
        head = bytearray(lay.payload_offset)
        head[:_PREFIX.size] = _PREFIX.pack(MAGIC, FORMAT, len(lay.header))
        head[_PREFIX.size:_PREFIX.size + len(lay.header)] = lay.header
        if set(arrays) != set(lay.specs):
            raise ValueError(f"arrays {sorted(arrays)} do not match the layout's {sorted(lay.specs)}")
        for name, (dtype, shape) in lay.specs.items():
            raw = np.ascontiguousarray(arrays[name], dtype=dtype).reshape(shape).tobytes()
            head[lay.offsets[name]:lay.offsets[name] + len(raw)] = raw
        try:
            if self._mm is not None:
                self._mm.flush()
                self._mm.close()
                self._mm = None
            _pwrite_all(self.fd, head, 0)
            _pwrite_all(self.fd, zlib.crc32(head).to_bytes(_CRC, "little"), lay.size - _CRC)
            os.fsync(self.fd)
            if self.tmp is not None:
                os.fchmod(self.fd, self.mode)
                os.replace(self.tmp, self.path)
                self.tmp = None
                remove_stale_temps(self.path)
        except BaseException:
            self.discard()
            raise
        fd, self.fd = self.fd, -1
        return fd

    def discard(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view of it is still alive; the descriptor below still goes
                pass
            self._mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.discard()
        return False


def _open_anonymous(folder: Path, flags: int) -> int:
    """A new file without a name in ``folder``'s filesystem, mode 0600.  ``O_TMPFILE`` where the
    filesystem has it (tmpfs, ext4, xfs, btrfs); elsewhere a unique name, unlinked at once."""
    if hasattr(os, "O_TMPFILE"):
        try:
            return os.open(folder, flags | os.O_TMPFILE, 0o600)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    path = Path(folder) / f".anonymous.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.unlink(path)
    return fd


def _pwrite_all(fd: int, data, offset: int) -> None:
    view = memoryview(data)
    while len(view):
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def write(path: Path, layout: Layout, arrays: Dict[str, np.ndarray],
          fill: Optional[Callable[[memoryview], None]] = None) -> None:
    """Write a named container file atomically (see :class:`NewFile`).  Raises OSError (NoSpaceError
    when there is no room) and leaves nothing behind."""
    with NewFile(layout, path=Path(path)) as f:
        if fill is not None:
            fill(f.payload())
        os.close(f.commit(arrays))


# -- temporaries of writers that died ----------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temps(folder: Path, name: Optional[str] = None) -> Iterator[Path]:
    """Our temporaries (of ``name``, or of any file) in ``folder`` whose writer is gone: on this host
    when its process no longer exists, from other hosts (a shared filesystem) once a day old.  Only
    files of the current user that are certainly ours: named ``*.yolo_data.tmp`` (or
    ``.yolo_data-*.tmp``, an older yolo_data's anonymous file), or of the shape older versions gave
    their temporaries (``.<name>.<host>.<pid>.<random>.tmp``, which anyone's file may have) and
    beginning with the container's magic bytes."""
    host, now = socket.gethostname(), time.time()
    pattern = f".{glob.escape(name)}.*.tmp" if name else ".*.tmp"  # a name like tr[a]in is not a pattern
    for tmp in Path(folder).glob(pattern):
        try:
            st = tmp.lstat()
        except OSError:
            continue
        writer = _temp_writer(tmp.name)
        if writer is None or st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
            continue
        rest, t_pid = writer
        here = rest.endswith(("." + host, "-" + host))  # host names may hold dots themselves
        gone = (here and not pid_alive(t_pid)) or now - st.st_mtime > STALE_TMP_SECONDS
        if gone and (tmp.name.endswith(TEMP_SUFFIX) or tmp.name.startswith(".yolo_data-") or _has_magic(tmp)):
            yield tmp


def _temp_writer(file_name: str) -> Optional[Tuple[str, int]]:
    """(the name up to the host, the writer's pid) of ``.<name>.<host>.<pid>.<random>[.yolo_data].tmp``,
    or None for a name not of that shape."""
    stem = file_name[:-len(TEMP_SUFFIX if file_name.endswith(TEMP_SUFFIX) else ".tmp")]
    try:
        rest, t_pid, _ = stem.rsplit(".", 2)
        return rest, int(t_pid)
    except ValueError:
        return None


def _has_magic(path: Path) -> bool:
    """Whether ``path`` is a regular file that begins with our container's magic bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, len(MAGIC), 0) == MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_stale_temps(path: Path) -> None:
    """Delete the temporaries of ``path`` left by writers that were killed."""
    for tmp in stale_temps(Path(path).parent, Path(path).name):
        try:
            tmp.unlink()
        except OSError:
            pass
