"""Where the files are: a path, a .txt list, a folder or a dataset yaml -> sorted image files.

Only reading happens here.  A dataset yaml is parsed with ``yaml.safe_load``; nothing in it is executed
or downloaded (YOLOv5 runs a ``download:`` script, we do not).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import yaml

# Suffixes YOLOv5 accepts as images (lower case, no dot).
IMG_FORMATS = ("bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm")
SPLITS = ("train", "val", "test")

PathLike = Union[str, os.PathLike]


@dataclass
class DatasetSpec:
    """A parsed dataset yaml.

    ``splits`` maps 'train'/'val'/'test' to what that split names (a folder, a .txt list or a list of
    those), already made absolute against ``root``.  ``names`` is a list indexed by class id.
    """
    yaml_file: Path
    root: Path
    splits: Dict[str, List[str]] = field(default_factory=dict)
    names: List[str] = field(default_factory=list)

    @property
    def nc(self) -> int:
        return len(self.names)


def is_dataset_yaml(path) -> bool:
    return isinstance(path, (str, os.PathLike)) and str(path).lower().endswith((".yaml", ".yml"))


def _names_list(names, yaml_file: Path) -> List[str]:
    if names is None:
        return []
    if isinstance(names, dict):
        try:
            ids = sorted(int(k) for k in names)
        except (TypeError, ValueError):
            raise ValueError(f"{yaml_file}: 'names' keys must be class ids 0..n-1, got {list(names)[:5]}")
        if ids != list(range(len(ids))):
            raise ValueError(f"{yaml_file}: 'names' keys must be 0..{len(ids) - 1} without gaps")
        return [str(names[k] if k in names else names[str(k)]) for k in ids]
    if isinstance(names, (list, tuple)):
        return [str(n) for n in names]
    raise ValueError(f"{yaml_file}: 'names' must be a list or a dict of id: name, got {type(names).__name__}")


def load_dataset_yaml(yaml_file: PathLike) -> DatasetSpec:
    """Parse a YOLOv5-style dataset yaml (keys ``path``, ``train``, ``val``, ``test``, ``names``).

    A relative ``path`` is taken relative to the yaml's own folder (``path: .`` is that folder); split
    entries are relative to ``path``.  Without ``path`` they are relative to the yaml's folder.
    """
    yaml_file = Path(yaml_file)
    if not yaml_file.is_file():
        raise FileNotFoundError(f"dataset yaml {yaml_file} does not exist")
    with open(yaml_file, encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ValueError(f"{yaml_file}: not valid yaml ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{yaml_file}: expected a mapping with train/val/names, got {type(data).__name__}")
    root = Path(data.get("path") or ".").expanduser()
    if not root.is_absolute():
        root = (yaml_file.parent / root)
    root = Path(os.path.normpath(root.absolute()))
    splits = {}
    for split in SPLITS:
        entry = data.get(split)
        if entry in (None, ""):
            continue
        entries = entry if isinstance(entry, (list, tuple)) else [entry]
        splits[split] = [str(p if Path(p).is_absolute() else root / p) for p in map(str, entries)]
    names = _names_list(data.get("names"), yaml_file)
    if "nc" in data and names and int(data["nc"]) != len(names):
        raise ValueError(f"{yaml_file}: nc={data['nc']} but {len(names)} names are given")
    return DatasetSpec(yaml_file=yaml_file, root=root, splits=splits, names=names)


def list_image_files(path: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    """Image files named by ``path``, as YOLOv5 finds them, sorted as strings.

    ``path`` is a folder (searched recursively), a .txt file with one image path a line (``./x`` is
    relative to the .txt's folder, other relative entries to the working directory, as in YOLOv5), a
    single image file, or a list of these.  Files whose suffix is not an image format are skipped.
    """
    files: List[str] = []
    for p in path if isinstance(path, (list, tuple)) else [path]:
        p = Path(p)
        if p.is_dir():
            # Hidden names are skipped as glob('**/*.*') skips them in YOLOv5 (macOS '._x.jpg' files).
            for dirpath, dirnames, filenames in os.walk(p, followlinks=True):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                files.extend(os.path.join(dirpath, f) for f in filenames if not f.startswith("."))
        elif p.is_file() and p.suffix.lower() == ".txt":
            parent = str(p.parent) + os.sep
            with open(p, encoding="utf-8") as t:
                lines = [x.strip() for x in t.read().strip().splitlines()]
            files.extend(x.replace("./", parent, 1) if x.startswith("./") else x for x in lines if x)
        elif p.is_file():
            files.append(str(p))
        else:
            raise FileNotFoundError(f"{p} does not exist (expected an image folder, a .txt list or a dataset yaml)")
    return sorted(f for f in files if f.rsplit(".", 1)[-1].lower() in IMG_FORMATS)


def img2label_path(im_file: str) -> str:
    """The label file YOLOv5 reads for an image: last ``/images/`` -> ``/labels/``, suffix -> ``.txt``."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return sb.join(im_file.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt"


def default_cache_file(path: Union[PathLike, Sequence[PathLike]], first_label_file: Optional[str]) -> Path:
    """Where YOLOv5 keeps the label cache of ``path``: beside a .txt list, else beside the labels folder.

    ``labels/train2017/`` -> ``labels/train2017.cache``.
    """
    p = Path(path[0] if isinstance(path, (list, tuple)) else path)
    if p.is_file():
        return p.with_suffix(".cache")
    if first_label_file is None:
        return (p.parent / p.name).with_suffix(".cache")
    return Path(first_label_file).parent.with_suffix(".cache")
