"""The settings object, its presets, the composition root's adapters and the dataset's item keys."""
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from yolo_data import LoadImagesAndLabels, Settings, YoloDataset, create_dataloader
from yolo_data.build import build_loader
from yolo_data.loading.collate import collate_fn
from yolo_data.sampling.sampler import ItemKey
from yolo_data.integrations.ultralytics_args import loader_settings
from yolo_data.settings import IndexSettings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sample(tmp_path):
    """A copy of the bundled sample (16 train, 8 val images; loaders write label caches)."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    return tmp_path / "data" / "sample.yaml"


def test_presets_decide_every_training_and_evaluation_choice_in_one_place():
    t, e = Settings.training(), Settings.evaluation()
    decided = lambda s: (s.split_name, s.linear_resize, s.scale_up, s.reduced_decode, s.shuffle,  # noqa: E731
                         s.mosaic_possible, s.partner_group)
    assert decided(t) == ("train", True, True, True, True, True, 8)
    assert decided(e) == ("val", False, False, False, False, False, 1)
    # a choice given explicitly is kept whatever the preset
    assert decided(Settings.evaluation(linear_resize=True, scale_up=True, split="test", shuffle=True)) == \
        ("test", True, True, False, True, False, 1)
    assert decided(Settings.training(reduced_decode=False, rect=True)) == ("train", True, True, False, True, False, 1)
    assert Settings.training(batch_partners=False).partner_group == 1
    # image weights turn rect off, as in YOLOv5; rect batches are the global batch unless ranks shard
    assert not Settings.training(rect=True, image_weights=True).rect
    assert Settings.evaluation(batch_size=4).rect_batch(3) == 12
    assert Settings.evaluation(batch_size=4, each_image_once=True).rect_batch(3) == 4
    assert not Settings.training(batch_size=4, each_image_once=True).sharded(3)  # training never shards


def test_fields_are_given_by_name_alone_and_checked():
    s = Settings.training(cache="ram", split="val", rect=True, hyp={"mosaic": 0.5}, workers=3, seed=-2)
    assert (s.images.cache, s.source.split, s.index.rect, s.augmentation.hyp, s.loader.workers, s.seed) == \
        ("ram", "val", True, {"mosaic": 0.5}, 3, -2)
    assert s.replace(imgsz=320, cache_images="disk", ram_cache_dir="/x", linear_eval=True).fields() == \
        {**s.fields(), "img_size": 320, "cache": "disk", "ram_dir": "/x", "linear_resize": True}  # older names
    with pytest.raises(TypeError, match="no field 'mosiac'; the fields are: augment, batch_partners"):
        s.replace(mosiac=True)
    for bad in (0, -1, 2.5, True, "640"):
        with pytest.raises(ValueError, match="img_size must be a positive whole number"):
            Settings(img_size=bad)
    with pytest.raises(TypeError, match="seed must be an integer"):
        Settings(seed=1.5)
    with pytest.raises(TypeError, match="index must be a IndexSettings"):
        Settings(index={"rect": True})
    assert Settings(index=IndexSettings(rect=True), pad=0.5).index == IndexSettings(rect=True, pad=0.5)


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, 0, -3, float("nan"), float("inf"), True, False, "0.5", None])
def test_a_fraction_outside_its_range_is_refused_naming_the_field_and_value(bad):
    with pytest.raises(ValueError, match=rf"settings: fraction .*got {re.escape(repr(bad))}$"):
        Settings(fraction=bad)


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), float("inf"), float("-inf"), True, "2", None])
def test_object_cache_gb_must_be_a_finite_size_of_zero_or_more(bad):
    with pytest.raises(ValueError, match=rf"settings: object_cache_gb must be a finite number of GB >= 0 .*"
                                         rf"got {re.escape(repr(bad))}$"):
        Settings(object_cache_gb=bad)


def test_good_fractions_and_cache_sizes_are_kept_as_plain_numbers():
    kept = {0.25: 0.25, 1.0: 1.0, 1: 1.0, 7: 7, np.int64(3): 3, np.float64(0.5): 0.5}
    for given, want in kept.items():
        value = Settings(fraction=given).source.fraction
        assert value == want and type(value) is type(want)  # an int is a count, a float a ratio
    assert Settings(object_cache_gb=0).source.object_cache_gb == 0.0
    assert Settings(object_cache_gb=np.float32(1.5)).source.object_cache_gb == 1.5


def test_every_entry_point_checks_the_fraction_through_the_settings(sample):
    with pytest.raises(ValueError, match="settings: fraction as a ratio must be in"):
        create_dataloader(str(sample), 64, 4, 32, workers=0, split="train", fraction=1.5)
    with pytest.raises(ValueError, match="settings: fraction as a ratio must be in .*got nan"):
        loader_settings(SimpleNamespace(imgsz=64, seed=0, fraction=float("nan")), "train", 4, 32)
    with pytest.raises(ValueError, match="settings: object_cache_gb .*got -1"):
        YoloDataset(str(sample), Settings(object_cache_gb=-1))


def test_a_fraction_s_label_cache_goes_where_the_split_s_does_named_with_the_fraction(sample, tmp_path):
    images = sample.parent / "sample" / "images" / "train"
    labels = sample.parent / "sample" / "labels"
    before, caches = sorted(p.name for p in images.iterdir()), {p.name for p in labels.glob("*.cache")}
    sizes = {}
    for fraction in (0.5, 0.25, 5):
        ds = YoloDataset(str(sample), Settings.training(split="train", fraction=fraction))
        sizes[fraction] = len(ds)
    assert sizes == {0.5: 8, 0.25: 4, 5: 5}
    assert sorted(p.name for p in images.iterdir()) == before  # nothing written among the images
    assert sorted({p.name for p in labels.glob("*.cache")} - caches) == [
        "train.first-5.yolo_data.cache", "train.fraction-0.25.yolo_data.cache", "train.fraction-0.5.yolo_data.cache"]
    again = YoloDataset(str(sample), Settings.training(split="train", fraction=0.25))
    assert len(again) == 4 and not again.split_labels.built  # its own cache, read back
    # with a cache folder, there and named after the split and the fraction
    folder = tmp_path / "caches"
    YoloDataset(str(sample), Settings.training(split="train", fraction=0.5, cache_dir=str(folder)))
    assert [p.name.split("-")[0] for p in folder.iterdir()] == ["train.fraction"]
    assert [p.name.rsplit("-", 1)[0] for p in folder.iterdir()] == ["train.fraction-0.5"]


def test_create_dataloader_takes_settings_or_their_fields_and_yolov5_arguments_win(sample):
    _, by_name = create_dataloader(str(sample), 64, 4, 32, workers=0, split="train", min_items=1)
    _, by_obj = create_dataloader(str(sample), 64, 4, 32, workers=0,
                                  settings=Settings(split="train", min_items=1, rect=True, img_size=320))
    assert list(by_name.im_files) == list(by_obj.im_files) and "/train/" in by_name.im_files[0]
    assert by_obj.img_size == 64 and not by_obj.rect  # imgsz=64 and rect=False, YOLOv5's arguments
    with pytest.raises(TypeError, match="settings have no field 'splitt'"):
        create_dataloader(str(sample), 64, 4, 32, workers=0, splitt="train")


def test_yolov5_signature_and_the_settings_signature_build_the_same_dataset(sample):
    a = LoadImagesAndLabels(str(sample), 64, 4, augment=True, rect=False, split="train", seed=3)
    b = YoloDataset(str(sample), Settings.training(img_size=64, batch_size=4, split="train", seed=3))
    assert isinstance(a, YoloDataset) and list(a.im_files) == list(b.im_files)
    a.set_epoch(2), b.set_epoch(2)
    for i in (0, 5):
        assert torch.equal(a[i][0], b[i][0]) and torch.equal(a[i][1], b[i][1])
    with pytest.raises(TypeError, match="use LoadImagesAndLabels"):
        YoloDataset(str(sample), 64)


def test_item_keys_index_errors_and_iteration_that_ends(sample):
    ds = LoadImagesAndLabels(str(sample), 64, 4, split="val")
    n = len(ds)
    with pytest.raises(IndexError, match=f"index {n} out of range for {n} items"):
        ds[n]
    with pytest.raises(IndexError):
        ds[-n - 1]
    items = list(ds)  # ends: torch's Dataset has no __iter__, Python stops at the first IndexError
    assert len(items) == n == len([x for x in ds])
    assert [p for _, _, p, _ in items] == list(ds.im_files)
    assert torch.equal(ds[-1][0], ds[n - 1][0]) and ds[-1][2] == ds.im_files[n - 1]
    assert torch.equal(ds[ItemKey(2, 7)][0], ds[2][0])  # evaluation: the draw changes nothing
    train = LoadImagesAndLabels(str(sample), 64, 4, augment=True, split="train", seed=1)
    same, other = train[ItemKey(3, 0)], train[ItemKey(3, 9)]
    assert same[2] == other[2] and torch.equal(train[3][0], same[0])  # draw 0 is a plain dataset[3]
    assert not torch.equal(same[0], other[0])  # another draw of the image is augmented anew


def test_the_loader_s_sampler_is_the_one_writer_of_the_epoch(sample):
    loader, ds = create_dataloader(str(sample), 64, 4, 32, workers=0, augment=True, split="train")
    loader.sampler.set_epoch(4)
    next(iter(loader))
    assert ds.epoch == 4
    with pytest.raises(RuntimeError, match="loader.sampler.set_epoch"):
        ds.set_epoch(5)
    alone = LoadImagesAndLabels(str(sample), 64, 4, augment=True, split="train")
    alone.set_epoch(5)  # a dataset used without a YoloSampler sets its own
    assert alone.epoch == 5


def test_a_third_integration_is_an_adapter_of_a_few_lines(sample):
    """What a PyTorch Lightning or MMDetection adapter needs: its settings, and optionally its dataset
    class, collate and loader class; everything else is the composition root's."""

    class DictDataset(YoloDataset):
        pass

    def dict_collate(items):
        imgs, targets, paths, _ = collate_fn(items)
        return {"image": imgs, "boxes": targets[:, 2:], "labels": targets[:, 1].long(),
                "batch_index": targets[:, 0].long(), "files": paths}

    def lightning_loader(path, imgsz: int, batch_size: int, train: bool):
        preset = Settings.training if train else Settings.evaluation
        settings = preset(img_size=imgsz, batch_size=batch_size, workers=0, rect=not train, pad=0.0 if train else 0.5)
        return build_loader(path, settings, dataset_class=DictDataset, collate=dict_collate)

    val = lightning_loader(str(sample), 64, 4, train=False)
    batch = next(iter(val))
    assert isinstance(val.dataset, DictDataset) and val.dataset.rect
    ref = next(iter(create_dataloader(str(sample), 64, 4, 32, rect=True, pad=0.5, workers=0)[0]))
    assert torch.equal(batch["image"], ref[0]) and torch.equal(batch["boxes"], ref[1][:, 2:])
    assert list(batch["files"]) == list(ref[2])
    train = lightning_loader(str(sample), 64, 4, train=True)
    assert train.dataset.mosaic and train.sampler.group == 4  # partner groups of 8 fall back to the batch
    assert next(iter(train))["image"].shape == (4, 3, 64, 64)


def test_evaluation_choices_reach_the_pixels(sample):
    """linear_resize and scale_up decide the evaluation image: a 64-px target from the 240-320 px sample
    images shrinks (area vs linear differ); a letterbox larger than the resized image is filled only with
    scale_up."""
    area = LoadImagesAndLabels(str(sample), 64, 4, split="val")
    linear = LoadImagesAndLabels(str(sample), 64, 4, split="val", linear_resize=True)
    assert area[0][3] == linear[0][3] and not torch.equal(area[0][0], linear[0][0])
    # rect batches with pad 0.5 are larger than the resized images: only scale_up fills them
    small = LoadImagesAndLabels(str(sample), 256, 4, split="val", rect=True, pad=0.5)
    big = LoadImagesAndLabels(str(sample), 256, 4, split="val", rect=True, pad=0.5, scale_up=True)
    k = small.im_files.index(next(f for f in small.im_files if f.endswith("val_002.jpg")))  # 320 x 320
    assert small[k][0].shape == big[k][0].shape == (3, 288, 288)  # ceil(256 / 32 + 0.5) strides
    assert small[k][3][1][1] == (16.0, 16.0) and big[k][3][1][1] == (0.0, 0.0)
    assert np.count_nonzero(big[k][0].numpy() != 114) > np.count_nonzero(small[k][0].numpy() != 114)
