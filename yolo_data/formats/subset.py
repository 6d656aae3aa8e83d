"""A subset list: some images of a split of any label format, read with that format's labels.

``yolo-data split`` writes one per split where the source's labels are not one file per image (a COCO JSON, a
VOC folder, LabelMe, Parquet, NDJSON), so that its train and val take their images from the same annotations
without a copy of them.  A file named ``NAME.subset.json`` holding::

    {"yolo_data_subset": 1, "source": ["/data/coco/annotations/instances.json"],
     "images": ["/data/coco/images/000000000009.jpg", ...]}

``source``: the split entries the labels come from (read by the format that claims them); ``images``: the images
kept, as that format lists them.  The split's images are the source's, in its order, that the list names; a
listed image the source does not hold is named as a problem.  The label cache goes beside the subset file
(``NAME.subset.cache``; for a list in a bucket, where the source's would go), its fingerprint covering the
source's and the list's.  The cache records the source's format, which reads the labels on every rank.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, List

from ..storage import backend_for, is_url, write_whole
from .base import LabelFormat, SourceOptions, SplitSource
from .problems import Problem

SUFFIX = ".subset.json"
VERSION = 1
MAX_BYTES = 1 << 30  # a million images of long paths is about 200 MB


def read_subset(entry) -> dict:
    """The subset file ``entry`` (a path or URL), checked: {"source": [...], "images": [...]}.  Raises
    FileNotFoundError or ValueError naming the file."""
    try:
        if is_url(str(entry)):
            raw = backend_for(str(entry)).read(str(entry))
        else:
            with open(entry, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise FileNotFoundError(f"subset list {entry} does not exist") from None
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{entry}: larger than {MAX_BYTES >> 20} MiB; is this a subset list?")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{entry}: not a subset list (not JSON: {e})") from None
    if not isinstance(data, dict) or data.get("yolo_data_subset") != VERSION:
        raise ValueError(f"{entry}: not a subset list of this version (its 'yolo_data_subset' key is not {VERSION})")
    for key in ("source", "images"):
        if not isinstance(data.get(key), list) or not all(isinstance(v, str) for v in data[key]):
            raise ValueError(f"{entry}: '{key}' must be a list of paths")
    if not data["source"]:
        raise ValueError(f"{entry}: 'source' names no split entry")
    return data


def write_subset(path: Path, source: List[str], images: List[str]) -> None:
    """Write the subset file ``path``: ``images`` of the split entries ``source``, whole or not at all."""
    text = json.dumps({"yolo_data_subset": VERSION, "source": list(source), "images": list(images)}, indent=0)
    write_whole(path, (text + "\n").encode("utf-8"))


class SubsetFormat(LabelFormat):
    """Claims ``*.subset.json``; the split's labels are read by the format of the source it names, through
    ``opener`` (formats.open_source, given by the registry so that this module does not import it)."""
    name = "subset"
    cuts_by_files = False
    tasks = ("detect", "segment", "pose", "obb")

    def __init__(self, opener: Callable[[Any, SourceOptions], SplitSource]):
        self.opener = opener

    def claims(self, entry: Path) -> bool:
        return str(entry).lower().endswith(SUFFIX)

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        subsets = [read_subset(e) for e in entries]
        source = list(dict.fromkeys(s for sub in subsets for s in sub["source"]))
        inner = self.opener(source, options)
        wanted = dict.fromkeys(p for sub in subsets for p in sub["images"])
        index = [i for i, f in enumerate(inner.im_files) if f in wanted]
        held = {inner.im_files[i] for i in index}
        missing = [Problem(p, f"listed in {entries[0]} but not in {', '.join(source)}", True)
                   for p in wanted if p not in held]
        digest = hashlib.sha256("\n".join(wanted).encode("utf-8", "surrogateescape")).hexdigest()[:16]
        first = Path(str(entries[0]))
        cache = (inner.default_cache.with_name(f"{inner.default_cache.stem}.subset-{digest}.cache") if is_url(str(entries[0]))
                 else first.with_name(first.name[:-len(SUFFIX)] + ".subset.cache"))
        return SplitSource(
            kind=inner.kind, im_files=[inner.im_files[i] for i in index], labels=[inner.labels[i] for i in index],
            label_files=None if inner.label_files is None else [inner.label_files[i] for i in index],
            reader=inner.reader, names=inner.names,
            settings={**inner.settings, "subset": digest, "subset_images": len(wanted)},
            default_cache=cache,
            label_file_of=inner.label_file_of, problems=inner.problems + missing, nc=inner.nc,
            discover=inner.discover, kept_on_disk=inner.kept_on_disk)
