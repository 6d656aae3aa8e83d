"""LabelMe JSON read in place: a folder of images with a LabelMe .json beside each."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from yolo_data import LabelError, Settings, YoloDataset, create_dataloader, formats
from yolo_data.formats.base import SourceOptions
from yolo_data.formats.labelme import LabelMeReader
from conftest import write_image


def labelme(path: Path, shapes, w: int, h: int, image_path=None, **extra) -> Path:
    """A LabelMe file as LabelMe 5 writes it (imageData left out)."""
    doc = {"version": "5.4.1", "flags": {}, "shapes": [
        {"label": label, "points": points, "group_id": None, "description": "", "shape_type": kind, "flags": {}}
        for label, kind, points in shapes],
        "imagePath": image_path or path.with_suffix(".jpg").name, "imageData": None,
        "imageHeight": h, "imageWidth": w, **extra}
    path.write_text(json.dumps(doc))
    return path


# two images: rectangles drawn in both corner orders, a polygon, a background without a JSON
CAT_RECT = [[10.0, 20.0], [50.0, 60.0]]
DOG_RECT = [[70.0, 30.0], [30.0, 10.0]]  # drawn from the bottom-right corner
DOG_POLY = [[10.0, 10.0], [60.0, 15.0], [40.0, 45.0]]


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "pets"
    write_image(root / "a.jpg", 80, 64)
    write_image(root / "b.jpg", 64, 48, seed=1)
    write_image(root / "c.jpg", 40, 40, seed=2)  # no JSON: a background
    labelme(root / "a.json", [("cat", "rectangle", CAT_RECT), ("dog", "rectangle", DOG_RECT)], 80, 64)
    labelme(root / "b.json", [("dog", "polygon", DOG_POLY)], 64, 48)
    return root


def expected_row(cls, points, w, h):
    """[class, x, y, w, h] normalised: the envelope of the points, worked out here independently."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
    return [cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h]


def test_a_labelme_folder_is_read_in_place_with_names_from_its_labels(folder):
    before = sorted(p.name for p in folder.iterdir())
    _, ds = create_dataloader(str(folder), 64, 4, 32, workers=0)
    assert ds.split_labels.kind == "labelme" and ds.names == ["cat", "dog"]  # sorted labels found
    assert [Path(f).name for f in ds.im_files] == ["a.jpg", "b.jpg", "c.jpg"]
    np.testing.assert_allclose(ds.labels[0], sorted([expected_row(0, CAT_RECT, 80, 64),
                                                     expected_row(1, DOG_RECT, 80, 64)]), atol=1e-6)
    np.testing.assert_allclose(ds.labels[1], [expected_row(1, DOG_POLY, 64, 48)], atol=1e-6)
    assert ds.labels[2].shape == (0, 5)  # the image without a JSON is a background
    np.testing.assert_allclose(ds.segments[1][0], np.array(DOG_POLY) / (64, 48), atol=1e-6)
    assert ds.segments[0] == []  # rectangles only: no polygons
    assert [Path(f).name for f in ds.label_files] == ["a.json", "b.json", "c.json"]
    assert ds.split_labels.counts["missing"] == 1 and ds.split_labels.counts["ok"] == 2
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written into the folder


def test_labelme_gives_the_batches_of_the_same_labels_written_as_yolo(folder, tmp_path):
    """The same boxes as YOLO .txt files (converted here by hand) give identical evaluation batches."""
    yolo = tmp_path / "yolo"
    for name, rows in (("a", [expected_row(0, CAT_RECT, 80, 64), expected_row(1, DOG_RECT, 80, 64)]),
                       ("b", [[1] + np.concatenate(np.array(DOG_POLY) / (64, 48)).tolist()]), ("c", None)):
        shutil.copy(folder / f"{name}.jpg", yolo / "images" / f"{name}.jpg") if (yolo / "images").exists() else \
            ((yolo / "images").mkdir(parents=True), shutil.copy(folder / f"{name}.jpg", yolo / "images"))
        if rows is not None:
            (yolo / "labels").mkdir(parents=True, exist_ok=True)
            (yolo / "labels" / f"{name}.txt").write_text("\n".join(" ".join(f"{v:.9f}" for v in r) for r in rows))
    a = iter(create_dataloader(str(folder), 64, 3, 32, workers=0)[0])
    b = iter(create_dataloader(str(yolo / "images"), 64, 3, 32, workers=0, names=["cat", "dog"])[0])
    (ia, ta, _, sa), (ib, tb, _, sb) = next(a), next(b)
    assert torch.equal(ia, ib) and sa == sb
    torch.testing.assert_close(ta, tb, atol=1e-6, rtol=0)
    assert len(ta) == 3


def test_a_yaml_split_naming_the_folder_maps_labels_onto_its_names(folder, tmp_path):
    data = tmp_path / "pets.yaml"
    data.write_text(yaml.safe_dump({"path": str(tmp_path), "train": "pets", "val": "pets", "names": ["dog", "bird"]}))
    ds = YoloDataset(str(data), Settings.evaluation(img_size=64))
    assert ds.names == ["dog", "bird"] and ds.split_labels.kind == "labelme"
    np.testing.assert_allclose(ds.labels[0], [expected_row(0, DOG_RECT, 80, 64)], atol=1e-6)  # cat left out
    assert any("1 shape labelled 'cat', not one of the 2 names; left out" in str(p) and p.file.endswith("a.json")
               for p in ds.split_labels.problems)


def test_a_folder_with_yolo_labels_stays_yolo(folder):
    (folder / "c.txt").write_text("0 0.5 0.5 0.2 0.2\n")  # YOLO's label of c.jpg, beside it
    (folder / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    assert formats.format_of(folder).name == "yolo"
    (folder / "a.txt").unlink()
    (folder / "c.txt").unlink()
    assert formats.format_of(folder).name == "labelme"
    assert formats.format_of(folder / "a.jpg").name == "yolo"  # an image alone: YOLO's rules
    images = folder.parent / "ds" / "images" / "train"  # YOLO's layout: labels/train beside images/train
    shutil.copytree(folder, images)
    assert formats.format_of(images).name == "labelme"
    (folder.parent / "ds" / "labels" / "train").mkdir(parents=True)
    assert formats.format_of(images).name == "yolo"


def read(tmp_path, shapes, w=80, h=64, names=("cat", "dog"), **extra):
    write_image(tmp_path / "x.jpg", w, h)
    labelme(tmp_path / "x.json", shapes, w, h, **extra)
    return LabelMeReader(tuple(names)).read(str(tmp_path / "x.json"), (h, w))  # the image's (h, w)


def test_shapes_that_cannot_be_boxes_are_named_problems(tmp_path):
    labels, segments, status, warnings = read(tmp_path, [
        ("cat", "circle", [[10, 10], [20, 20]]), ("cat", "point", [[5, 5]]), ("cat", "line", [[1, 1], [9, 9]]),
        ("cat", "rectangle", [[1, 1], [5, 5], [9, 9]]), ("dog", "polygon", [[1, 1], [9, 9]]),
        ("dog", "rectangle", [[5, 5], [5, 30]]), ("dog", "rectangle", [[1, "x"], [9, 9]]),
        ("cat", "rectangle", [[-8, 10], [40, 80]]), ("dog", None, [[10, 10], [20, 10], [20, 20]])])
    assert status == "ok" and len(labels) == 2
    np.testing.assert_allclose(labels, sorted([expected_row(0, [[0, 10], [40, 64]], 80, 64),
                                               expected_row(1, [[10, 10], [20, 20]], 80, 64)]), atol=1e-6)
    assert segments is not None and len(segments) == 2  # the polygon (no shape_type: LabelMe's default)
    text = "\n".join(warnings)
    for expected in ("1 'circle' shape left out", "1 'line' shape left out", "1 'point' shape left out",
                     "shape 4 (cat): a rectangle needs 2 points", "shape 5 (dog): a polygon needs 3 or more points",
                     "shape 6 (dog): rectangle has no area; left out", "shape 7 (dog): a rectangle needs 2 points",
                     "shape 8 (cat): points reach outside the 80x64 image; clipped to it"):
        assert expected in text, expected


def test_a_json_that_cannot_be_trusted_leaves_its_image_out_naming_the_file(folder):
    (folder / "b.json").write_text("{not json")
    labelme(folder / "a.json", [("cat", "rectangle", CAT_RECT)], 64, 80)  # rotated: another aspect
    write_image(folder / "d.png", 40, 40)
    (folder / "d.json").write_text(json.dumps({"imagePath": "d.png"}))  # no shapes
    (folder / "lost.json").write_text("{}")  # no image beside it
    labelme(folder / "c.json", [("cat", "rectangle", CAT_RECT)], 80, 80, image_path="..\\other\\photo.jpg")
    ds = YoloDataset(str(folder), Settings.evaluation(img_size=64))
    problems = {Path(p.file).name: p for p in ds.split_labels.problems}
    assert "not valid JSON" in problems["b.json"].reason and problems["b.json"].dropped
    assert "disagrees with the image's 80x64" in problems["a.json"].reason and problems["a.json"].dropped
    assert "expected an object with a 'shapes' list" in problems["d.json"].reason
    assert "no image of its name beside it" in problems["lost.json"].reason
    assert "imagePath '..\\\\other\\\\photo.jpg' names another file" in problems["c.json"].reason
    assert not problems["c.json"].dropped
    assert [Path(f).name for f in ds.im_files] == ["c.jpg"]
    assert ds.split_labels.counts["corrupt"] == 4  # a, b, d and the JSON without an image


def test_the_label_cache_covers_the_jsons(folder):
    s = Settings.evaluation(img_size=64)
    assert YoloDataset(str(folder), s).split_labels.built
    assert not YoloDataset(str(folder), s).split_labels.built  # read from the cache
    labelme(folder / "b.json", [("dog", "rectangle", [[10, 5], [50, 40]])], 64, 48)
    again = YoloDataset(str(folder), s)
    assert again.split_labels.built
    np.testing.assert_allclose(again.labels[1], [expected_row(1, [[10, 5], [50, 40]], 64, 48)], atol=1e-6)
    with pytest.raises(ValueError, match="fraction=0.5: .*names labelme annotations"):
        YoloDataset(str(folder), s.replace(fraction=0.5))


def test_training_batches_come_from_a_labelme_folder_with_workers(folder):
    loader, ds = create_dataloader(str(folder), 64, 3, 32, augment=True, workers=2, seed=1)
    imgs, targets, paths, _ = next(iter(loader))
    assert imgs.shape == (3, 3, 64, 64) and targets.shape[1] == 6 and len(paths) == 3
    assert set(targets[:, 1].tolist()) <= {0.0, 1.0}


def test_a_registered_format_is_asked_first(tmp_path, monkeypatch):
    """A format added at run time claims its entries before the built-in ones."""
    monkeypatch.setattr(formats, "FORMATS", list(formats.FORMATS))

    class Nothing:
        name, cuts_by_files = "nothing", False

        def claims(self, entry):
            return entry.suffix == ".nothing"

        def open(self, entries, options):
            raise LabelError(f"{entries[0]}: nothing to read")

    formats.register(Nothing())
    assert formats.format_of(tmp_path / "x.nothing").name == "nothing"
    assert formats.format_of(tmp_path / "x.json").name == "coco"
    with pytest.raises(LabelError, match="x.nothing: nothing to read"):
        formats.open_source(str(tmp_path / "x.nothing"), SourceOptions())
    with pytest.raises(ValueError, match=r"a split mixes label formats \(coco, nothing\)"):
        formats.open_source([str(tmp_path / "x.nothing"), str(tmp_path / "a.json")], SourceOptions())
    with pytest.raises(ValueError, match="no label format 'nope'"):
        formats.get("nope")
