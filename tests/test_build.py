"""build_loader's parts: the dataset receives what the composition root assembled, and a caller's own
mapper or sampler takes the place of the built one."""
import cv2
import numpy as np
import pytest
import torch

from yolo_data import Settings, YoloDataset
from yolo_data.build import build_loader
try:
    from yolo_data.items.parts import assemble
except ImportError:
    assemble = None


def marked(item, key):
    """A caller's mapper: an 8x8 image whose planes say the item's image, its epoch and its draw, and
    the image's labels as they are (normalised xywh)."""
    img = torch.empty((3, 8, 8), dtype=torch.uint8)
    img[0], img[1], img[2] = item.i, key.epoch, key.draw % 256
    labels = torch.from_numpy(item.labels.copy())
    targets = torch.cat([torch.zeros((len(labels), 1)), labels], 1)
    return img, targets, item.im_file, None


def settings(tmp_path, **fields):
    return Settings.evaluation(img_size=64, batch_size=2, split="train", cache_dir=tmp_path / "c", **fields)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_custom_mapper_makes_the_items_of_the_batches(small_dataset, tmp_path, workers):
    loader = build_loader(str(small_dataset), Settings.training(img_size=64, batch_size=2, split="train", seed=3,
                                                                cache_dir=tmp_path / "c", workers=workers),
                          mapper=marked)
    ds = loader.dataset
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        seen = []
        for imgs, targets, paths, shapes in loader:
            assert imgs.shape == (len(paths), 3, 8, 8) and imgs.dtype == torch.uint8 and shapes == (None,) * len(paths)
            for k, path in enumerate(paths):
                i = int(imgs[k, 0, 0, 0])
                assert path == ds.im_files[i] and int(imgs[k, 1].max()) == int(imgs[k, 1].min()) == epoch
                rows = targets[targets[:, 0] == k, 1:].numpy()
                np.testing.assert_array_equal(rows, ds.labels[i])
                seen.append(i)
        assert sorted(seen) == list(range(len(ds)))


def test_a_custom_mapper_returning_the_wrong_kind_is_named(small_dataset, tmp_path):
    def floats(item, key):
        return torch.zeros((3, 8, 8)), torch.zeros((0, 6)), item.im_file, None

    loader = build_loader(str(small_dataset), settings(tmp_path, workers=0), mapper=floats)
    with pytest.raises(TypeError, match=r"img must be a uint8 \(3, H, W\) CPU tensor \(the dataset has 3 "
                                        r"channels\), got torch.float32"):
        next(iter(loader))


def test_a_custom_mapper_makes_images_of_the_datasets_channels(small_dataset, tmp_path):
    """A dataset of 1 channel: the caller's mapper gives (1, H, W) images, and a colour one is named."""
    def gray(item, key):
        img, targets, path, shapes = marked(item, key)
        return img[:1].clone(), targets, path, shapes

    loader = build_loader(str(small_dataset), settings(tmp_path, workers=0, channels=1), mapper=gray)
    imgs = next(iter(loader))[0]
    assert imgs.shape == (2, 1, 8, 8) and imgs[:, 0, 0, 0].tolist() == [0, 1]
    deep = tmp_path / "deep"  # 16-bit gray PNGs, as keep16 reads (an 8-bit image would be left out)
    for k in range(2):
        (deep / "images" / "train").mkdir(parents=True, exist_ok=True)
        (deep / "labels" / "train").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(deep / "images" / "train" / f"{k}.png"), np.full((32, 48), 1000 * k + 7, np.uint16))
        (deep / "labels" / "train" / f"{k}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (deep / "data.yaml").write_text("path: .\ntrain: images/train\nnames: [a]\nchannels: 1\n")
    loader = build_loader(str(deep / "data.yaml"), settings(tmp_path / "c16", workers=0, keep16=True), mapper=gray)
    with pytest.raises(TypeError, match=r"img must be a uint16 \(1, H, W\) CPU tensor \(the dataset has 1 "
                                        r"channels\), got torch.uint8 \(1, 8, 8\)"):
        next(iter(loader))

    def gray16(item, key):
        img, targets, path, shapes = gray(item, key)
        return img.to(torch.int32).mul(257).to(torch.uint16), targets, path, shapes

    loader = build_loader(str(deep / "data.yaml"), settings(tmp_path / "c16", workers=0, keep16=True), mapper=gray16)
    imgs = next(iter(loader))[0]
    assert imgs.dtype == torch.uint16 and imgs[:, 0, 0, 0].tolist() == [0, 257]
    loader = build_loader(str(small_dataset), settings(tmp_path, workers=0, channels=1), mapper=marked)
    with pytest.raises(TypeError, match=r"img must be a uint8 \(1, H, W\) CPU tensor \(the dataset has 1 "
                                        r"channels\), got torch.uint8 \(3, 8, 8\)"):
        next(iter(loader))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_custom_sampler_orders_the_batches(small_dataset, tmp_path, workers):
    order = [5, 3, 1, 0, 2, 4]
    loader = build_loader(str(small_dataset), settings(tmp_path, workers=workers), sampler=order)
    assert loader.sampler is order and len(loader) == 3
    paths = [p for _, _, batch, _ in loader for p in batch]
    assert paths == [loader.dataset.im_files[i] for i in order]
    with pytest.raises(TypeError, match="state_dict needs the loader's own YoloSampler"):
        loader.state_dict()


def test_a_sampler_made_from_the_dataset_and_the_epoch_set_on_the_dataset(small_dataset, tmp_path):
    loader = build_loader(str(small_dataset), settings(tmp_path, workers=0),
                          sampler=lambda ds: list(reversed(range(len(ds)))), mapper=marked)
    loader.dataset.set_epoch(4)  # no YoloSampler writes the epoch: the dataset's own
    imgs = torch.cat([b[0] for b in loader])
    assert imgs[:, 0, 0, 0].tolist() == [5, 4, 3, 2, 1, 0] and set(imgs[:, 1].flatten().tolist()) == {4}


def test_class_balance_with_a_custom_sampler_is_refused(small_dataset, tmp_path):
    with pytest.raises(ValueError, match="class_balance=0.1 with a sampler of your own"):
        build_loader(str(small_dataset), Settings.training(img_size=64, batch_size=2, split="train", class_balance=0.1,
                                                           cache_dir=tmp_path / "c"), sampler=[0, 1])


def test_the_dataset_serves_the_parts_it_receives(small_dataset, tmp_path):
    s = settings(tmp_path)
    parts = assemble(str(small_dataset), s)
    ds = YoloDataset(str(small_dataset), s, parts=parts)
    assert ds.index is parts.index and ds.images is parts.images and ds.mapper is parts.mapper
    alone = YoloDataset(str(small_dataset), s)  # assembled by the same function
    for k in range(len(ds)):
        a, b = ds[k], alone[k]
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2:] == b[2:]
    with pytest.raises(TypeError, match="rect cannot change them"):
        YoloDataset(str(small_dataset), s, parts=parts, rect=True)
