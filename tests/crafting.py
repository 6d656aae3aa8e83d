"""Rewrite a yolo_data container file the way a damaged disk or a crafted file would, optionally with
a valid checksum (an attacker can always recompute it)."""
import json
import sys
import types
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


def exif_block(orientation=None, order: str = "<") -> bytes:
    """An EXIF TIFF structure (after 'Exif\\0\\0') whose IFD0 holds an orientation SHORT, or no entry."""
    entries = [] if orientation is None else [struct.pack(order + "HHIHH", 0x0112, 3, 1, orientation, 0)]
    head = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, 8)
    return head + struct.pack(order + "H", len(entries)) + b"".join(entries) + struct.pack(order + "I", 0)


def with_app1(jpeg: bytes, *payloads: bytes) -> bytes:
    """``jpeg`` with APP1 segments carrying ``payloads`` right after its SOI marker."""
    segments = b"".join(b"\xff\xe1" + struct.pack(">H", len(p) + 2) + p for p in payloads)
    return jpeg[:2] + segments + jpeg[2:]


def fake_albumentations(monkeypatch, seedable=True):
    """A stand-in module: the 'transform' adds a value drawn from its own seeded generator."""
    mod = types.ModuleType("albumentations")

    class Compose:
        def __init__(self, transforms):
            self.transforms, self.rng = transforms, np.random.default_rng(12345)

        def __call__(self, image):
            return {"image": (image.astype(np.int32) + int(self.rng.integers(1, 50))).clip(0, 255).astype(np.uint8)}

    if seedable:
        Compose.set_random_seed = lambda self, seed: setattr(self, "rng", np.random.default_rng(seed))
    mod.Compose = Compose
    for name in ("Blur", "MedianBlur", "ToGray", "CLAHE"):
        setattr(mod, name, lambda p, name=name: (name, p))
    monkeypatch.setitem(sys.modules, "albumentations", mod)
