"""NDJSON exports (formats/ndjson.py) read in place: for each task the batches equal those of the same
data as YOLO txt files on disk (evaluation bit for bit; training with one seed, 0 and 2 workers), a
dataset yaml naming the file picks its split, and what the records get wrong is named."""
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image

from yolo_data import create_dataloader
from yolo_data.formats import kind_of, ndjson
from yolo_data.integrations.ultralytics_args import ndjson_data
from yolo_data.storage import HttpBackend

SAMPLE = Path(__file__).resolve().parents[2] / "data"
SHARED = Path("/work/shared/datasets")
KEYS = {"detect": "boxes", "segment": "segments", "pose": "pose", "obb": "obb"}


def rows_of(label: Path):
    """A YOLO label file's rows as the numbers an export holds (class ids as ints)."""
    if not label.exists():
        return []
    return [[int(w) if i == 0 else float(w) for i, w in enumerate(line.split())]
            for line in label.read_text().splitlines() if line.split()]


def write_ndjson(out: Path, root: Path, splits: dict, task: str, names, extra=None, url=None) -> Path:
    """An export of the YOLO dataset at ``root`` ({split in the export: image folder name}): its first
    line (``path`` relative to ``out``'s folder, ``extra`` keys), then one record per image.
    ``url(split, file)``: the record's url instead of its place under ``path``."""
    head = {"type": "dataset", "task": task, "class_names": {str(i): n for i, n in enumerate(names)},
            "path": os.path.relpath(root, out.parent), **(extra or {})}
    lines = [json.dumps(head)]
    for split, folder in splits.items():
        for im in sorted((root / "images" / folder).iterdir()):
            w, h = Image.open(im).size
            rec = {"type": "image", "file": im.name, "width": w, "height": h, "split": split,
                   "annotations": {KEYS[task]: rows_of(root / "labels" / folder / (im.stem + ".txt"))}}
            if url is not None:
                rec["url"] = url(split, im.name)
            lines.append(json.dumps(rec))
    out.write_text("\n".join(lines) + "\n")
    return out


def batches(loader, epochs=1):
    return [(imgs.clone(), targets.clone(), list(paths)) for _ in range(epochs) for imgs, targets, paths, *_ in loader]


def assert_same(got, want):
    assert len(got) == len(want) > 0
    for (a, ta, pa), (b, tb, pb) in zip(got, want):
        assert torch.equal(a, b) and torch.equal(ta, tb) and pa == pb


@pytest.fixture
def sample(tmp_path):
    shutil.copytree(SAMPLE / "sample", tmp_path / "sample", ignore=shutil.ignore_patterns("*.cache"))
    shutil.copy(SAMPLE / "sample.yaml", tmp_path / "sample.yaml")
    names = ["circle", "rectangle", "triangle"]
    return write_ndjson(tmp_path / "sample.ndjson", tmp_path / "sample", {"train": "train", "val": "val"},
                        "detect", names), tmp_path / "sample.yaml"


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_those_of_the_same_data_as_yolo_txt_files(sample, workers):
    export, yaml = sample
    assert kind_of(str(export)) == "ndjson" and kind_of(f"{export}#val") == "ndjson"
    for augment in (False, True):
        kw = dict(augment=augment, shuffle=augment, seed=3, workers=workers, rect=not augment)
        got, dataset = create_dataloader(str(export), 64, 4, 32, **kw)
        want, _ = create_dataloader(str(yaml), 64, 4, 32, **kw)
        assert_same(batches(got, 2), batches(want, 2))
        assert dataset.split_labels.kind == "ndjson"
        assert Path(dataset.split_labels.cache_file).name == f"sample.{'train' if augment else 'val'}.yolo_data.cache"


def test_a_dataset_yaml_naming_the_file_reads_the_split_it_is_named_for(sample, tmp_path):
    export, yaml = sample
    (tmp_path / "export.yaml").write_text(f"train: {export.name}\nval: {export.name}\n"
                                          "names: [circle, rectangle, triangle]\n")
    for augment, n in ((False, 8), (True, 16)):
        got, dataset = create_dataloader(str(tmp_path / "export.yaml"), 64, 4, 32, augment=augment, workers=0)
        want, _ = create_dataloader(str(yaml), 64, 4, 32, augment=augment, workers=0)
        assert len(dataset) == n
        assert_same(batches(got), batches(want))


def test_the_fingerprint_follows_the_files_content(sample):
    export, _ = sample
    _, first = create_dataloader(str(export), 64, 4, 32, workers=0)
    _, again = create_dataloader(str(export), 64, 4, 32, workers=0)
    assert first.split_labels.built and not again.split_labels.built
    lines = export.read_text().splitlines()
    rec = json.loads(lines[-1])
    rec["annotations"]["boxes"] = rec["annotations"]["boxes"][:1]
    export.write_text("\n".join(lines[:-1] + [json.dumps(rec)]) + "\n")
    _, changed = create_dataloader(str(export), 64, 4, 32, workers=0)
    assert changed.split_labels.built
    assert changed.split_labels.counts["boxes"] == first.split_labels.counts["boxes"] - (len(json.loads(lines[-1])["annotations"]["boxes"]) - 1)


def test_records_it_cannot_read_are_named_and_left_out(tmp_path):
    root = tmp_path / "d"
    shutil.copytree(SAMPLE / "sample", root, ignore=shutil.ignore_patterns("*.cache"))
    export = write_ndjson(tmp_path / "d.ndjson", root, {"train": "train", "val": "val"}, "detect", ["a", "b", "c"])
    for k in (1, 2):
        shutil.copy(root / "images" / "train" / "train_001.jpg", root / "images" / "val" / f"extra{k}.jpg")
    lines = export.read_text().splitlines()
    bad = [dict(json.loads(lines[1]), file="../../etc/passwd", split="val"),
           dict(json.loads(lines[2]), file="extra1.jpg", split="val", annotations={"boxes": [[0, 0.5, "x", 0.1, 0.1]]}),
           dict(json.loads(lines[2]), file="extra2.jpg", split="val", annotations={"boxes": [[7, 0.5, 0.5, 0.1]]}),
           {"type": "image", "split": "val"}, dict(json.loads(lines[-1]))]
    export.write_text("\n".join(lines + [json.dumps(b) for b in bad]) + "\n")
    _, dataset = create_dataloader(str(export), 64, 4, 32, workers=0)
    problems = "\n".join(str(p) for p in dataset.split_labels.problems)
    for why in ("outside the dataset's folder", "no 'url' and no 'file'", "row 1 is not a list of numbers", "4 columns",
                f"line {len(lines) + 5}: {root}/images/val/val_007.jpg is also on line {len(lines)}"):
        assert why in problems
    assert len(dataset) == 8  # the val images once each: every bad record left out
    names = ndjson.read_ndjson(str(export)).names
    assert names == ["a", "b", "c", "class3", "class4", "class5", "class6", "class7"]  # as Ultralytics names them


def test_an_export_without_val_records_gives_a_tenth_of_train_to_val(tmp_path):
    root = tmp_path / "d"
    shutil.copytree(SAMPLE / "sample", root, ignore=shutil.ignore_patterns("*.cache"))
    export = write_ndjson(tmp_path / "d.ndjson", root, {"train": "train"}, "detect", ["a", "b", "c"])
    _, val = create_dataloader(str(export), 64, 4, 32, workers=0)
    _, train = create_dataloader(str(export), 64, 4, 32, augment=True, workers=0)
    assert (len(train), len(val)) == (15, 1)
    assert not set(train.im_files) & set(val.im_files)


def test_an_http_url_that_no_export_lists_is_never_fetched(tmp_path):
    backend = HttpBackend()
    with pytest.raises(PermissionError, match="not fetched") as e:
        backend.read("https://127.0.0.1:9/a.jpg?X-Amz-Signature=topsecret")
    assert "topsecret" not in str(e.value)
    (tmp_path / "list.txt").write_text("https://127.0.0.1:9/images/a.jpg\n")
    (tmp_path / "d.yaml").write_text("train: list.txt\nval: list.txt\nnames: [a]\n")
    with pytest.raises(RuntimeError, match="no usable images.*not fetched"):
        create_dataloader(str(tmp_path / "d.yaml"), 64, 4, 32, workers=0)


def _linked(tmp_path: Path, name: str) -> Path:
    """The shared dataset ``name`` with split folders train and val (links to its train2017 and
    val2017), so an export and its YOLO files name the same image paths; caches go into tmp_path."""
    root = tmp_path / name
    for kind in ("images", "labels"):
        (root / kind).mkdir(parents=True)
        for split, folder in (("train", "train2017"), ("val", "val2017")):
            (root / kind / split).symlink_to(SHARED / name / kind / folder)
    return root


TASKS = [("coco128", "detect", None), ("coco128-seg", "segment", None), ("tiger-pose", "pose", [12, 2]),
         ("pen-obb", "obb", None)]


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared datasets are not here")
@pytest.mark.parametrize("name,task,kpt_shape", TASKS)
def test_every_task_gives_the_batches_of_its_yolo_txt_files(tmp_path, name, task, kpt_shape):
    import yaml as pyyaml

    spec = pyyaml.safe_load(next((SHARED / name).glob("*.yaml")).read_text())
    names = [spec["names"][i] for i in sorted(spec["names"])]
    root = _linked(tmp_path, name)
    extra = {"kpt_shape": kpt_shape, "flip_idx": spec["flip_idx"]} if kpt_shape else None
    export = write_ndjson(tmp_path / f"{name}.ndjson", root, {"train": "train", "val": "val"}, task, names, extra)
    kpt = f"kpt_shape: {kpt_shape}\nflip_idx: {spec['flip_idx']}\n" if kpt_shape else ""
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/val\nnames: {names}\n{kpt}")
    for augment in (False, True):
        kw = dict(augment=augment, shuffle=augment, seed=5, workers=0, rect=not augment, task=task)
        got, dataset = create_dataloader(str(export), 96, 8, 32, **kw)
        want, _ = create_dataloader(str(root / "data.yaml"), 96, 8, 32, **kw)
        assert_same(batches(got), batches(want))
        assert dataset.names == names


def test_the_ultralytics_trainer_gets_each_split_of_the_export_to_read_in_place(sample):
    """The data dict the Ultralytics plug-in's trainer and validator work from (Ultralytics itself would
    download every image into a converted copy); a split named in the path wins over the preset's."""
    export, _ = sample
    data = ndjson_data(str(export))
    assert data["train"] == f"{export}#train" and data["val"] == f"{export}#val"
    assert data["names"] == {0: "circle", 1: "rectangle", 2: "triangle"} and data["nc"] == 3 and data["channels"] == 3
    assert ndjson_data(str(export), single_cls=True)["names"] == {0: "item"}
    _, val = create_dataloader(data["val"], 64, 4, 32, augment=True, workers=0)
    assert len(val) == 8 and all("/images/val/" in f for f in val.im_files)


def test_the_dataset_report_of_an_export_has_its_splits(sample, tmp_path):
    """``yolo-data report export.ndjson``: each split the records name, as the yaml's splits are."""
    from yolo_data.report.compose import ReportOptions, make_report
    export, data_yaml = sample
    got = make_report(str(export), ReportOptions(workers=1, cache_dir=tmp_path / "c"))
    want = make_report(str(data_yaml), ReportOptions(workers=1, cache_dir=tmp_path / "c"))
    splits, files = got.figures["splits"], want.figures["splits"]
    assert list(splits) == ["train", "val"] == list(files)
    for name in splits:
        assert splits[name]["images"] == files[name]["images"] and splits[name]["classes"] == files[name]["classes"]
    assert got.figures["names"] == ["circle", "rectangle", "triangle"]
