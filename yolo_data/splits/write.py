"""The files of a split, written into the folder the user names and nowhere else: one list per split, a dataset
yaml naming them, the summary as JSON, and the images left out of every split.

A split of YOLO labels is a plain ``.txt`` list of images (as YOLOv5 and Ultralytics read one too); a split of
any other format is a subset list (formats/subset.py) naming the annotations it reads, since a list of images
alone would not find them.  Each file is written whole or not at all: a temporary beside it, renamed over it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

import yaml

from ..formats.subset import SUFFIX, write_subset
from ..storage import is_url, write_whole
from .plan import SplitPlan

YAML_NAME = "data.yaml"
SUMMARY_NAME = "split.json"
LEFT_OUT_NAME = "left_out.txt"


def _write_text(path: Path, text: str) -> None:
    write_whole(path, text.encode("utf-8", "surrogateescape"))  # a name that is not UTF-8 keeps its bytes


def write_split(plan: SplitPlan, out) -> Dict[str, Path]:
    """Write ``plan``'s lists, ``data.yaml`` and ``split.json`` into the folder ``out`` (made when missing).

    Args:
        plan: from plan.split_dataset.
        out: a local folder.

    Returns:
        {what: file written}: each split's list by its name, 'yaml', 'summary', and 'left_out' when frames were
        left out.

    Raises:
        ValueError: ``out`` is a URL (the lists go to a local folder; they may name images in a bucket).
        OSError: a file cannot be written.
    """
    if is_url(str(out)):
        raise ValueError(f"--out {out}: the lists are written to a local folder (they may name images in a bucket)")
    out = Path(out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    pool, written = plan.pool, {}
    plain = pool.kind == "yolo"
    sides = plan.split.tolist()
    for s, name in enumerate(plan.names):
        files = [f for f, where in zip(pool.files, sides) if where == s]
        if plain:
            written[name] = out / f"{name}.txt"
            _write_text(written[name], "".join(f + "\n" for f in files))
        else:
            written[name] = out / f"{name}{SUFFIX}"
            write_subset(written[name], pool.source, files)
    left = [f for f, where in zip(pool.files, sides) if where < 0]
    if left:
        written["left_out"] = out / LEFT_OUT_NAME
        _write_text(written["left_out"], "".join(f + "\n" for f in left))
    written["yaml"] = out / YAML_NAME
    _write_text(written["yaml"], dataset_yaml(plan, out, {k: written[k].name for k in plan.names}))
    written["summary"] = out / SUMMARY_NAME
    _write_text(written["summary"], json.dumps(plan.figures, indent=1) + "\n")
    return written


def dataset_yaml(plan: SplitPlan, out: Path, lists: Dict[str, str]) -> str:
    """The dataset yaml of the new splits: ``path`` the folder, each split its list, the class names (and a pose
    dataset's ``kpt_shape`` and ``flip_idx``, the images' ``channels``) as the source had them."""
    pool, spec = plan.pool, plan.pool.spec
    nc = max(len(pool.names), int(pool.label_class.max()) + 1 if len(pool.label_class) else 0)
    names = {c: pool.names[c] if c < len(pool.names) else str(c) for c in range(nc)}
    data = {"path": str(out), **lists, "names": names}
    if spec is not None:
        if spec.kpt_shape:
            data["kpt_shape"] = list(spec.kpt_shape)
        if spec.flip_idx:
            data["flip_idx"] = list(spec.flip_idx)
        if spec.channels:
            data["channels"] = spec.channels
    head = f"# made by yolo-data split from {plan.figures.get('data', '')}; seed {plan.figures['seed']}\n"
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=None)
