"""The dataset yaml: YOLOv5's ``path``, ``train``, ``val``, ``test``, ``names`` (and ``nc``), read with
bounds and checked key by key.

Parsed with a ``yaml.SafeLoader`` that bounds the file's size and its aliases (a 400-byte billion-laughs
file would otherwise expand to gigabytes); nothing in it is executed or downloaded (YOLOv5 runs a
``download:`` script, we do not).  Every malformed value is a ``ValueError`` naming the file, the key
and what was expected.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import yaml

from ..storage import backend_for, is_url, join_url, parent_url

SPLITS = ("train", "val", "test")
# A dataset yaml is a few kB (COCO 2 kB, ImageNet-21k's 21,841 names 0.5 MB).  PyYAML's pure-Python
# loader needs about 1.5 s and 65 MB per MiB, so larger files are refused rather than parsed.
MAX_YAML_BYTES = 4 << 20
MAX_YAML_ALIASES = 100  # dataset yamls hardly use aliases; a billion-laughs file needs dozens
MAX_ALIAS_NODES = 100_000  # values that aliases may add once expanded (a merge-key bomb expands at load)

PathLike = Union[str, os.PathLike]


@dataclass
class DatasetSpec:
    """A parsed dataset yaml.

    ``splits`` maps 'train'/'val'/'test' to what that split names (a folder, a .txt list or a list of
    those), already made absolute against ``root``.  ``names`` is a list indexed by class id.
    ``kpt_shape``: (K, 2 or 3) keypoints per object of a pose dataset, else None; ``flip_idx``: the
    keypoint that takes each one's place in a left-right flip, or None.  ``channels``: the bands of its
    images (Ultralytics' key: 1 for grayscale, N for N-band images), None when the yaml says nothing.
    """
    yaml_file: Union[Path, str]  # an s3:// URL (a str) for a yaml in a bucket
    root: Union[Path, str]
    splits: Dict[str, List[str]] = field(default_factory=dict)
    names: List[str] = field(default_factory=list)
    kpt_shape: Optional[Tuple[int, int]] = None
    flip_idx: Optional[Tuple[int, ...]] = None
    channels: Optional[int] = None

    @property
    def nc(self) -> int:
        return len(self.names)


def is_dataset_yaml(path) -> bool:
    """Whether ``path`` names a dataset yaml, by its name alone (nothing is read).

    Args:
        path: anything a dataset takes as its path (a str or ``os.PathLike``, a list, ...).

    Returns:
        True for a str or path ending in ``.yaml`` or ``.yml`` (any case).
    """
    return isinstance(path, (str, os.PathLike)) and str(path).lower().endswith((".yaml", ".yml"))


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs: more than MAX_YAML_ALIASES aliases, or aliases that would
    expand to more than MAX_ALIAS_NODES values (merge keys ``<<: [*a, *a]`` copy at load time, so a
    bomb of 81 aliases otherwise reaches MemoryError inside ``safe_load``), or an alias inside itself."""

    def __init__(self, stream):
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise ValueError(f"line {mark.line + 1}: more than {MAX_YAML_ALIASES} aliases (*name); "
                                 "a dataset yaml needs few, this looks like an alias bomb")
        return super().compose_node(parent, index)

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None and self.aliases:
            _check_expansion(node)
        return node


def _check_expansion(root: yaml.Node) -> None:
    """Raise ValueError when the node graph, with every alias expanded, holds more than
    MAX_ALIAS_NODES values beyond its distinct nodes, or contains itself.  Iterative, memoised per node."""
    def children(node):
        if isinstance(node, yaml.SequenceNode):
            return node.value
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return ()

    size: Dict[int, int] = {}
    pending = set()  # nodes on the current path (pushed, not yet summed)
    stack = [(root, False)]
    while stack:
        node, summed = stack.pop()
        key = id(node)
        if summed:
            pending.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children(node))  # a few dozen digits at most
            continue
        if key in size:
            continue
        if key in pending:
            raise ValueError(f"line {node.start_mark.line + 1}: an alias refers to a value that contains it")
        pending.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in size)
    if size[id(root)] - len(size) > MAX_ALIAS_NODES:
        raise ValueError(f"aliases expand to more than {MAX_ALIAS_NODES:,} values; "
                         "this looks like an alias bomb")


def _kind(value) -> str:
    """A short description of a yaml value for messages (never its repr: it may be huge or nested)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({value}; unquoted yes/no/on/off/true/false are booleans in YAML)"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"the text {value[:40]!r}" + ("..." if len(value) > 40 else "")
    return {"list": "a list", "dict": "a mapping"}.get(type(value).__name__, type(value).__name__)


def _is_name(value) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _names_list(names, yaml_file: Path) -> List[str]:
    if names is None:
        return []
    if isinstance(names, dict):
        by_id = {}
        for k, v in names.items():
            try:
                if isinstance(k, bool) or not isinstance(k, (int, str)):
                    raise ValueError
                by_id[int(k)] = v
            except ValueError:
                raise ValueError(f"{yaml_file}: 'names' keys must be class ids 0..n-1, got {_kind(k)}") from None
        if sorted(by_id) != list(range(len(names))):
            raise ValueError(f"{yaml_file}: 'names' keys must be 0..{len(names) - 1} without gaps")
        values = [by_id[i] for i in range(len(names))]
    elif isinstance(names, list):
        values = names
    else:
        raise ValueError(f"{yaml_file}: 'names' must be a list or a mapping of id: name, got {_kind(names)}")
    for i, v in enumerate(values):
        if not _is_name(v):
            raise ValueError(f"{yaml_file}: 'names' entry {i} must be a name (text or a number), got {_kind(v)}")
    return [str(v) for v in values]


def _read_yaml(yaml_file: Union[Path, str]):
    """The parsed yaml, its size and alias expansion bounded.  Raises ValueError naming the file."""
    if is_url(yaml_file):
        backend = backend_for(yaml_file)
        info = backend.stat(yaml_file)
        big = info is not None and info.size > MAX_YAML_BYTES
        raw = backend.read(yaml_file, 0, MAX_YAML_BYTES + 1) if big else backend.read(yaml_file)
    else:
        with open(yaml_file, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    if len(raw) > MAX_YAML_BYTES:
        raise ValueError(f"{yaml_file}: larger than {MAX_YAML_BYTES >> 20} MiB; "
                         "a dataset yaml is a few kB (is this the right file?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{yaml_file}: not UTF-8 text (byte 0x{raw[e.start]:02x} on line {line})") from None
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise ValueError(f"{yaml_file}: not valid yaml ({' '.join(str(e).split())})") from None
    except ValueError as e:
        raise ValueError(f"{yaml_file}: {e}") from None
    except RecursionError:
        raise ValueError(f"{yaml_file}: values nested too deeply") from None
    finally:
        loader.dispose()


def _split_entries(entry, split: str, yaml_file: Path) -> List[str]:
    """A split's folders / .txt lists: a string or a list of strings."""
    entries = entry if isinstance(entry, list) else [entry]
    for e in entries:
        if not isinstance(e, str):
            where = f"'{split}'" if entries is not entry else f"an entry of '{split}'"
            raise ValueError(f"{yaml_file}: {where} must be a folder, a .txt list or a list of those "
                             f"(text), got {_kind(e)}")
    return entries


def load_dataset_yaml(yaml_file: PathLike) -> DatasetSpec:
    """Parse a YOLOv5-style dataset yaml (keys ``path``, ``train``, ``val``, ``test``, ``names``).

    A relative ``path`` is taken relative to the yaml's own folder (``path: .`` is that folder); split
    entries are relative to ``path``.  Without ``path`` they are relative to the yaml's folder.

    Args:
        yaml_file: the yaml's path, or an ``s3://`` URL.

    Returns:
        DatasetSpec: the splits' entries made absolute (local paths, or URLs in the bucket), the class
        names by id, and a pose dataset's ``kpt_shape`` and ``flip_idx``.

    Raises:
        FileNotFoundError: the yaml does not exist.
        ValueError: anything malformed (too large, not UTF-8, not yaml, an alias bomb, a bad key), with
            one line naming the file, the key and what was expected.
    """
    if is_url(yaml_file):
        if not backend_for(yaml_file).exists(yaml_file):
            raise FileNotFoundError(f"dataset yaml {yaml_file} does not exist")
    else:
        yaml_file = Path(yaml_file)
        if not yaml_file.exists():
            raise FileNotFoundError(f"dataset yaml {yaml_file} does not exist")
        if not yaml_file.is_file():
            raise ValueError(f"{yaml_file}: not a file (a dataset yaml is a text file)")
    data = _read_yaml(yaml_file)
    if not isinstance(data, dict):
        raise ValueError(f"{yaml_file}: expected a mapping with train/val/names, got {_kind(data)}")
    path = data.get("path")
    if path is not None and not isinstance(path, str):
        hint = "; quote a folder named by a number" if isinstance(path, (int, float)) else ""
        raise ValueError(f"{yaml_file}: 'path' must be a folder (text), got {_kind(path)}{hint}")
    root = _root(path, yaml_file)
    splits = {}
    for split in SPLITS:
        entry = data.get(split)
        if entry in (None, ""):
            continue
        splits[split] = [_entry(root, p) for p in _split_entries(entry, split, yaml_file)]
    nc = data.get("nc")
    if nc is not None and (isinstance(nc, bool) or not isinstance(nc, int) or nc < 0):
        raise ValueError(f"{yaml_file}: 'nc' must be the number of classes (a whole number), got {_kind(nc)}")
    names = _names_list(data.get("names"), yaml_file)
    if nc is not None and names and nc != len(names):
        raise ValueError(f"{yaml_file}: nc={nc} but {len(names)} names are given")
    kpt_shape, flip_idx = _keypoint_keys(data, yaml_file)
    channels = data.get("channels")
    if channels is not None and (isinstance(channels, bool) or not isinstance(channels, int) or channels < 1):
        raise ValueError(f"{yaml_file}: 'channels' must be the bands of its images (a whole number >= 1), "
                         f"got {_kind(channels)}")
    return DatasetSpec(yaml_file=yaml_file, root=root, splits=splits, names=names, kpt_shape=kpt_shape,
                       flip_idx=flip_idx, channels=channels)


def _root(path: Optional[str], yaml_file: Union[Path, str]) -> Union[Path, str]:
    """The folder the split entries are relative to: ``path`` (relative to the yaml's folder), else the
    yaml's folder; a URL where either is in a bucket."""
    if is_url(path):
        return path.rstrip("/")
    if is_url(yaml_file):
        return join_url(parent_url(yaml_file), path or ".")
    root = Path(path or ".").expanduser()
    if not root.is_absolute():
        root = (yaml_file.parent / root)
    return Path(os.path.normpath(root.absolute()))


def _entry(root: Union[Path, str], entry: str) -> str:
    """A split entry made absolute (a URL entry is kept as it is; a relative one in a bucket's
    dataset is in the bucket)."""
    if is_url(entry):
        return entry
    if is_url(root):
        return join_url(root, entry)
    return str(entry if Path(entry).is_absolute() else root / entry)


def _whole_numbers(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _keypoint_keys(data: dict, yaml_file: Path):
    """(kpt_shape, flip_idx) of a pose dataset yaml (None, None without them), checked."""
    shape, flip = data.get("kpt_shape"), data.get("flip_idx")
    if shape is None:
        if flip is not None:
            raise ValueError(f"{yaml_file}: 'flip_idx' without 'kpt_shape' (a pose dataset gives both)")
        return None, None
    if not (_whole_numbers(shape) and len(shape) == 2 and shape[0] >= 1 and shape[1] in (2, 3)):
        raise ValueError(f"{yaml_file}: 'kpt_shape' must be [keypoints, 2 or 3] (3: with a visibility "
                         f"column), got {shape!r}")
    if flip is None:
        return tuple(shape), None
    if not (_whole_numbers(flip) and sorted(flip) == list(range(shape[0]))):
        raise ValueError(f"{yaml_file}: 'flip_idx' must list each of the {shape[0]} keypoints once "
                         f"(0..{shape[0] - 1}, the one taking each one's place in a left-right flip), got {flip!r}")
    return tuple(shape), tuple(flip)
