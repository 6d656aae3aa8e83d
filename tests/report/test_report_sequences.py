"""The report's ``sequence-leakage`` finding (yolo_data.report.leakage): on generated clips of numbered frames split at
random it counts the val and test frames within k frames of a training frame, as a brute-force comparison of the
lists' file names says; the same clips split by whole clips report nothing; numbered photos (generated, and
coco128) are not videos and report nothing; without reading the images, or without a train split, nothing is
checked; ``--sequence-frames`` and ``--fail-on sequence-leakage`` on the command line; the page's section."""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import pytest

from conftest import SHARED, write_image
from recordings import random_split, write_recordings
from yolo_data.cli import main as cli_main
from yolo_data.report.compose import FINDINGS, ReportOptions, make_report
from yolo_data.report.sequence import DEFAULT_FRAMES

FAST = ReportOptions(pictures=False, progress=False, workers=2)
CLIPS, FRAMES = 6, 12


def lists_yaml(root: Path, name: str, lists: Dict[str, List[str]]) -> Path:
    """A dataset yaml ``root``/``name``.yaml whose splits are the given lists of image paths."""
    for split, files in lists.items():
        (root / f"{name}_{split}.txt").write_text("\n".join(files) + "\n")
    yaml = root / f"{name}.yaml"
    yaml.write_text(f"path: {root}\n" + "".join(f"{s}: {name}_{s}.txt\n" for s in lists) + "names: ['a', 'b', 'c']\n")
    return yaml


def split_lists(yaml: Path) -> Dict[str, List[str]]:
    """The image lists a yaml written by random_split or lists_yaml names, by split."""
    return {line.split(":")[0]: (yaml.parent / line.split(":")[1].strip()).read_text().split()
            for line in yaml.read_text().splitlines() if line.split(":")[0] in ("train", "val", "test")}


def clip_frame(path: str):
    m = re.fullmatch(r"clip(\d+)_(\d+)\.jpg", Path(path).name)
    return int(m[1]), int(m[2])


def near_by_hand(lists: Dict[str, List[str]], k: int) -> Dict[str, int]:
    """Per split other than train: its frames with a training frame of the same clip at most k frames away,
    every pair compared."""
    train = [clip_frame(p) for p in lists["train"]]
    return {split: sum(any(c == tc and abs(f - tf) <= k for tc, tf in train) for c, f in map(clip_frame, files))
            for split, files in lists.items() if split != "train"}


def straddling_clips(lists: Dict[str, List[str]]) -> int:
    """Clips with frames in two splits: each clip is one run (every frame 0..11 is listed by some split)."""
    splits_of: Dict[int, set] = {}
    for split, files in lists.items():
        for p in files:
            splits_of.setdefault(clip_frame(p)[0], set()).add(split)
    return sum(len(s) > 1 for s in splits_of.values())


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Six clips of twelve frames, split three ways: at random (random_split: train and val), at random into
    train, val and test (random_split's val cut in two), and by whole clips (0-3 train, 4-5 val)."""
    root = tmp_path_factory.mktemp("clips")
    files = write_recordings(root, clips=CLIPS, frames=FRAMES)
    random_yaml = random_split(root, files, val=0.25, seed=0)
    lists = split_lists(random_yaml)
    half = len(lists["val"]) // 2
    three = lists_yaml(root, "three", {"train": lists["train"], "val": lists["val"][:half],
                                        "test": lists["val"][half:]})
    whole = lists_yaml(root, "whole", {"train": [p for p in files if clip_frame(p)[0] < 4],
                                       "val": [p for p in files if clip_frame(p)[0] >= 4]})
    return SimpleNamespace(root=root, files=files, random=random_yaml, three=three, whole=whole)


def test_a_random_split_leaks_what_the_names_say(clips):
    lists = split_lists(clips.random)
    expected = near_by_hand(lists, DEFAULT_FRAMES)
    assert 0 < expected["val"] <= len(lists["val"])
    f = make_report(clips.random, FAST).figures
    s = f["sequences"]
    assert s["checked"] and s["frames"] == DEFAULT_FRAMES
    assert s["near_training"] == expected and f["findings"]["sequence-leakage"] == expected["val"]
    assert s["recordings_total"] == s["videos"] == CLIPS and all(r["video"] for r in s["recordings"])
    assert s["runs_across"] == straddling_clips(lists) == sum(r["runs_across"] for r in s["recordings"])
    assert {r["name"].rsplit("/", 1)[1] for r in s["recordings"]} == {f"clip{c}_#" for c in range(CLIPS)}
    for r in s["recordings"]:
        c = int(r["name"].rsplit("clip", 1)[1][:-2])
        assert r["images"] == {k: n for k, n in ((k, sum(clip_frame(p)[0] == c for p in v)) for k, v in lists.items())
                               if n}
    assert 0 < len(s["examples"]) <= 5
    for x in s["examples"]:  # the nearest training frame, of the same clip
        (c, fr), (tc, tf) = clip_frame(x["file"]), clip_frame(x["train_file"])
        assert x["file"] in lists[x["split"]] and x["train_file"] in lists["train"] and c == tc
        assert x["frames_apart"] == abs(fr - tf) == min(abs(fr - t) for cc, t in map(clip_frame, lists["train"])
                                                        if cc == c)


def test_sequence_frames_and_a_test_split(clips):
    lists = split_lists(clips.three)
    counts = {}
    for k in (1, 3):
        f = make_report(clips.three, ReportOptions(pictures=False, progress=False, workers=2,
                                                   sequence_frames=k)).figures
        expected = near_by_hand(lists, k)
        assert f["sequences"]["frames"] == k and f["sequences"]["near_training"] == expected
        assert f["findings"]["sequence-leakage"] == expected["val"] + expected["test"]
        counts[k] = expected["val"] + expected["test"]
    assert counts[1] < counts[3]  # a wider window finds more


def test_whole_clips_do_not_leak(clips):
    f = make_report(clips.whole, FAST).figures
    s = f["sequences"]
    assert s["checked"] and s["videos"] == CLIPS
    assert s["near_training"] == {"val": 0} and s["runs_across"] == 0 and s["examples"] == []
    assert f["findings"]["sequence-leakage"] == 0 and f["findings"]["leakage"] == 0


def test_numbered_photos_are_not_videos(tmp_path):
    photos = [str(write_image(tmp_path / "images" / f"photo_{i:04d}.jpg", 64, 48, seed=i)) for i in range(24)]
    lists = {"train": photos[0::2], "val": photos[1::2]}  # every val photo's neighbours train
    f = make_report(lists_yaml(tmp_path, "photos", lists), FAST).figures
    s = f["sequences"]
    assert s["checked"] and s["recordings_total"] == 1 and s["videos"] == 0
    assert s["recordings"][0]["video"] is False and s["recordings"][0]["runs_across"] == 1
    assert s["near_training"] == {"val": 0} and s["runs_across"] == 0 and s["examples"] == []
    assert f["findings"]["sequence-leakage"] == 0


@pytest.mark.skipif(not (SHARED / "coco128").is_dir(), reason="../shared/datasets is absent")
def test_coco_ids_are_not_frames():
    """coco128's train2017 and val2017 photos are one 'recording' by name (images/#), 3 val ids within 10 of a
    train id; their pictures are not alike, so nothing leaks."""
    f = make_report(SHARED / "coco128" / "coco128.yaml", FAST).figures
    s = f["sequences"]
    assert s["checked"] and s["recordings_total"] == 1 and s["videos"] == 0
    assert s["recordings"][0]["runs_across"] > 0  # the names alone would have said so
    assert f["findings"]["sequence-leakage"] == 0 and s["runs_across"] == 0


def test_not_checked_without_images_or_a_train_split(clips):
    f = make_report(clips.random, ReportOptions(pictures=False, progress=False, duplicates=False)).figures
    assert f["sequences"] == {"checked": False, "why": "the images were not read"}
    assert f["findings"]["sequence-leakage"] == 0
    # a folder is one split, named after it: nothing to be near
    f = make_report(clips.root / "images", FAST).figures
    assert f["sequences"]["checked"] is False and "train" in f["sequences"]["why"]
    assert f["findings"]["sequence-leakage"] == 0


def test_cli_fail_on_sequence_leakage_and_the_page(clips, tmp_path, capsys):
    out = tmp_path / "rep"
    lists = split_lists(clips.random)
    argv = ["report", str(clips.random), "--out", str(out), "--no-pictures", "--workers", "2"]
    assert cli_main(argv + ["--fail-on", "sequence-leakage"]) == 1
    captured = capsys.readouterr()
    figures = json.loads(out.with_suffix(".json").read_text())
    near, leakage = near_by_hand(lists, DEFAULT_FRAMES)["val"], figures["findings"]["leakage"]
    assert (f"sequences: {CLIPS} recordings of numbered frames, {CLIPS} videos among them; within {DEFAULT_FRAMES} "
            f"frames of a training frame: val {near}; groups that straddle splits: {straddling_clips(lists)} runs of "
            f"neighbouring frames, {leakage} duplicate groups") in captured.out
    assert f"sequence-leakage {near}" in captured.out and "failed on: sequence-leakage" in captured.err
    page = out.with_suffix(".html").read_text()
    section = page[page.index("id='sequences'"):page.index("id='geometry'")]
    assert f"within {DEFAULT_FRAMES} frames of a training frame" in section
    assert all(Path(x["file"]).name in section for x in figures["sequences"]["examples"])
    assert cli_main(argv + ["--fail-on", "all"]) == 1
    assert "sequence-leakage" in capsys.readouterr().err.split("failed on:")[1]
    assert "sequence-leakage" in FINDINGS
    # K on the command line
    assert cli_main(argv + ["--sequence-frames", "1"]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["sequences"]["near_training"] == near_by_hand(lists, 1)
    with pytest.raises(SystemExit) as e:
        cli_main(argv + ["--sequence-frames", "0"])
    assert e.value.code == 2 and "--sequence-frames: must be 1 or more, got 0" in capsys.readouterr().err
    # by whole clips: nothing near, exit 0
    assert cli_main(["report", str(clips.whole), "--out", str(out), "--no-pictures", "--workers", "2",
                     "--fail-on", "sequence-leakage"]) == 0
    assert "sequence-leakage 0" in capsys.readouterr().out
    # not read: not checked, and said so
    assert cli_main(argv + ["--no-duplicates", "--fail-on", "sequence-leakage"]) == 0
    assert "sequences: not checked (the images were not read)" in capsys.readouterr().out
    page = out.with_suffix(".html").read_text()
    assert "Not checked (the images were not read)" in page[page.index("id='sequences'"):]


def test_the_list_of_recordings_is_capped(clips, monkeypatch):
    """At most MAX_RECORDINGS recordings are listed, the most that straddle splits first; the totals count all."""
    from yolo_data.report import leakage
    lists = split_lists(clips.whole)
    monkeypatch.setattr(leakage, "MAX_RECORDINGS", 2)
    lists["train"] += [lists["val"][-1]]  # clip 5 straddles splits now (its last frame listed by both)
    s = make_report(lists_yaml(clips.root, "capped", lists), FAST).figures["sequences"]
    assert s["recordings_total"] == s["videos"] == CLIPS and len(s["recordings"]) == 2
    assert s["recordings"][0]["name"].endswith("clip5_#") and s["recordings"][0]["runs_across"] == 1
    assert s["runs_across"] == 1 and s["near_training"] == near_by_hand(lists, DEFAULT_FRAMES) == {"val": FRAMES - 1}
