"""``yolo-data split`` (yolo_data.splits) on generated recordings and shared datasets: no group straddles the new
splits, the shares are within the tolerance, the same seed gives the same lists, neighbouring frames that a random
split leaks stay on one side, the dataset is left as it was, and the lists load (YOLO lists, subset lists of VOC)."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import SHARED, tree_digest
from recordings import random_split, write_recordings
from yolo_data.cli import main as cli_main
from yolo_data.report.sequence import near_training, parse_frames
from yolo_data.splits import GroupBy, SplitOptions, split_dataset

CLIPS, FRAMES = 10, 8


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """10 clips of 8 frames (clip 1 films clip 0's scene again), drawn into train and val at random."""
    root = tmp_path_factory.mktemp("clips")
    files = write_recordings(root, clips=CLIPS, frames=FRAMES, shared=(1,))
    return root, files, random_split(root, files, val=0.2)


def read_lists(out: Path, names=("train", "val")):
    return {n: (out / f"{n}.txt").read_text().split() for n in names if (out / f"{n}.txt").exists()}


def clip_of(path: str) -> int:
    return int(re.search(r"clip(\d+)_", path).group(1))


def side_of(lists):
    return {f: n for n, files in lists.items() for f in files}


def test_sequence_split_keeps_recordings_whole(clips, tmp_path, capsys):
    root, files, data = clips
    before = tree_digest(root)
    # the random split leaks: most val frames have a training frame of their clip a frame or two away
    rand = {n: (root / f"random_{n}.txt").read_text().split() for n in ("train", "val")}
    frames = parse_frames(files)
    leaked = near_training(frames, np.array([0 if f in set(rand["train"]) else 1 for f in files]), k=2).sum()
    assert leaked >= len(rand["val"]) // 2

    out = tmp_path / "out"
    assert cli_main(["split", str(data), "--val", "0.2", "--group-by", "sequence", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lists = read_lists(out)
    assert sorted(lists["train"] + lists["val"]) == sorted(files)  # every image, once
    side = side_of(lists)
    for c in range(CLIPS):  # a clip is one run: whole on one side
        assert len({side[f] for f in files if clip_of(f) == c}) == 1
    assert near_training(frames, np.array([0 if side[f] == "train" else 1 for f in files]), k=10).sum() == 0
    assert len(lists["val"]) == 0.2 * len(files)  # two whole clips of ten
    summary = json.loads((out / "split.json").read_text())
    assert summary["straddling_groups"] == 0 and summary["groups"] == CLIPS
    assert summary["splits"]["val"] == {"asked": 0.2, "images": 16, "share": 0.2}
    assert "groups that straddle splits: 0" in printed and "wrote" in printed
    spec = yaml.safe_load((out / "data.yaml").read_text())
    assert spec["path"] == str(out) and spec["train"] == "train.txt" and spec["names"] == {0: "a", 1: "b", 2: "c"}
    # the report counts what the random split leaks, and nothing after the split
    assert cli_main(["report", str(data), "--no-pictures", "--out", str(tmp_path / "r1"),
                     "--fail-on", "sequence-leakage"]) == 1
    assert json.loads((tmp_path / "r1.json").read_text())["findings"]["sequence-leakage"] == leaked_k10(files, rand)
    assert cli_main(["report", str(out / "data.yaml"), "--no-pictures", "--out", str(tmp_path / "r2"),
                     "--fail-on", "sequence-leakage"]) == 0
    assert tree_digest(root) == before  # the dataset is left as it was


def leaked_k10(files, lists):
    """Val images with a training frame of their clip at most 10 frames away, counted pair by pair."""
    train = set(lists["train"])
    number = {f: int(re.search(r"_(\d+)\.jpg$", f).group(1)) for f in files}
    return sum(1 for v in lists["val"] if any(clip_of(t) == clip_of(v) and abs(number[t] - number[v]) <= 10
                                              for t in train))


def test_same_seed_same_lists_and_similar_joins_clips(clips, tmp_path):
    _, files, data = clips
    outs = []
    for k, seed in enumerate((3, 3, 4, 5, 6)):
        out = tmp_path / f"o{k}"
        assert cli_main(["split", str(data), "--val", "0.2", "--group-by", "similar,sequence", "--seed", str(seed),
                         "--out", str(out)]) == 0
        outs.append(read_lists(out))
        side = side_of(outs[-1])
        # clip 1 films clip 0's scene again: 'similar' puts both on one side, whatever the seed
        assert len({side[f] for f in files if clip_of(f) in (0, 1)}) == 1
    assert outs[0] == outs[1]
    assert any(o != outs[0] for o in outs[2:])  # another seed, another draw among equal groups


def test_folder_and_regex_groups(tmp_path):
    files = []
    for c in range(6):  # recordings in folders of their own, names without numbers
        files += write_recordings(tmp_path / "ds", clips=1, frames=4, seed=c, folder=f"images/rec{c}")
    renamed = []
    for f in files:
        p = Path(f)
        new = p.with_name(p.name.replace("clip0_", "shot-").replace("0", "o").replace("1", "l")
                          .replace("2", "z").replace("3", "e"))
        p.rename(new)
        Path(str(p).replace("/images/", "/labels/")[:-4] + ".txt").rename(
            str(new).replace("/images/", "/labels/")[:-4] + ".txt")
        renamed.append(str(new))
    assert parse_frames(renamed).recording.max() == -1  # no number left in the names
    out = tmp_path / "out"
    assert cli_main(["split", str(tmp_path / "ds" / "images"), "--val", "0.34", "--group-by", "folder",
                     "--out", str(out)]) == 0
    side = side_of(read_lists(out))
    for c in range(6):
        assert len({side[f] for f in renamed if f"/rec{c}/" in f}) == 1
    assert sum(1 for s in side.values() if s == "val") == 8
    # the same folders found by a pattern (its first group), a comma inside the pattern kept
    out2 = tmp_path / "out2"
    assert cli_main(["split", str(tmp_path / "ds" / "images"), "--val", "0.34", "--group-by",
                     r"regex:/(rec\d{1,2})/", "--out", str(out2)]) == 0
    side2 = side_of(read_lists(out2))
    for c in range(6):
        assert len({side2[f] for f in renamed if f"/rec{c}/" in f}) == 1
    assert GroupBy.parse(r"sequence,regex:a{1,2},b").ways == ("sequence", "regex:a{1,2},b")


def test_one_long_video_cut_into_pieces(tmp_path):
    files = write_recordings(tmp_path / "ds", clips=1, frames=60)
    out = tmp_path / "out"
    # one run of 60 frames: nothing to split without cutting it
    assert cli_main(["split", str(tmp_path / "ds" / "images"), "--val", "0.25", "--group-by", "sequence",
                     "--out", str(out)]) == 2
    assert cli_main(["split", str(tmp_path / "ds" / "images"), "--val", "0.25", "--group-by", "sequence",
                     "--chunk", "15", "--frames", "2", "--out", str(out)]) == 0
    lists = read_lists(out)
    left = (out / "left_out.txt").read_text().split()
    assert len(left) == 3 * 2  # the 2 frames after each of 3 cuts
    assert sorted(lists["train"] + lists["val"] + left) == sorted(files)
    side = side_of(lists)
    frames = parse_frames(files)
    split = np.array([{"train": 0, "val": 1}.get(side.get(f), 2) for f in files])
    assert near_training(frames, np.where(split == 2, 1, split), k=2)[split == 1].sum() == 0
    assert len(lists["val"]) == 13  # one piece of 15 frames, its first 2 left out
    summary = json.loads((out / "split.json").read_text())
    assert summary["groups"] == 4 and summary["left_out"] == 6
    assert summary["classes"][0]["groups"] == 4 and summary["classes"][0]["objects"] == 60 - 6


def test_bad_requests_exit_2(clips, tmp_path, capsys):
    _, _, data = clips
    out = str(tmp_path / "o")
    for args, said in [(["--val", "0"], "--val must be above 0"),
                       (["--val", "0.6", "--test", "0.5"], "leave nothing to train on"),
                       (["--group-by", "frames"], "unknown way 'frames'"),
                       (["--group-by", "regex:(unclosed"], "does not compile"),
                       (["--group-by", "sequence", "--chunk", "0"], "--chunk must be 1 or more"),
                       (["--tolerance", "2"], "--tolerance must be")]:
        base = {"--val": "0.2", "--group-by": "sequence"}
        argv = ["split", str(data), "--out", out]
        for k, v in base.items():
            if k not in args:
                argv += [k, v]
        assert cli_main(argv + args) == 2, args
        assert said in capsys.readouterr().err
    assert cli_main(["split", str(tmp_path / "none.yaml"), "--val", "0.1", "--group-by", "folder", "--out", out]) == 2
    assert "does not exist" in capsys.readouterr().err
    # every image in one folder: one group cannot fill two splits
    assert cli_main(["split", str(data), "--val", "0.2", "--group-by", "folder", "--out", out]) == 2
    assert "1 group(s) by folder: too few to fill 2 splits" in capsys.readouterr().err
    # ten clips of eight frames: a test share of a few frames cannot be met by a whole clip
    assert cli_main(["split", str(data), "--val", "0.2", "--test", "0.01", "--group-by", "sequence",
                     "--out", out]) == 2
    assert "no group went to test" in capsys.readouterr().err
    assert not Path(out).exists()  # nothing written when nothing was split


@pytest.mark.skipif(not (SHARED / "coco128").is_dir(), reason="../shared/datasets is absent")
def test_coco128_class_shares(tmp_path):
    """coco128's 80 classes over train/val/test, every image its own group but for copies: the image shares hit
    the asked ones; the classes in fewer images than splits are named as not splittable, and the classes' shares
    miss theirs less than in any random draw."""
    plan = split_dataset(str(SHARED / "coco128" / "coco128.yaml"),
                         SplitOptions(val=0.15, test=0.1, group_by=GroupBy.parse("similar"), progress=False))
    f = plan.figures
    assert f["images"] == 256 and f["straddling_groups"] == 0
    for name, s in f["splits"].items():
        assert abs(s["images"] - s["asked"] * 256) < 1, (name, s)  # singleton groups: within an image
    label_image, label_class = plan.pool.label_image, plan.pool.label_class
    groups_of_class = {c: len({int(plan.pool.label_image[i]) for i in np.flatnonzero(label_class == c)})
                       for c in np.unique(label_class).tolist()}
    names = plan.pool.names
    # no copies in coco128's two folders: a class's groups are its images
    assert sorted(f["cannot_split"]) == sorted(names[c] for c, k in groups_of_class.items() if k < 3)
    # the class shares miss less than those of any of 20 random draws of the same image counts
    def total_miss(split):
        got = np.zeros((3, len(names)))
        np.add.at(got, (split[label_image], label_class), 1)
        share = got / np.maximum(got.sum(0), 1)
        return float(((share - np.array([s['asked'] for s in f['splits'].values()])[:, None]) ** 2)[:, got.sum(0) > 0].sum())
    rng = np.random.default_rng(0)
    ours = total_miss(plan.split)
    for _ in range(20):
        assert ours < total_miss(rng.permutation(plan.split))
    side = plan.split[label_image]
    assert (np.bincount(side, minlength=3) > 0).all()


@pytest.mark.skipif(not (SHARED / "bccd_voc").is_dir(), reason="../shared/datasets is absent")
def test_voc_split_writes_subset_lists_that_load(tmp_path):
    """Pascal VOC's labels are not one file per image: each split is a subset list of the VOC folder, which the
    loader reads with VOC's labels; the report reads them too."""
    from yolo_data.build import build_loader
    from yolo_data.settings import Settings
    out = tmp_path / "out"
    assert cli_main(["split", str(SHARED / "bccd_voc"), "--val", "0.1", "--test", "0.1", "--group-by", "similar",
                     "--out", str(out)]) == 0
    subset = json.loads((out / "val.subset.json").read_text())
    assert subset["source"] == [str(SHARED / "bccd_voc")] and 30 <= len(subset["images"]) <= 42
    loader = build_loader(str(out / "data.yaml"), Settings.evaluation(batch_size=8, img_size=160, workers=0,
                                                                      split="val"))
    assert sorted(loader.dataset.im_files) == sorted(subset["images"])
    assert sum(len(loader.dataset.store.labels_of(i)) for i in range(len(loader.dataset))) > 0
    # BCCD's one near-identical pair across its published train and val stays on one side
    summary = json.loads((out / "split.json").read_text())
    assert "similar: 2 images are one picture with another" in summary["notes"]
    assert cli_main(["report", str(out / "data.yaml"), "--no-pictures", "--out", str(tmp_path / "r"),
                     "--fail-on", "leakage"]) == 0


def test_subset_list_names_what_it_cannot_find(tmp_path, small_dataset):
    from yolo_data.formats.subset import read_subset, write_subset
    from yolo_data.labels.split import load_split
    images = small_dataset.parent / "images" / "train"
    sub = tmp_path / "some.subset.json"
    write_subset(sub, [str(images)], [str(images / "a.jpg"), str(images / "b.jpg"), str(images / "gone.jpg")])
    labels = load_split(str(sub), workers=1)
    assert labels.store.im_file(0).endswith("a.jpg") and len(labels.store) == 2
    assert any("gone.jpg" in p.file and "not in" in p.reason for p in labels.problems)
    assert labels.cache_file == tmp_path / "some.subset.cache"
    bad = tmp_path / "bad.subset.json"
    bad.write_text('{"yolo_data_subset": 1, "source": [], "images": []}')
    with pytest.raises(ValueError, match="bad.subset.json: 'source' names no split entry"):
        read_subset(bad)
    bad.write_text("[1, 2")
    with pytest.raises(ValueError, match="bad.subset.json: not a subset list"):
        read_subset(bad)


def test_join_matches_union_find():
    from yolo_data.splits.groups import join
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 60)
        parts = [np.array([rng.randint(0, rng.randint(1, n)) for _ in range(n)]) for _ in range(rng.randint(1, 3))]
        parent = list(range(n))

        def find(x):
            while parent[x] != x:
                x = parent[x]
            return x
        for p in parts:
            first = {}
            for i, g in enumerate(p.tolist()):
                if g in first:
                    parent[find(i)] = find(first[g])
                else:
                    first[g] = i
        want = [find(i) for i in range(n)]
        got = join(*parts).tolist()
        assert all((got[i] == got[j]) == (want[i] == want[j]) for i in range(n) for j in range(n))


def test_equal_groups_fill_the_asked_image_shares():
    """Eight clips of four frames, odd clips holding two classes: the image shares come out as asked (16/8/8)
    whatever the seed, even where class shares would pull otherwise."""
    from yolo_data.splits.assign import assign_groups
    group = np.repeat(np.arange(8), 4)
    rows = [(i, c % 3) for i, c in enumerate(group.tolist())] + [(i, (c + 1) % 3) for i, c in
                                                                 enumerate(group.tolist()) if c % 2]
    label_image, label_class = (np.array(v) for v in zip(*rows))
    for seed in range(6):
        done = assign_groups(group, label_image, label_class, {"train": 0.5, "val": 0.25, "test": 0.25}, seed)
        assert np.bincount(done.split, minlength=3).tolist() == [16, 8, 8], seed
        assert all(len(set(done.split[group == g].tolist())) == 1 for g in range(8))


def test_frames_left_out_at_a_cut_link_nothing(tmp_path):
    """Frames left out after a cut take no part in any grouping: a frame that only they join to the next piece
    stays in its own piece."""
    from yolo_data.splits import group_images
    files = write_recordings(tmp_path, clips=1, frames=60)
    # frame 15 is left out (cut at 15, --frames 2); one pattern joins frames 14 and 15, another 15 and 17
    bridge = GroupBy(("sequence", r"regex:_00001[45]()\.jpg$", r"regex:_00001[57]()\.jpg$"), frames=2, chunk=15)
    grouping = group_images(files, bridge)
    kept = ~grouping.left_out
    assert grouping.left_out.sum() == 6 and len(np.unique(grouping.group[kept])) == 4
    piece = {f: int(re.search(r"_(\d+)\.jpg$", f).group(1)) // 15 for f in files}
    for g in np.unique(grouping.group[kept]):
        assert len({piece[f] for f, k, gg in zip(files, kept, grouping.group) if k and gg == g}) == 1


def test_labelme_folder_split_by_sequence(tmp_path):
    """A LabelMe folder (a JSON beside each image): the splits are subset lists of the folder, clips whole, and
    they load with LabelMe's labels."""
    from yolo_data.build import build_loader
    from yolo_data.settings import Settings
    folder = tmp_path / "clips"
    files = write_recordings(tmp_path, clips=5, frames=4, folder="clips")
    h, w = 96, 128
    for f in files:
        txt = Path(f).with_suffix(".txt")
        shapes = []
        for row in txt.read_text().split("\n"):
            if row:
                c, x, y, bw, bh = (float(v) for v in row.split())
                shapes.append({"label": "abc"[int(c)], "shape_type": "rectangle", "points": [
                    [(x - bw / 2) * w, (y - bh / 2) * h], [(x + bw / 2) * w, (y + bh / 2) * h]], "flags": {}})
        Path(f).with_suffix(".json").write_text(json.dumps({"version": "5.4.1", "shapes": shapes, "imagePath":
                                                            Path(f).name, "imageHeight": h, "imageWidth": w}))
        txt.unlink()
    out = tmp_path / "out"
    assert cli_main(["split", str(folder), "--val", "0.2", "--group-by", "sequence", "--out", str(out)]) == 0
    val = json.loads((out / "val.subset.json").read_text())
    assert val["source"] == [str(folder)] and len(val["images"]) == 4 and len({clip_of(f) for f in val["images"]}) == 1
    loader = build_loader(str(out / "data.yaml"), Settings.evaluation(batch_size=4, img_size=128, workers=0,
                                                                      split="val"))
    assert sorted(loader.dataset.im_files) == sorted(val["images"])
    assert all(len(loader.dataset.store.labels_of(i)) for i in range(4))
