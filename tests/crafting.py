"""Rewrite a yolo_data container file the way a damaged disk or a crafted file would, optionally with
a valid checksum (an attacker can always recompute it)."""
import json
import struct
import zlib
from pathlib import Path

import numpy as np

PREFIX = struct.Struct("<8sII")


def header_of(path: Path) -> dict:
    data = Path(path).read_bytes()
    _, _, hlen = PREFIX.unpack_from(data)
    return json.loads(data[PREFIX.size:PREFIX.size + hlen])


def rewrite(path: Path, header=None, arrays=None, fix_crc: bool = True) -> None:
    """``header(h)`` edits the parsed header in place (it must not grow); ``arrays(name -> view)`` edits
    arrays' raw values in place; then the CRC-32 over everything but the payload is recomputed."""
    path = Path(path)
    data = bytearray(path.read_bytes())
    _, _, hlen = PREFIX.unpack_from(data)
    h = json.loads(data[PREFIX.size:PREFIX.size + hlen])
    original = json.loads(json.dumps(h))
    if header is not None:
        header(h)
        raw = json.dumps(h).encode()
        room = min(s["offset"] for s in original["arrays"].values()) - PREFIX.size
        assert len(raw) <= room, "crafted header must fit before the first array"
        data[PREFIX.size:PREFIX.size + max(hlen, len(raw))] = raw + b" " * max(0, hlen - len(raw))
        struct.pack_into("<I", data, 12, max(hlen, len(raw)))  # JSON allows trailing blanks
    if arrays is not None:
        views = {name: np.frombuffer(data, np.dtype(s["dtype"]), int(np.prod(s["shape"])), s["offset"])
                 .reshape(s["shape"]) for name, s in original["arrays"].items()}
        arrays(views)
    if fix_crc:
        end = h["payload"][0] if isinstance(h.get("payload"), list) else original["payload"][0]
        data[-4:] = zlib.crc32(bytes(data[:end])).to_bytes(4, "little")
    path.write_bytes(bytes(data))
