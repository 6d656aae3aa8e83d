"""create_dataloader / YoloDataset with augment=False: the YOLOv5 batch format and numbers."""
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from yolo_data import create_dataloader
from yolo_data.dataset import LoadImagesAndLabels
from conftest import make_dataset

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample.yaml"


def batches(loader):
    return [(i.clone(), t.clone(), p, s) for i, t, p, s in loader]


def test_batch_format(small_dataset):
    loader, ds = create_dataloader(str(small_dataset), 64, 4, 32, workers=0, split="train")
    imgs, targets, paths, shapes = next(iter(loader))
    assert imgs.shape == (4, 3, 64, 64) and imgs.dtype == torch.uint8
    assert targets.dtype == torch.float32 and targets.shape[1] == 6
    assert targets[:, 0].tolist() == sorted(targets[:, 0].tolist()) and targets[:, 0].max() < 4
    assert len(paths) == 4 and all(isinstance(p, str) for p in paths)
    (h0, w0), ((rh, rw), (padw, padh)) = shapes[0]
    assert (h0, w0) == (48, 64) and (rh, rw) == (1.0, 1.0) and (padw, padh) == (0.0, 8.0)
    assert len(ds) == 6 and ds.n == 6
    assert all(lb.dtype == np.float32 and lb.shape[1] == 5 for lb in ds.labels)
    assert ds.shapes.shape == (6, 2) and ds.shapes[0].tolist() == [64, 48]
    assert [Path(f).name for f in ds.im_files] == ["a.jpg", "b.jpg", "c.png", "d.jpg", "e.jpg", "f.jpg"]
    assert ds.label_files[0].endswith("/labels/train/a.txt")
    assert [len(s) for s in ds.segments] == [0, 0, 2, 0, 0, 0]


def test_targets_are_the_labels_mapped_through_the_letterbox(small_dataset):
    """a.jpg is 64x48: at imgsz 64 it stays 64x48 and gets 8 px of padding above and below."""
    loader, _ = create_dataloader(str(small_dataset), 64, 1, 32, workers=0, split="train")
    imgs, targets, _, _ = next(iter(loader))
    # label 0: x .5 y .5 w .25 h .5 -> pixels x 24..40, y 12..36 (+8 pad) of a 64x64 image
    expect = torch.tensor([[0, 0, 0.5, 0.5, 0.25, 24 / 64], [0, 1, 0.25, (12 + 8) / 64, 0.1, 4.8 / 64]])
    torch.testing.assert_close(targets, expect, atol=1e-6, rtol=0)
    assert (imgs[0, :, :8] == 114).all() and (imgs[0, :, 56:] == 114).all()


def test_pixels_are_rgb_of_the_decoded_image(tmp_path):
    import cv2
    yaml = make_dataset(tmp_path, [("x.png", (32, 32), "0 0.5 0.5 0.5 0.5\n")])
    img = np.zeros((32, 32, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 10, 20, 30  # B, G, R
    cv2.imwrite(str(tmp_path / "images/train/x.png"), img)
    loader, _ = create_dataloader(str(yaml), 32, 1, 32, workers=0, split="train")
    imgs = next(iter(loader))[0]
    assert imgs[0, :, 0, 0].tolist() == [30, 20, 10]


def test_rect_batches_use_their_batch_shape(small_dataset):
    loader, ds = create_dataloader(str(small_dataset), 64, 2, 32, rect=True, pad=0.0, workers=0, split="train")
    assert ds.batch_shapes is not None and len(ds.batch_shapes) == 3
    for b, (imgs, *_rest) in enumerate(loader):
        assert tuple(imgs.shape[2:]) == tuple(ds.batch_shapes[b])
    ratios = ds.shapes[:, 1] / ds.shapes[:, 0]
    assert (np.diff(ratios) >= 0).all()  # im_files, labels and shapes reordered together
    assert Path(ds.im_files[0]).name == "c.png" and len(ds.labels[0]) == 2


def test_same_batches_with_0_and_2_workers(small_dataset):
    a = batches(create_dataloader(str(small_dataset), 64, 2, 32, workers=0, split="train")[0])
    b = batches(create_dataloader(str(small_dataset), 64, 2, 32, workers=2, split="train")[0])
    assert len(a) == len(b) == 3
    for (ia, ta, pa, sa), (ib, tb, pb, sb) in zip(a, b):
        assert torch.equal(ia, ib) and torch.equal(ta, tb) and pa == pb and sa == sb


def test_ram_cache_gives_the_same_items(small_dataset):
    plain = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    cached = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="ram")
    for i in range(len(plain)):
        assert torch.equal(plain[i][0], cached[i][0]) and torch.equal(plain[i][1], cached[i][1])


def test_dataset_pickles_for_spawned_workers(small_dataset):
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    back = pickle.loads(pickle.dumps(ds))
    assert torch.equal(back[2][0], ds[2][0]) and torch.equal(back[2][1], ds[2][1])


def test_single_cls_min_items_and_yaml_split_choice(small_dataset):
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", single_cls=True, min_items=1)
    assert len(ds) == 4 and all((lb[:, 0] == 0).all() for lb in ds.labels)
    with pytest.raises(ValueError, match="no 'val' split"):
        LoadImagesAndLabels(str(small_dataset), 64)  # augment=False picks 'val' by default


def test_labels_cannot_be_modified_through_the_dataset(small_dataset):
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    with pytest.raises(ValueError):
        ds.labels[0][0, 0] = 5


def test_no_usable_image_is_a_clear_error(tmp_path):
    yaml = make_dataset(tmp_path, [("a.jpg", (20, 20), "7 0.5 0.5 0.1 0.1\n")])
    with pytest.raises(RuntimeError, match="no usable images.*class 7"):
        create_dataloader(str(yaml), 32, 1, 32, workers=0, split="train")


def expected_targets(label_file: Path, k: int, hw0, size: int):
    """Rows [k, class, x, y, w, h] of ``label_file`` for an image of hw0 (h, w) letterboxed unscaled and
    centred on size x size, from the text alone: a box row as written, a polygon row by its envelope."""
    h0, w0 = hw0
    padw, padh = (size - w0) / 2, (size - h0) / 2  # YOLOv5 offsets boxes by the half pad, .5 included
    rows = []
    for line in label_file.read_text().splitlines():
        cls, *v = (float(s) for s in line.split())
        if len(v) == 4:
            x, y, w, h = v
            x1, y1, x2, y2 = x - w / 2, y - h / 2, x + w / 2, y + h / 2
        else:
            x1, x2, y1, y2 = min(v[0::2]), max(v[0::2]), min(v[1::2]), max(v[1::2])
        x1, x2 = x1 * w0 + padw, x2 * w0 + padw
        y1, y2 = y1 * h0 + padh, y2 * h0 + padh
        rows.append([k, cls, (x1 + x2) / 2 / size, (y1 + y2) / 2 / size, (x2 - x1) / size, (y2 - y1) / size])
    return rows


def test_bundled_sample_targets_are_its_label_files_through_the_letterbox(tmp_path):
    """The first batch of the bundled val split: landscape, portrait, square and an odd padding (213 rows:
    53.5 px each side), with box and polygon rows of all three classes."""
    import cv2
    shutil.copytree(SAMPLE.parent, tmp_path / "data")  # the test writes caches: not into the checkout
    loader, ds = create_dataloader(str(tmp_path / "data" / SAMPLE.name), 320, 4, 32, workers=0, split="val")
    imgs, targets, paths, _ = next(iter(loader))
    assert len(ds) == 8 and imgs.shape == (4, 3, 320, 320)
    assert [Path(p).name for p in paths] == ["val_000.jpg", "val_001.jpg", "val_002.jpg", "val_003.jpg"]
    labels = tmp_path / "data" / "sample" / "labels" / "val"
    expect = []
    for k, p in enumerate(paths):
        hw0 = cv2.imread(p).shape[:2]
        assert max(hw0) == 320  # long side already imgsz: neither load_image nor the letterbox rescales
        expect += expected_targets(labels / (Path(p).stem + ".txt"), k, hw0, 320)
    assert len(expect) == 10
    torch.testing.assert_close(targets, torch.tensor(expect, dtype=torch.float32), atol=1e-6, rtol=0)


def test_coco128_counts(coco128):
    loader, ds = create_dataloader(str(coco128 / "coco128.yaml"), 640, 16, 32, workers=0, split="train")
    c = ds.split_labels.counts
    assert (len(ds), c["boxes"], c["backgrounds"], c["corrupt"]) == (128, 929, 2, 0)
    assert sum(len(lb) for lb in ds.labels) == 929
    imgs, targets, paths, shapes = next(iter(loader))
    assert imgs.shape == (16, 3, 640, 640)
