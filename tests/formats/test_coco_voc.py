"""COCO JSON and Pascal VOC read in place: the boxes match the YOLO conversion of the same photos, the
quirks of real exports are handled, every problem is named, the cache follows the annotation files."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import copy_shared, run_all, tree_digest, write_image
from procs import free_port
from yolo_data import LoadImagesAndLabels, create_dataloader
from yolo_data.cli import build_cache_main
from yolo_data.labels.split import load_split

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE.parent / "benchmarks" / "generators"))
from coco_from_voc import write_coco  # noqa: E402

BCCD_NAMES = ["WBC", "RBC", "Platelets"]


def by_name(ds):
    """{file name: (n, 5) labels sorted by row} of a dataset."""
    return {os.path.basename(f): l[np.lexsort(l.T[::-1])] for f, l in zip(ds.im_files, ds.labels)}


def reordered(labels_by_name, names, to_names):
    """The same labels with class ids moved from ``names`` to ``to_names``."""
    perm = np.array([to_names.index(n) for n in names], dtype=np.float32)
    out = {}
    for k, l in labels_by_name.items():
        m = l.copy()
        m[:, 0] = perm[m[:, 0].astype(int)]
        out[k] = m[np.lexsort(m.T[::-1])]
    return out


# -- Pascal VOC ---------------------------------------------------------------------------------------
@pytest.fixture
def bccd_both(tmp_path):
    return copy_shared("bccd_voc", tmp_path), copy_shared("bccd", tmp_path)


def test_voc_list_matches_the_yolo_conversion_box_for_box(bccd_both, tmp_path):
    voc, yolo = bccd_both
    before = tree_digest(voc)
    yaml = tmp_path / "voc.yaml"
    yaml.write_text(f"path: {voc}\ntrain: ImageSets/Main/train.txt\nval: [ImageSets/Main/val.txt, ImageSets/Main/test.txt]\n"
                    f"names: {BCCD_NAMES}\n")
    for split, folder in (("train", "train2017"), ("val", "val2017")):
        ds = LoadImagesAndLabels(str(yaml), 320, split=split)
        ref = LoadImagesAndLabels(str(yolo / "images" / folder), 320)
        assert ds.names == BCCD_NAMES and ds.split_labels.kind == "voc"
        ours, theirs = by_name(ds), by_name(ref)
        if split == "val":  # the conversion put images listed nowhere into val2017 too
            theirs = {k: v for k, v in theirs.items() if k in ours}
        assert sorted(ours) == sorted(theirs) and len(ours) == (205 if split == "train" else 159)
        for k in theirs:  # the conversion wrote 6 decimals
            assert ours[k].shape == theirs[k].shape and np.allclose(ours[k], theirs[k], atol=1e-6), k
    # the degenerate VOC box the conversion dropped is a named warning here
    problems = [str(p) for p in ds.split_labels.problems]
    assert any("BloodImage_00338.xml: object 13 (RBC)" in p and "no area" in p for p in problems), problems
    assert ds.label_files[0] == str(voc / "Annotations" / (Path(ds.im_files[0]).stem + ".xml"))
    # the VOC folder is left as it was; the caches sit beside the lists (a split of two lists: named after
    # the first, with a hash of both)
    after = tree_digest(voc)
    assert {k: v for k, v in after.items() if not k.endswith(".cache")} == before
    new = sorted(k for k in after if k not in before)
    assert len(new) == 2 and new[0] == "ImageSets/Main/train.yolo_data.cache", new
    assert new[1].startswith("ImageSets/Main/val-") and new[1].endswith(".yolo_data.cache")


def test_voc_folder_without_names_gives_the_sorted_names_found(bccd_both, tmp_path):
    voc, _ = bccd_both
    ds = LoadImagesAndLabels(str(voc), 320)
    assert ds.names == ["Platelets", "RBC", "WBC"] and len(ds) == 364
    assert ds.split_labels.counts["boxes"] == 4886  # the conversion's count: 4888 minus the 2 degenerate
    again = LoadImagesAndLabels(str(voc), 320)  # names come from the cache, without reading the XML files
    assert not again.split_labels.built and again.names == ds.names


def voc_dir(root: Path, objects_by_id, sizes=None, image_sizes=None):
    """A small VOC folder; objects: list of (name, difficult, (xmin, ymin, xmax, ymax))."""
    for k, (i, objects) in enumerate(objects_by_id.items()):
        w, h = (image_sizes or {}).get(i, (64, 48))
        write_image(root / "JPEGImages" / f"{i}.jpg", w, h, seed=k)
        if objects is None:
            continue
        sw, sh = (sizes or {}).get(i, (w, h))
        objs = "".join(f"<object><name>{n}</name><difficult>{d}</difficult><bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin>"
                       f"<xmax>{b[2]}</xmax><ymax>{b[3]}</ymax></bndbox></object>" for n, d, b in objects)
        (root / "Annotations").mkdir(parents=True, exist_ok=True)
        size = "" if sw is None else f"<size><width>{sw}</width><height>{sh}</height><depth>3</depth></size>"
        (root / "Annotations" / f"{i}.xml").write_text(f"<annotation><filename>{i}.jpg</filename>{size}{objs}</annotation>")
    (root / "Annotations").mkdir(parents=True, exist_ok=True)
    return root


def test_voc_problems_are_named_and_difficult_objects_optional(tmp_path):
    root = voc_dir(tmp_path / "voc", {
        "a": [("cat", 0, (1, 1, 32, 24)), ("dog", 1, (10, 10, 20, 20))],
        "b": [("cat", 0, (10, 10, 70, 20)), ("bird", 0, (5, 5, 9, 9))],  # reaches past x=64; a name not in names
        "c": [("dog", 0, (10, 10, 20, 20))],  # stated 128x96: the same aspect
        "d": [("dog", 0, (10, 10, 20, 20))],  # stated 48x64: another aspect
        "e": [("cat", 0, (10, 10, 10, 20))],  # no area
        "f": None,  # no XML: a background
        "g": [("dog", 0, (4, 4, 8, 8))],  # no <size>
    }, sizes={"c": (128, 96), "d": (48, 64), "g": (None, None)})
    (root / "Annotations" / "h.xml").write_text("<annotation><object>")  # broken XML
    write_image(root / "JPEGImages" / "h.jpg", 64, 48)
    bomb = '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xx">]><annotation>&x;</annotation>'
    (root / "Annotations" / "i.xml").write_text(bomb)
    write_image(root / "JPEGImages" / "i.jpg", 64, 48)
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "ImageSets" / "Main" / "all.txt").write_text("\n".join("abcdefghi") + "\n")
    s = load_split(str(root / "ImageSets" / "Main" / "all.txt"), names=["cat", "dog"])
    probs = {Path(p.file).stem: (p.reason, p.dropped) for p in s.problems}
    labels = {Path(s.store.im_file(i)).stem: s.store.labels_of(i) for i in range(len(s.store))}
    assert sorted(labels) == ["a", "b", "c", "e", "f", "g"]  # d, h and i left out
    assert len(labels["a"]) == 1  # the difficult dog is left out by default
    np.testing.assert_allclose(labels["a"][0], [0, (16.5 - 1) / 64, (12.5 - 1) / 48, 31 / 64, 23 / 48], atol=1e-6)
    assert "clipped" in probs["b"][0] or "bird" in probs["b"][0]
    reasons_b = [p.reason for p in s.problems if Path(p.file).stem == "b"]
    assert any("clipped" in r for r in reasons_b) and any("'bird', not one of the 2 names" in r for r in reasons_b)
    np.testing.assert_allclose(labels["b"][0, [1, 3]], [(10 + 64) / 2 / 64 - 1 / 64, 54 / 64], atol=1e-6)
    assert "(same aspect)" in probs["c"][0] and not probs["c"][1]
    np.testing.assert_allclose(labels["c"][0, 3:], [10 / 128, 10 / 96], atol=1e-6)  # normalised by the XML's size
    assert "another aspect" in probs["d"][0] and probs["d"][1]
    assert "no area" in probs["e"][0] and len(labels["e"]) == 0
    assert len(labels["f"]) == 0 and s.counts["missing"] == 1
    assert "no usable <size>" in probs["g"][0]
    assert "not valid XML" in probs["h"][0] and probs["h"][1]
    assert "DOCTYPE" in probs["i"][0] and probs["i"][1]
    kept = load_split(str(root / "ImageSets" / "Main" / "all.txt"), names=["cat", "dog"], keep_difficult=True)
    assert kept.built  # another setting: another fingerprint, so a rescan
    a = next(i for i in range(len(kept.store)) if kept.store.im_file(i).endswith("a.jpg"))
    assert len(kept.store.labels_of(a)) == 2


def test_voc_cache_follows_the_xml_files(tmp_path):
    root = voc_dir(tmp_path / "voc", {"a": [("cat", 0, (1, 1, 32, 24))], "b": [("dog", 0, (1, 1, 8, 8))]})
    first = load_split(str(root))
    assert first.built and first.names == ["cat", "dog"]
    assert not load_split(str(root)).built
    xml = root / "Annotations" / "b.xml"
    xml.write_text(xml.read_text().replace("dog", "cow"))
    os.utime(xml, ns=(1, 1))  # a new mtime, whatever the clock's resolution
    again = load_split(str(root))
    assert again.built and again.names == ["cat", "cow"]


# -- COCO JSON ------------------------------------------------------------------------------------------
def test_coco_export_matches_the_voc_reading(bccd_both, tmp_path):
    voc, _ = bccd_both
    ids = [x for x in (voc / "ImageSets" / "Main" / "train.txt").read_text().split()]
    json_file = write_coco(voc, tmp_path / "export", ids)
    before = tree_digest(tmp_path / "export")
    coco = LoadImagesAndLabels(str(json_file), 320)
    ref = LoadImagesAndLabels(str(voc / "ImageSets" / "Main" / "train.txt"), 320)
    assert coco.names == BCCD_NAMES  # ascending ids 1, 2, 5; the placeholder 'cells' (id 0) is no class
    ours, theirs = by_name(coco), reordered(by_name(ref), ref.names, coco.names)
    assert sorted(ours) == sorted(theirs)
    differ = sorted(k for k in ours if ours[k].shape != theirs[k].shape or not np.array_equal(ours[k], theirs[k]))
    # the generator's quirks, and nothing else: BloodImage_00001 has one extra box reaching 0.5 px past the
    # edge (clipped), BloodImage_00003 has no annotations (a background)
    assert differ == ["BloodImage_00001.jpg", "BloodImage_00003.jpg"]
    assert len(ours["BloodImage_00001.jpg"]) == len(theirs["BloodImage_00001.jpg"]) + 1
    assert ours["BloodImage_00001.jpg"][:, 1:].max() <= 1 and len(ours["BloodImage_00003.jpg"]) == 0
    reasons = [p.reason for p in coco.split_labels.problems]
    assert any("image id 99999, which is not in 'images'" in r for r in reasons)
    assert any("clipped" in r for r in reasons) and any("has no area" in r for r in reasons)
    # polygons become segments, normalised like the boxes
    i = coco.im_files.index(str(tmp_path / "export" / "images" / "cells" / "BloodImage_00004.jpg"))
    segs, labels = coco.segments[i], coco.labels[i]
    assert len(segs) == len(labels) and all(len(s) == 8 for s in segs)
    env = np.array([[s[:, 0].min(), s[:, 1].min(), s[:, 0].max(), s[:, 1].max()] for s in segs])
    np.testing.assert_allclose((env[:, :2] + env[:, 2:]) / 2, labels[:, 1:3], atol=2e-4)
    assert tree_digest(tmp_path / "export") == {**before, "_annotations.coco.yolo_data.cache":
                                                tree_digest(tmp_path / "export")["_annotations.coco.yolo_data.cache"]}
    assert coco.label_files[0] == str(json_file)


def coco_json(path: Path, images, annotations, categories):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def test_coco_quirks_layouts_and_named_problems(tmp_path):
    # COCO's own layout: annotations/instances_val2017.json, photos in val2017/ beside annotations/
    root = tmp_path / "coco"
    for k, name in enumerate(["1.jpg", "2.jpg", "3.jpg", "sub/4.jpg"]):
        write_image(root / "val2017" / name, 80, 60, seed=k)
    images = [{"id": 0, "file_name": "1.jpg", "width": 80, "height": 60},
              {"id": 1, "file_name": "2.jpg", "width": 80, "height": 60},
              {"id": 2, "file_name": "3.jpg"},  # no size: the image's is used
              {"id": 3, "file_name": "sub/4.jpg", "width": 80, "height": 60},
              {"id": 4, "file_name": "gone.jpg", "width": 80, "height": 60}]
    anns = [{"id": 1, "image_id": 0, "category_id": 0, "bbox": [8, 6, 16, 12]},
            {"id": 2, "image_id": 0, "category_id": 7, "bbox": [0, 0, 40, 30], "iscrowd": 0,
             "segmentation": {"counts": [1, 2], "size": [60, 80]}},  # RLE: a box only
            {"id": 3, "image_id": 0, "category_id": 7, "bbox": [0, 0, 80, 60], "iscrowd": 1},  # crowd: left out
            {"id": 4, "image_id": 1, "category_id": 7, "bbox": [70, 50, 0, 5]},  # no area
            {"id": 5, "image_id": 1, "category_id": 3, "bbox": [1, 1, 5, 5]},  # category 3 does not exist
            {"id": 6, "image_id": 3, "category_id": 7, "bbox": [-0.4, 2, 10, 10.6]},  # a little outside
            {"id": 7, "image_id": 2, "category_id": 0, "bbox": [40, 30, 8, 6]},
            {"id": 8, "image_id": 42, "category_id": 0, "bbox": [1, 1, 2, 2]}]  # an image not listed
    cats = [{"id": 7, "name": "truck"}, {"id": 0, "name": "person"}, {"id": 9, "name": "kite"}]  # 0-based, gaps
    js = coco_json(root / "annotations" / "instances_val2017.json", images, anns, cats)
    s = load_split(str(js))
    assert s.names == ["person", "truck", "kite"]  # ascending ids 0, 7, 9; an unused real class stays
    got = {s.store.im_file(i): s.store.labels_of(i) for i in range(len(s.store))}
    assert sorted(got) == [str(root / "val2017" / f) for f in ["1.jpg", "2.jpg", "3.jpg", "sub/4.jpg"]]
    np.testing.assert_allclose(got[str(root / "val2017" / "1.jpg")],
                               [[0, 16 / 80, 12 / 60, 16 / 80, 12 / 60], [1, 20 / 80, 15 / 60, 40 / 80, 30 / 60]], atol=1e-7)
    assert len(got[str(root / "val2017" / "2.jpg")]) == 0
    np.testing.assert_allclose(got[str(root / "val2017" / "3.jpg")], [[0, 44 / 80, 33 / 60, 8 / 80, 6 / 60]], atol=1e-7)
    np.testing.assert_allclose(got[str(root / "val2017" / "sub/4.jpg")], [[1, 4.8 / 80, 7.3 / 60, 9.6 / 80, 10.6 / 60]],
                               atol=1e-6)
    text = "\n".join(str(p) for p in s.problems)
    for expected in ("RLE masks", "annotation 4: bbox", "has no area", "category 3, which is not a class",
                     "clipped", "image id 42, which is not in 'images'", "no width/height in the JSON",
                     "left out: " + str(root / "val2017" / "gone.jpg") + ": cannot read image header"):
        assert expected in text, (expected, text)
    assert s.counts["corrupt"] == 1 and s.counts["backgrounds"] == 1


def test_coco_placeholder_and_images_folder_beside_the_json(tmp_path):
    # Roboflow: _annotations.coco.json with the photos in images/ beside it; category 0 a placeholder
    root = tmp_path / "rf" / "train"
    write_image(root / "images" / "x.jpg", 64, 64)
    cats = [{"id": 0, "name": "pets", "supercategory": "none"}, {"id": 1, "name": "cat", "supercategory": "pets"},
            {"id": 2, "name": "dog", "supercategory": "pets"}]
    js = coco_json(root / "_annotations.coco.json", [{"id": 5, "file_name": "x.jpg", "width": 64, "height": 64}],
                   [{"id": 1, "image_id": 5, "category_id": 2, "bbox": [0, 0, 32, 32]}], cats)
    s = load_split(str(js))
    assert s.names == ["cat", "dog"] and s.store.im_file(0) == str(root / "images" / "x.jpg")
    assert s.store.labels_of(0)[0, 0] == 1
    # a yaml's names map categories by name, in the yaml's order
    yaml = tmp_path / "rf" / "data.yaml"
    yaml.write_text("path: .\ntrain: train/_annotations.coco.json\nnames: [dog, cat]\n")
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    assert ds.names == ["dog", "cat"] and ds.labels[0][0, 0] == 0
    # a category used by annotations is a class even when it is a supercategory's name
    js2 = coco_json(tmp_path / "rf2" / "a.json", [{"id": 5, "file_name": "x.jpg", "width": 64, "height": 64}],
                    [{"id": 1, "image_id": 5, "category_id": 0, "bbox": [0, 0, 32, 32]}], cats)
    write_image(tmp_path / "rf2" / "x.jpg", 64, 64)
    assert load_split(str(js2)).names == ["pets", "cat", "dog"]


def test_coco_cache_follows_the_json_and_bad_files_are_named(tmp_path):
    root = tmp_path / "c"
    write_image(root / "x.jpg", 64, 64)
    js = coco_json(root / "a.json", [{"id": 1, "file_name": "x.jpg", "width": 64, "height": 64}],
                   [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 32, 32]}], [{"id": 1, "name": "a"}])
    assert load_split(str(js)).built
    assert not load_split(str(js)).built
    data = json.loads(js.read_text())
    data["annotations"][0]["bbox"] = [0, 0, 16, 16]
    js.write_text(json.dumps(data))
    os.utime(js, ns=(1, 1))
    again = load_split(str(js))
    assert again.built and np.allclose(again.store.labels_of(0)[0, 3:], 0.25)
    bad = root / "bad.json"
    bad.write_text('{"images": [1, 2')
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON \(line 1"):
        load_split(str(bad))
    bad.write_text('{"annotations": []}')
    with pytest.raises(ValueError, match=r"bad\.json: not a COCO annotation file"):
        load_split(str(bad))
    with pytest.raises(FileNotFoundError, match="nothere.json does not exist"):
        load_split(str(root / "nothere.json"))
    with pytest.raises(ValueError, match="mixes label formats"):
        load_split([str(js), str(root)])


def test_coco_and_voc_train_through_the_loader_and_build_cache(bccd_both, tmp_path, capsys):
    voc, _ = bccd_both
    json_file = write_coco(voc, tmp_path / "export", sorted(p.stem for p in (voc / "Annotations").glob("*.xml"))[:24])
    loader, ds = create_dataloader(str(json_file), 128, 8, 32, augment=True, workers=2, shuffle=True, seed=3)
    imgs, targets, paths, _ = next(iter(loader))
    assert imgs.shape == (8, 3, 128, 128) and len(targets) and targets[:, 1].max() < 3
    loader, ds = create_dataloader(str(voc / "ImageSets" / "Main" / "val.txt"), 128, 4, 32, workers=0, rect=True)
    assert next(iter(loader))[0].shape[0] == 4 and ds.names == ["Platelets", "RBC", "WBC"]
    assert build_cache_main([str(voc), "--keep-difficult"]) == 0
    out = capsys.readouterr().out
    assert "364" in out and "4886" in out and "(built)" in out


def test_coco_names_reach_every_rank_under_torchrun(tmp_path):
    root = tmp_path / "c"
    for k in range(6):
        write_image(root / f"{k}.jpg", 64, 48, seed=k)
    js = coco_json(root / "a.json", [{"id": k, "file_name": f"{k}.jpg", "width": 64, "height": 48} for k in range(6)],
                   [{"id": k, "image_id": k, "category_id": 3 + k % 2, "bbox": [1, 1, 20, 20]} for k in range(6)],
                   [{"id": 4, "name": "b"}, {"id": 3, "name": "a"}])
    out = tmp_path / "out"
    out.mkdir()
    r = run_all([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
                 str(HERE / "ddp_build_labels.py"), "--data", str(js), "--out", str(out)],
                capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    res = [json.loads((out / f"{k}.json").read_text()) for k in range(2)]
    assert [x["built"] for x in res] == [True, False]  # rank 1 read rank 0's cache, never the JSON
    assert [x["names"] for x in res] == [["a", "b"]] * 2 and {x["labels"] for x in res} == {res[0]["labels"]}
    assert [x["label_file"] for x in res] == [str(js)] * 2


def test_a_warm_start_does_not_read_the_json(tmp_path, monkeypatch):
    from yolo_data.formats import coco
    root = tmp_path / "c"
    for k in range(3):
        write_image(root / f"{k}.jpg", 64, 48, seed=k)
    js = coco_json(root / "a.json", [{"id": k, "file_name": f"{k}.jpg", "width": 64, "height": 48} for k in range(3)]
                   + [{"id": 9, "file_name": "gone.jpg", "width": 64, "height": 48}],
                   [{"id": k, "image_id": k, "category_id": 1, "bbox": [1, 1, 20, 20]} for k in range(3)],
                   [{"id": 1, "name": "a"}])
    first = load_split(str(js))
    assert first.built and len(first.store) == 3 and first.counts["corrupt"] == 1
    reads = []
    real = coco.read_coco
    monkeypatch.setattr(coco, "read_coco", lambda *a, **k: reads.append(a) or real(*a, **k))
    again = load_split(str(js))
    assert not again.built and reads == [] and again.names == ["a"] and again.label_file_of("x") == str(js)
    assert np.array_equal(again.store.labels, first.store.labels) and again.counts == first.counts
    # an image that changed (the missing one appears) or another JSON: the JSON is read and the split rescanned
    write_image(root / "gone.jpg", 64, 48, seed=7)
    third = load_split(str(js))
    assert third.built and len(reads) == 1 and len(third.store) == 4
    assert not load_split(str(js)).built and len(reads) == 1
    os.utime(js, ns=(1, 1))
    assert load_split(str(js)).built and len(reads) == 2
    # other names: the cache's settings differ, so the shortcut does not apply
    assert load_split(str(js), names=["a"]).built and len(reads) == 3


def test_coco_and_voc_datasets_reach_spawned_workers(bccd_both, tmp_path):
    """A dataset is pickled into spawned DataLoader workers (macOS, Windows, multiprocessing_context)."""
    import pickle
    voc, _ = bccd_both
    json_file = write_coco(voc, tmp_path / "export", ["BloodImage_00000", "BloodImage_00001"])
    for path in (json_file, voc / "ImageSets" / "Main" / "val.txt"):
        ds = LoadImagesAndLabels(str(path), 64)
        clone = pickle.loads(pickle.dumps(ds))
        assert clone.label_files[0] == ds.label_files[0] and clone.names == ds.names


def test_malformed_coco_entries_are_named_not_fatal(tmp_path):
    root = tmp_path / "c"
    write_image(root / "x.jpg", 64, 64)
    write_image(root / "y.jpg", 64, 64, seed=1)
    images = [{"id": 1, "file_name": "x.jpg", "width": 64, "height": 64},
              {"id": 1, "file_name": "y.jpg", "width": 64, "height": 64},  # the same id again
              {"id": 2, "file_name": "x.jpg", "width": 64, "height": 64},  # the same file under another id
              {"file_name": "y.jpg"}, {"id": [3], "file_name": "y.jpg"}, "not an image"]
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 8, 8]},
            {"id": 2, "image_id": 2, "category_id": 1, "bbox": [0, 0, 16, 16]},
            {"id": 3, "image_id": [1], "category_id": 1, "bbox": [0, 0, 8, 8]},
            {"id": 4, "image_id": 1, "category_id": 1, "bbox": [0, "a", 8, 8]},
            {"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 8, 8], "segmentation": [[0, 0, "a", 1, 2, 2]]},
            "not an annotation"]
    s = load_split(str(coco_json(root / "a.json", images, anns, [{"id": 1, "name": "a"}])))
    text = "\n".join(str(p) for p in s.problems)
    for expected in ("image id 1 is listed twice (x.jpg and y.jpg); the second is left out",
                     "image ids 1 and 2 are both x.jpg; the annotations of id 2 are left out",
                     "images[3] has no 'id' (a number or text) or 'file_name'",
                     "images[4] has no 'id'", "images[5] has no 'id'",
                     "annotation of image id [1], which is not in 'images'",
                     "annotation 4: bbox [0, 'a', 8, 8] is not 4 numbers; left out",
                     "annotation 5: segmentation holds something that is not a number; its box is used",
                     "annotations[5] is not an object"):
        assert expected in text, (expected, text)
    assert len(s.store) == 1 and len(s.store.labels_of(0)) == 2 and s.counts["corrupt"] == 4


def test_malformed_voc_files_are_named_not_fatal(tmp_path):
    root = voc_dir(tmp_path / "voc", {"ok": [("cat", 0, (1, 1, 32, 24))]})
    bad = {"diff": "<annotation><object><name>cat</name><difficult>2</difficult></object></annotation>",
           "tag": "<foo></foo>",
           "nobox": "<annotation><object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin><ymax>9</ymax>"
                    "</bndbox></object></annotation>",
           "nan": "<annotation><object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>nan</xmax>"
                  "<ymax>9</ymax></bndbox></object></annotation>"}
    for stem, text in bad.items():
        write_image(root / "JPEGImages" / f"{stem}.jpg", 64, 48)
        (root / "Annotations" / f"{stem}.xml").write_text(text)
    write_image(root / "JPEGImages" / "dir.jpg", 64, 48)
    (root / "Annotations" / "dir.xml").mkdir()  # a folder where the XML should be
    s = load_split(str(root))
    assert s.names == ["cat"]  # names_in skipped what it could not read
    probs = {Path(p.file).stem: p.reason for p in s.problems if p.dropped}
    assert probs == {"diff": "object 1 (cat): difficult is '2', not 0 or 1",
                     "tag": "root element <foo>, not <annotation>",
                     "nobox": "object 1 (cat): bndbox/xmax is missing, not a number",
                     "nan": "object 1 (cat): bndbox/xmax is 'nan'",
                     "dir": "annotation is not a regular file (a folder)"}, probs
    assert len(s.store) == 1


def test_a_voc_list_line_or_coco_file_name_no_file_can_have_is_one_named_problem(tmp_path):
    root = voc_dir(tmp_path / "voc", {i: [("cat", 0, (1, 1, 32, 24))] for i in "abc"})
    lst = root / "ImageSets" / "Main" / "train.txt"
    lst.parent.mkdir(parents=True)
    lst.write_bytes(b"a\nb\x00\nc  1\n")
    before = tree_digest(root)
    s = load_split(str(lst), names=["cat"])
    assert [Path(s.store.im_file(i)).stem for i in range(len(s.store))] == ["a", "c"]
    assert [(p.file, p.reason, p.dropped) for p in s.problems] == [(str(lst), "line 2 contains a NUL byte; left out", True)]
    assert s.counts["found"] == 3 and s.counts["corrupt"] == 1
    assert tree_digest(root) == {**before, "ImageSets/Main/train.yolo_data.cache":
                                 tree_digest(root)["ImageSets/Main/train.yolo_data.cache"]}

    write_image(tmp_path / "c" / "x.jpg", 64, 64)
    write_image(tmp_path / "c" / "y.jpg", 64, 64, seed=1)
    images = [{"id": 1, "file_name": "x.jpg", "width": 64, "height": 64},
              {"id": 2, "file_name": "y\u0000.jpg", "width": 64, "height": 64},
              {"id": 3, "file_name": "y.jpg", "width": 64, "height": 64},
              {"id": 4, "file_name": "z\ud800.jpg", "width": 64, "height": 64}]  # (json.dumps keeps it an escape)
    anns = [{"id": k, "image_id": k, "category_id": 1, "bbox": [0, 0, 8, 8]} for k in (1, 2, 3, 4)]
    js = coco_json(tmp_path / "c" / "a.json", images, anns, [{"id": 1, "name": "a"}])
    for run in range(2):  # scanned, then from the cache
        s = load_split(str(js))
        assert s.built == (run == 0)
        assert [Path(s.store.im_file(i)).name for i in range(len(s.store))] == ["x.jpg", "y.jpg"]
        assert [(p.file, p.reason) for p in s.problems if p.dropped] == [
            (str(js), "images[1] (image id 2): file_name 'y\\x00.jpg' contains a NUL byte; left out"),
            (str(js), "images[3] (image id 4): file_name 'z\\ud800.jpg' holds a lone surrogate, which no file name "
                      "can; left out")]
        assert s.counts["found"] == 4 and s.counts["corrupt"] == 2


def test_entity_declarations_are_refused_in_any_encoding(tmp_path):
    import codecs
    root = voc_dir(tmp_path / "voc", {"ok": [("cat", 0, (1, 1, 32, 24))]})
    obj = "<object><name>{}</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object>"
    bomb = ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE annotation [<!ENTITY z "zebra">]>'
            f'<annotation>{obj.format("&z;")}</annotation>')
    plain = f'<?xml version="1.0" encoding="UTF-16"?><annotation>{obj.format("cat")}</annotation>'
    files = {"le_bom": codecs.BOM_UTF16_LE + bomb.encode("utf-16-le"), "be_bom": codecs.BOM_UTF16_BE + bomb.encode("utf-16-be"),
             "le": bomb.encode("utf-16-le"), "be": bomb.encode("utf-16-be"),
             "utf16_plain": codecs.BOM_UTF16_BE + plain.encode("utf-16-be")}  # no declarations: read as usual
    for stem, raw in files.items():
        write_image(root / "JPEGImages" / f"{stem}.jpg", 64, 48)
        (root / "Annotations" / f"{stem}.xml").write_bytes(raw)
    s = load_split(str(root))  # no names given: they are read from the XML files
    assert s.names == ["cat"]  # 'zebra' was never expanded, not even when looking for names
    probs = {Path(p.file).stem: p.reason for p in s.problems if p.dropped}
    assert probs == {stem: "XML with a DOCTYPE or entity declarations is not a VOC annotation"
                     for stem in ("le_bom", "be_bom", "le", "be")}, probs
    kept = {Path(s.store.im_file(i)).stem: s.store.labels_of(i) for i in range(len(s.store))}
    assert sorted(kept) == ["ok", "utf16_plain"] and len(kept["utf16_plain"]) == 1


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"a": ' * 100000 + "1" + "}" * 100000,
                                  '{"images": [], "categories": [{"id": 1, "x": ' + "[" * 100000 + "]" * 100000 + "}]}"])
def test_a_json_nested_100000_deep_is_named_not_a_recursion_error(tmp_path, text, capsys):
    js = tmp_path / "c" / "deep.json"
    js.parent.mkdir()
    js.write_text(text)
    with pytest.raises(ValueError, match=r"deep\.json: not a COCO annotation file \(JSON nested too deeply to read"):
        load_split(str(js))
    assert build_cache_main([str(js)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {js}: not a COCO annotation file") and "Recursion" not in err


def test_a_file_name_outside_the_image_folder_is_refused_and_named(tmp_path):
    root = tmp_path / "ds" / "train"
    write_image(root / "x.jpg", 64, 64)
    write_image(root / "sub" / "y.jpg", 64, 64, seed=1)
    secret = write_image(tmp_path / "elsewhere" / "secret.jpg", 64, 64, seed=2)  # outside the dataset
    names = {1: "x.jpg", 2: "sub/../sub/y.jpg", 3: "../../elsewhere/secret.jpg", 4: str(secret),
             5: "sub/../../../elsewhere/secret.jpg", 6: "..", 7: "..x.jpg"}
    write_image(root / "..x.jpg", 64, 64, seed=3)  # a name starting with two dots stays inside
    images = [{"id": k, "file_name": f, "width": 64, "height": 64} for k, f in names.items()]
    anns = [{"id": k, "image_id": k, "category_id": 1, "bbox": [0, 0, 8, 8]} for k in names]
    js = coco_json(root / "a.json", images, anns, [{"id": 1, "name": "a"}])
    s = load_split(str(js))
    assert [s.store.im_file(i) for i in range(len(s.store))] == [
        str(root / "..x.jpg"), str(root / "sub/../sub/y.jpg"), str(root / "x.jpg")]
    refused = {(p.file, p.reason) for p in s.problems if p.dropped}
    assert refused == {(str(js), f"image id {k}: file_name {names[k]!r} is outside the image folder {root}; left out")
                       for k in (3, 4, 5, 6)}, refused
    assert s.counts["found"] == 7 and s.counts["corrupt"] == 4
    assert all("secret" not in s.store.im_file(i) for i in range(len(s.store)))
