import os
from pathlib import Path

import pytest

from yolo_data.formats.datayaml import load_dataset_yaml
from yolo_data.formats.sources import default_cache_file, img2label_path, list_image_files
from conftest import write_image


def test_folder_is_searched_recursively_sorted_and_hidden_files_skipped(tmp_path):
    root = tmp_path / "images"
    for rel in ["b.jpg", "a.PNG", "sub/c.jpeg", "notes.txt", ".hidden.jpg", "._mac.jpg", ".git/x.jpg"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    files = list_image_files(root)
    assert [Path(f).relative_to(root).as_posix() for f in files] == ["a.PNG", "b.jpg", "sub/c.jpeg"]


def test_txt_list_resolves_dot_slash_against_its_folder(tmp_path):
    write_image(tmp_path / "data" / "images" / "x.jpg", 16, 16)
    lst = tmp_path / "data" / "train.txt"
    lst.write_text("./images/x.jpg\n\n/abs/y.jpg\n")
    assert list_image_files(lst) == sorted([str(tmp_path / "data") + os.sep + "images/x.jpg", "/abs/y.jpg"])
    both = list_image_files([lst, tmp_path / "data" / "images"])  # a list of sources, as YOLOv5 takes
    assert len(both) == 3 and sum(f.endswith("x.jpg") for f in both) == 2
    assert default_cache_file(lst, None) == tmp_path / "data" / "train.yolo_data.cache"


def test_missing_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        list_image_files(tmp_path / "nowhere")


def test_label_path_replaces_last_images_folder():
    assert img2label_path("/d/images/x/images/train/a.b.jpg") == "/d/images/x/labels/train/a.b.txt"
    assert str(default_cache_file("/d/images/train", "/d/labels/train/a.txt")) == "/d/labels/train.yolo_data.cache"


def test_yaml_relative_path_names_dict_and_list(tmp_path):
    y = tmp_path / "sets" / "d.yaml"
    y.parent.mkdir()
    y.write_text("path: ../data\ntrain: images/train\nval: [images/v1, /abs/v2]\nnames: {0: cat, 1: dog}\n")
    spec = load_dataset_yaml(y)
    assert spec.root == tmp_path / "data"
    assert spec.splits == {"train": [str(tmp_path / "data/images/train")],
                           "val": [str(tmp_path / "data/images/v1"), "/abs/v2"]}
    assert spec.names == ["cat", "dog"]
    y.write_text("path: .\ntrain: images\nnames: [cat, dog, bird]\n")
    assert load_dataset_yaml(y).root == y.parent and load_dataset_yaml(y).nc == 3


def test_yaml_never_runs_code(tmp_path):
    marker = tmp_path / "pwned"
    y = tmp_path / "d.yaml"
    y.write_text(f"train: images\nnames: [a]\ndownload: python -c \"open('{marker}', 'w')\"\n")
    load_dataset_yaml(y)  # a download script is ignored, not run
    y.write_text(f"train: !!python/object/apply:os.system ['touch {marker}']\nnames: [a]\n")
    with pytest.raises(ValueError, match="not valid yaml"):
        load_dataset_yaml(y)
    assert not marker.exists()


def test_yaml_with_bad_names_is_rejected_clearly(tmp_path):
    y = tmp_path / "d.yaml"
    y.write_text("train: images\nnames: {0: a, 2: c}\n")
    with pytest.raises(ValueError, match="without gaps"):
        load_dataset_yaml(y)
    y.write_text("train: images\nnc: 3\nnames: [a, b]\n")
    with pytest.raises(ValueError, match="nc=3"):
        load_dataset_yaml(y)
