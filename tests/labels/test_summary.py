"""What a run says by default: the per-split summary line and the label problems, on every run (scan or
cache), on the printing rank only, without the user configuring logging and without overriding it."""
import logging
import os
import sys
from pathlib import Path

import pytest

from conftest import make_dataset, run_all
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.labels.split import load_split
from yolo_data.labels.summary import split_summary

ROOT = Path(__file__).resolve().parents[2]
ITEMS = [("a.jpg", (64, 48), "0 0.5 0.5 0.25 0.5\n1 0.25 0.25 0.1 0.1\n"), ("b.jpg", (48, 64), "2 0.5 0.5 0.5 0.5\n"),
         ("bad.jpg", (50, 50), "0 0.5 0.5 0.2\n"),  # 4 columns: left out
         ("e.jpg", (40, 60), None)]  # no label file: a background
FIRST_PROBLEM = "left out: {root}/labels/train/bad.txt: line 1:"


def test_summary_line_and_problems_of_a_scan_and_of_the_cache(tmp_path):
    yaml = make_dataset(tmp_path / "ds", ITEMS)
    images = str(tmp_path / "ds" / "images" / "train")
    cache_file = tmp_path / "ds" / "labels" / "train.yolo_data.cache"
    line, problems = split_summary(load_split(images, nc=3), "train: ", yaml)
    assert line.startswith("train: 3 images, 3 boxes, 1 background, 1 corrupt, 0 warnings (scanned in ")
    assert line.endswith(f" s, cached in {cache_file})")
    assert problems[0] == "train: 1 problem in the labels (1 image left out, 0 warnings):"
    assert problems[1].startswith("  " + FIRST_PROBLEM.format(root=tmp_path / "ds"))
    assert problems[2] == f"  the full list: yolo-data-cache {yaml}"
    line, again = split_summary(load_split(images, nc=3), "train: ", yaml)
    assert line.startswith(f"train: 3 images, 3 boxes, 1 background, 1 corrupt, 0 warnings from {cache_file} (read in ")
    assert again == problems  # the cache keeps the problems: the same report on every run


def test_only_the_first_problems_are_listed(tmp_path):
    items = [(f"{i}.jpg", (32, 32), f"{i} 0.5 0.5 0.2 0.2\n") for i in range(9)]  # classes 3..8 are out of range
    make_dataset(tmp_path / "ds", items, names=("a", "b", "c"))
    split = load_split(str(tmp_path / "ds" / "images" / "train"), nc=3)
    line, problems = split_summary(split, "", [tmp_path / "x", tmp_path / "y"])
    assert line.startswith("3 images, 3 boxes, 0 backgrounds, 6 corrupt, 0 warnings")
    assert problems[0] == "6 problems in the labels (6 images left out, 0 warnings), the first 5:"
    assert len(problems) == 1 + 5 + 1 and problems[-1] == "  the full list: yolo-data-cache DATA"


def test_in_process_the_summary_goes_to_the_configured_logging(tmp_path, caplog):
    yaml = make_dataset(tmp_path / "ds", ITEMS)
    with caplog.at_level(logging.INFO, logger="yolo_data"):
        LoadImagesAndLabels(str(yaml), 64, split="train", prefix="val: ")
    msgs = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("val: 3 images, 3 boxes, 1 background, 1 corrupt") for m in msgs) == 1
    assert sum(m.startswith("val: 1 problem in the labels") for m in msgs) == 1
    # pytest's handler is on the root logger: logging is configured, so yolo_data adds no handler of its own
    assert not [h for h in logging.getLogger("yolo_data").handlers if type(h).__name__ == "_Console"]


# -- in a fresh process, as a user runs it ------------------------------------------------------------
SCRIPT = """
import logging, sys
mode = sys.argv[2]
if mode == "user":
    logging.basicConfig(handlers=[logging.StreamHandler(sys.stdout)], format="USER %(message)s", level=logging.INFO)
from yolo_data import LoadImagesAndLabels, select_device
if mode.startswith("later"):  # something printed before the program configures logging, then it does
    select_device("cpu")
    level = logging.WARNING if mode == "later-warning" else logging.INFO
    logging.basicConfig(handlers=[logging.StreamHandler(sys.stdout)], format="USER %(message)s", level=level)
    logging.getLogger("yolo_data").warning("a warning in between")  # before yolo_data looks at logging again
LoadImagesAndLabels(sys.argv[1], 64, split="train", prefix="train: ")
print("handlers:", len(logging.getLogger("yolo_data").handlers))
"""


def _run(tmp_path, yaml, mode="plain", local_rank=None):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
    if local_rank is not None:
        env["LOCAL_RANK"] = str(local_rank)
    r = run_all([sys.executable, str(script), str(yaml), mode], capture_output=True, text=True,
                env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_every_run_prints_the_summary_and_problems_without_logging_configured(tmp_path):
    yaml = make_dataset(tmp_path / "ds", ITEMS)
    cache_file = tmp_path / "ds" / "labels" / "train.yolo_data.cache"
    first_problem = FIRST_PROBLEM.format(root=tmp_path / "ds")
    out1, err1 = _run(tmp_path, yaml)
    out2, err2 = _run(tmp_path, yaml)
    for err in (err1, err2):
        lines = err.splitlines()
        assert sum(x.startswith("train: 3 images, 3 boxes, 1 background, 1 corrupt, 0 warnings") for x in lines) == 1
        assert lines.count("train: 1 problem in the labels (1 image left out, 0 warnings):") == 1
        assert sum(x.startswith("  " + first_problem) for x in lines) == 1
        assert f"  the full list: yolo-data-cache {yaml}" in lines
    assert "(scanned in " in err1 and f"cached in {cache_file})" in err1
    assert f"from {cache_file} (read in " in err2
    assert out1 == out2 == "handlers: 1\n"  # the one console handler, added once


def test_a_rank_that_does_not_print_prints_nothing(tmp_path):
    yaml = make_dataset(tmp_path / "ds", ITEMS)
    _run(tmp_path, yaml)  # the cache exists, as it would after local rank 0
    out, err = _run(tmp_path, yaml, local_rank=1)
    assert err == "" and out == "handlers: 0\n"
    out, err = _run(tmp_path, yaml, "later", local_rank=1)  # select_device is quiet there too
    assert err == "" and out == "USER a warning in between\nhandlers: 0\n"  # only the script's own warning


@pytest.mark.parametrize("mode", ["user", "later", "later-warning"])
def test_the_users_logging_configuration_is_respected(tmp_path, mode):
    yaml = make_dataset(tmp_path / "ds", ITEMS)
    out, err = _run(tmp_path, yaml, mode)
    lines = out.splitlines()
    if mode.startswith("later"):  # the device line came before the user configured logging: our handler showed it
        assert err.startswith("yolo_data ") and err.endswith(" CPU\n") and err.count("\n") == 1
    else:
        assert err == ""  # nothing on a handler of ours, nothing from Python's last resort
    # once, no duplicate; the user's level decides (INFO: the line too, WARNING: only the problems)
    assert sum(x.startswith("USER train: 3 images, 3 boxes") for x in lines) == (mode != "later-warning")
    assert sum(x.startswith("USER train: 1 problem in the labels") for x in lines) == 1
    assert lines.count("USER a warning in between") == (mode != "user")
    assert lines[-1] == "handlers: 0"  # the user's handlers are on the root logger; ours is gone or never added
