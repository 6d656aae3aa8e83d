"""The Ultralytics plug-in.

Always run (no Ultralytics needed): Ultralytics' batch dict from our loader against the dataset, the
ratio_pad offsets against the letterbox, the hyperparameter mapping, the labels-as-dicts view against
the store, close_mosaic reaching persistent workers, fraction, and the evaluation shard sampler.

With Ultralytics installed (the benchmark environment, BENCHMARKS.md's Setup: its python -m pytest ...): the
validation inputs equal Ultralytics' own, image by image, and YoloDataTrainer trains an epoch with
workers 0 and 2 (including close_mosaic) and validates with YoloDataValidator; its checkpoints record
the data it was trained on, which ``yolo-data report --checkpoint`` compares with the data now.
"""
import logging
import math
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch

from yolo_data.dataset import YoloDataset
from yolo_data.geometry.shapes import letterbox_plan
from yolo_data.augment.hyp import AugmentConfig
from yolo_data.integrations.ultralytics_args import (MAPPING, NO_EQUIVALENT, cache_mode, fraction_count,
                                                     loader_settings, split_fraction, take_own_args)
from yolo_data.integrations.ultralytics_batch import LabelDicts, snap_boxes_to_border, to_batch_dict, whole_pixel_pad
from yolo_data.integrations.ultralytics_loader import ShardSampler, UltralyticsLoader, create_loader
from yolo_data.sampling.sampler import YoloSampler

from conftest import make_dataset
from procs import count_calls

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"img", "batch_idx", "cls", "bboxes", "im_file", "ori_shape", "resized_shape"}


@pytest.fixture
def sample(tmp_path):
    """A copy of the bundled sample (16 train, 8 val images; the loaders write label caches)."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    return tmp_path / "data" / "sample.yaml"


def settings(mode, batch=4, imgsz=128, **cfg):
    return loader_settings(SimpleNamespace(imgsz=imgsz, seed=3, **cfg), mode, batch, 32,
                           workers=cfg.pop("workers", 0))


def batches(loader):
    return [b for b in loader]


# -- the batch dict ---------------------------------------------------------------------------------
def test_val_batch_dict_matches_the_dataset_and_scales_back_exactly(sample):
    loader = create_loader(sample, settings("val", imgsz=160), split="val")  # val_003: an odd padding
    ds = loader.dataset
    seen = 0
    for b in loader:
        assert set(b) == KEYS | {"ratio_pad"}
        img = b["img"]
        assert img.dtype == torch.uint8 and img.ndim == 4 and img.shape[1] == 3
        n = len(b["im_file"])
        assert b["cls"].shape == (len(b["batch_idx"]), 1) and b["bboxes"].shape == (len(b["batch_idx"]), 4)
        assert b["cls"].dtype == b["bboxes"].dtype == b["batch_idx"].dtype == torch.float32
        assert b["resized_shape"] == ((img.shape[2], img.shape[3]),) * n
        H, W = img.shape[2:]
        for i, f in enumerate(b["im_file"]):
            k = ds.im_files.index(f)
            h0, w0 = ds.store.shapes_hw[k]
            assert b["ori_shape"][i] == (h0, w0)
            mine = b["batch_idx"] == i
            ref = ds.store.labels_of(k)
            np.testing.assert_array_equal(b["cls"][mine, 0].numpy(), ref[:, 0])
            # on the batch image: the resized content's pixels plus the whole-pixel border, exactly
            (rh, rw), (left, top) = b["ratio_pad"][i]
            h, w = round(rh * h0), round(rw * w0)
            xywh = b["bboxes"][mine].numpy().astype(np.float64) * [W, H, W, H]
            np.testing.assert_allclose(xywh, ref[:, 1:] * [w, h, w, h] + [left, top, 0, 0], atol=2e-3)
            seen += 1
    assert seen == len(ds) == 8


@pytest.mark.parametrize("cache", [False, "disk"])
def test_val_images_are_resized_linearly_as_ultralytics_does(sample, cache):
    """Reference: cv2 linear resize of the long side (sizes rounded up), then the letterbox border at
    (left, top), gray 114 around; YOLOv5's area interpolation would differ in most pixels.  An image
    cache holds the same pixels (it is built with the same resize)."""
    import math
    import cv2
    loader = create_loader(sample, settings("val", imgsz=160, cache=cache), split="val")
    assert (loader.dataset.image_cache is not None) == bool(cache)
    b = next(iter(loader))
    for i, f in enumerate(b["im_file"]):
        im = cv2.imread(f)
        h0, w0 = im.shape[:2]
        r = 160 / max(h0, w0)
        im = cv2.resize(im, (math.ceil(w0 * r), math.ceil(h0 * r)), interpolation=cv2.INTER_LINEAR)
        (_, _), (left, top) = b["ratio_pad"][i]
        H, W = b["img"].shape[2:]
        want = np.full((H, W, 3), 114, np.uint8)
        want[top:top + im.shape[0], left:left + im.shape[1]] = im
        np.testing.assert_array_equal(b["img"][i].permute(1, 2, 0).numpy(), want[:, :, ::-1])


# (w, h) whose scaled long side is not whole in floating point at imgsz 320: 320 / 1050 * 1050 is
# 320.00000000000006, so rounding up without a cap gives 321 (1050 x 1050: both sides; 147: enlarged)
ODD_SIZES = [(1050, 700), (525, 1050), (1050, 1050), (147, 90), (615, 280), (64, 48)]


def ultralytics_hw(w0, h0, s):
    """(h, w) of Ultralytics' load_image: each side times s / long side, rounded up, at most s; and the
    unchanged size when the ratio is 1."""
    r = s / max(h0, w0)
    return (h0, w0) if r == 1 else (min(math.ceil(h0 * r), s), min(math.ceil(w0 * r), s))


@pytest.fixture
def odd_sizes(tmp_path):
    """A split of ODD_SIZES images, one box each."""
    items = [(f"im{k}.png", wh, "0 0.5 0.5 0.4 0.4\n") for k, wh in enumerate(ODD_SIZES)]
    make_dataset(tmp_path / "odd", items, split="val")
    return tmp_path / "odd" / "images" / "val"


@pytest.mark.parametrize("mode", ["train", "val"])
def test_first_resize_caps_sides_at_imgsz_as_ultralytics(odd_sizes, mode):
    """Both loaders of the plug-in resize as Ultralytics' load_image; YOLOv5's evaluation settings keep
    YOLOv5's rounding (a side of imgsz + 1 on the same images)."""
    ds = create_loader(odd_sizes, settings(mode, imgsz=320, cache=False), split="val").dataset
    assert ds.images.capped
    for i in range(len(ds)):
        img, (h0, w0), hw = ds.load_image(i)
        assert hw == img.shape[:2] == ultralytics_hw(w0, h0, 320), (w0, h0)
    v5 = YoloDataset(odd_sizes, img_size=320, batch_size=2)
    sides = {max(v5.load_image(i)[2]) for i in range(len(v5))}
    assert 321 in sides  # the rule differs on these images: the test above could fail


@pytest.mark.parametrize("cache", [False, "disk", "ram"])
def test_val_pixels_of_odd_sizes_are_ultralytics(odd_sizes, cache, tmp_path, monkeypatch):
    """Reference: cv2 linear resize to Ultralytics' size (ultralytics_hw), centred in the rect batch
    shape with the letterbox's split of an odd padding (one more pixel right/bottom), gray 114 around.
    An image cache holds the same capped sizes."""
    monkeypatch.setenv("YOLO_DATA_SHM_DIR", str(tmp_path / "shm"))
    (tmp_path / "shm").mkdir()
    loader = create_loader(odd_sizes, settings("val", batch=2, imgsz=320, cache=cache), split="val")
    assert (loader.dataset.image_cache is not None) == bool(cache)
    seen = 0
    for b in loader:
        H, W = b["img"].shape[2:]
        for i, f in enumerate(b["im_file"]):
            im = cv2.imread(f)
            h, w = ultralytics_hw(im.shape[1], im.shape[0], 320)
            im = cv2.resize(im, (w, h), interpolation=cv2.INTER_LINEAR)
            top, left = round((H - h) / 2 - 0.1), round((W - w) / 2 - 0.1)
            want = np.full((H, W, 3), 114, np.uint8)
            want[top:top + h, left:left + w] = im
            np.testing.assert_array_equal(b["img"][i].permute(1, 2, 0).numpy(), want[:, :, ::-1], err_msg=f)
            assert tuple(b["ratio_pad"][i][1]) == (left, top)
            h0, w0 = b["ori_shape"][i]
            np.testing.assert_allclose(b["ratio_pad"][i][0], (h / h0, w / w0), rtol=1e-12)
            seen += 1
    assert seen == len(ODD_SIZES)
    loader.close()


def test_whole_pixel_pad_is_the_letterbox_border():
    """Reference: the letterbox plan's own top/left border, for odd and even paddings."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        h, w = (int(v) for v in rng.integers(5, 400, 2))
        new = (int(rng.integers(1, 13)) * 32, int(rng.integers(1, 13)) * 32)
        plan = letterbox_plan((h, w), new, auto=False, scaleup=False)
        assert whole_pixel_pad(plan.pad) == (plan.left, plan.top)


def test_to_batch_dict_views_targets_and_omits_ratio_pad_for_mosaics():
    imgs = torch.zeros((2, 3, 64, 96), dtype=torch.uint8)
    targets = torch.tensor([[0, 2, .5, .5, .2, .2], [1, 1, .1, .2, .3, .4], [1, 0, .6, .6, .1, .1]])
    shapes = [((100, 150), ((0.64, 0.64), (0.0, 7.5))), None]
    d = to_batch_dict(imgs, targets, ["a.jpg", "b.jpg"], shapes)
    assert set(d) == KEYS and d["img"] is imgs
    assert d["ori_shape"] == ((100, 150), (64, 96)) and d["resized_shape"] == ((64, 96), (64, 96))
    torch.testing.assert_close(d["cls"], targets[:, 1:2])
    torch.testing.assert_close(d["bboxes"], targets[:, 2:])
    torch.testing.assert_close(d["batch_idx"], torch.tensor([0.0, 1, 1]))
    d = to_batch_dict(imgs, targets, ["a.jpg", "b.jpg"], [shapes[0], shapes[0]])
    assert d["ratio_pad"] == (((0.64, 0.64), (0, 7)),) * 2
    with pytest.raises(ValueError):
        to_batch_dict(imgs, targets, ["a.jpg", "b.jpg"], shapes, with_ratio_pad=True)


def test_evaluation_boxes_sit_on_the_whole_pixel_border():
    """YOLOv5 offsets boxes by padh 7.5 where the content starts at row 7: Ultralytics' boxes (and ours
    for evaluation) by 7; an even padding moves nothing."""
    targets = torch.tensor([[0, 2, .5, .5, .2, .2], [1, 1, .1, .2, .3, .4]])
    shapes = [((100, 150), ((0.64, 0.64), (0.0, 7.5))), ((100, 150), ((0.64, 0.64), (4.0, 8.0)))]
    snap_boxes_to_border(targets, shapes, (64, 96))
    torch.testing.assert_close(targets, torch.tensor([[0, 2, .5, .5 - 0.5 / 64, .2, .2], [1, 1, .1, .2, .3, .4]]))


def test_train_batches_are_mosaics_and_the_same_with_0_and_2_workers(sample):
    runs = []
    for workers in (0, 2):
        loader = create_loader(sample, settings("train", workers=workers, batch=8), split="train")
        assert loader.num_workers == workers and loader.batch_size == 8 and not loader.drop_last
        runs.append(batches(loader))
        loader.close()
    for a, b in zip(*runs):
        assert set(a) == KEYS  # mosaics: no ratio_pad
        assert a["img"].shape == (8, 3, 128, 128) and a["ori_shape"] == ((128, 128),) * 8
        assert torch.equal(a["img"], b["img"]) and torch.equal(a["bboxes"], b["bboxes"])
        assert a["im_file"] == b["im_file"]
        assert 0 <= float(a["bboxes"].min()) and float(a["bboxes"].max()) <= 1


# -- close_mosaic --------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_close_mosaic_reaches_persistent_workers(sample, workers, monkeypatch):
    """As Ultralytics' trainer does it: enumerate the loader, close, reset, enumerate again; every
    item after the close is a letterboxed single image (its batch then has ratio_pad)."""
    loader = create_loader(sample, settings("train", workers=workers, batch=4), split="train")
    assert isinstance(loader, UltralyticsLoader)
    first = batches(loader)
    assert all("ratio_pad" not in b for b in first)  # mosaic 1.0: every item a mosaic
    passes = count_calls(monkeypatch, YoloSampler, "__iter__")  # a pass's start draws its keys at once
    stale = enumerate(loader)  # what the trainer's non-zero ranks hold across the close
    assert passes.count == 0  # no pass started: nothing for the workers to make with the old settings
    loader.dataset.mosaic = False
    loader.dataset.close_mosaic(hyp=SimpleNamespace(mosaic=1.0))
    loader.reset()
    assert loader.dataset.mosaic_closed
    for b in [b for _, b in stale] + batches(loader):
        assert "ratio_pad" in b
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_close_mosaic_before_the_first_pass_drops_the_early_start(sample, workers, monkeypatch):
    """epochs <= close_mosaic closes at epoch 0, after the workers made the first pass's batches (with
    mosaic) at construction."""
    made = count_calls(monkeypatch, YoloDataset, "__getitems__")  # counted in the workers
    loader = create_loader(sample, settings("train", workers=workers, batch=4), split="train")
    if workers:  # each worker makes 2 batches ahead
        made.wait(min(len(loader), 2 * workers), timeout=120, what="batches of the early pass")
    loader.dataset.close_mosaic()
    loader.reset()
    assert all("ratio_pad" in b for b in batches(loader))
    loader.close()


# -- hyperparameters ---------------------------------------------------------------------------------
def test_ultralytics_arguments_map_onto_ours(caplog):
    cfg = dict(imgsz=320, mosaic=0.7, mixup=0.2, copy_paste=0.1, degrees=5, translate=0.2, scale=0.3, shear=1,
               perspective=0.0001, hsv_h=0.02, hsv_s=0.5, hsv_v=0.3, flipud=0.1, fliplr=0.4, close_mosaic=3,
               cache="disk", rect=True, single_cls=True, workers=3, seed=7, cutmix=0.5, bgr=0.2)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        s = loader_settings(cfg, "train", 16, 32)
    f = s.fields()
    assert f["hyp"] == AugmentConfig(hsv_h=0.02, hsv_s=0.5, hsv_v=0.3, degrees=5, translate=0.2, scale=0.3, shear=1,
                                     perspective=0.0001, flipud=0.1, fliplr=0.4, mosaic=0.7, mosaic9=0.0, mixup=0.2,
                                     copy_paste=0.1, cutmix=0.5, copy_paste_mode="flip", copy_paste_rule="ultralytics")
    assert loader_settings(dict(cfg, copy_paste_mode="mixup"), "train", 16, 32).fields()["hyp"].copy_paste_mode == "mixup"
    with pytest.raises(ValueError, match="copy_paste_mode"):
        loader_settings(dict(cfg, copy_paste_mode="paste"), "train", 16, 32)
    assert (s.img_size, s.batch_size, s.stride, s.augment, s.rect, f["pad"], s.shuffle) == (320, 16, 32, True, True, 0.0, True)
    assert (f["cache"], f["single_cls"], f["workers"], s.seed) == ("disk", True, 3, 7)
    assert s.linear_resize and s.scale_up and s.split_name == "train"  # the training preset
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "cutmix" not in warned and "bgr" in warned
    v = loader_settings(cfg, "val", 32, 32, workers=0)
    fv = v.fields()
    assert (v.augment, v.rect, fv["pad"], v.shuffle, fv["workers"], fv["hyp"]) == (False, True, 0.5, False, 0, AugmentConfig())
    # evaluation as Ultralytics' validator: linear resize, never enlarged, each image once under DDP
    assert (v.linear_resize, v.scale_up, v.sharded(2), v.sharded(1)) == (True, False, True, False)
    assert loader_settings({"rect": False}, "val", 8, 32, rect=False).rect is False
    assert [cache_mode(c) for c in (True, "ram", "True", "disk", False, None, "False")] == \
           ["ram", "ram", "ram", "disk", False, False, False]
    with pytest.raises(ValueError):
        cache_mode("gpu")


def test_class_balance_is_taken_out_of_ultralytics_overrides_and_reaches_the_train_loader_only():
    overrides = {"data": "x.yaml", "epochs": 1, "class_balance": 0.2}
    rest, own = take_own_args(overrides)
    assert rest == {"data": "x.yaml", "epochs": 1} and own == {"class_balance": 0.2}
    assert "class_balance" in overrides  # the caller's dict is left as it was
    assert take_own_args(None) == (None, {}) and take_own_args({"data": "x"}) == ({"data": "x"}, {})
    with pytest.raises(ValueError, match="class_balance must be"):
        take_own_args({"class_balance": 2})
    train = loader_settings({"rect": True}, "train", 8, 32, class_balance=0.2)
    assert train.index.balance_threshold == 0.2 and not train.rect  # rect off, as with image_weights
    assert loader_settings({}, "train", 8, 32).index.balance_threshold is None
    assert loader_settings({}, "val", 8, 32, class_balance=0.2).index.balance_threshold is None


def test_fraction_as_ultralytics_counts_it(sample):
    assert split_fraction(0.5, "train") == 0.5 and split_fraction(0.5, "val") == 1.0
    assert split_fraction([1.0, 0.25], "val") == 0.25 and split_fraction([0.3], "test") == 1.0
    assert split_fraction(1, "train") == 1.0 and isinstance(split_fraction(1, "train"), float)
    assert fraction_count(16, 0.5) == 8 and fraction_count(16, 3) == 3 and fraction_count(16, 0.001) == 1
    loader = create_loader(sample, settings("train", fraction=0.5), split="train")
    assert len(loader.dataset) == 8
    assert list(loader.dataset.im_files) == sorted(loader.dataset.im_files)[:8]
    # a COCO or VOC split is read whole: a part of it is refused with a message, not read as no images
    js = sample.parent / "a.json"
    js.write_text('{"images": [], "categories": []}')
    with pytest.raises(ValueError, match=r"fraction=0.5: .*a\.json names coco annotations"):
        create_loader(str(js), settings("train", fraction=0.5))


def test_docs_list_every_key():
    doc = (ROOT / "docs" / "ultralytics.md").read_text()  # the table of Ultralytics' arguments
    for key in list(MAPPING) + list(NO_EQUIVALENT):
        assert f"`{key}`" in doc, key


# -- labels ----------------------------------------------------------------------------------------------
def test_labels_are_dicts_over_the_store(sample):
    loader = create_loader(sample, settings("train"), split="train")
    ds = loader.dataset
    store = ds.store
    labels = ds.labels
    assert isinstance(labels, LabelDicts) and len(labels) == len(store) == 16
    for i, lb in enumerate(labels):
        ref = store.labels_of(i)
        assert lb["im_file"] == store.im_file(i) == ds.im_files[i]
        assert lb["shape"] == (int(store.shapes_hw[i, 0]), int(store.shapes_hw[i, 1]))
        assert lb["cls"].shape == (len(ref), 1) and lb["bboxes"].shape == (len(ref), 4)
        np.testing.assert_array_equal(lb["cls"][:, 0], ref[:, 0])
        np.testing.assert_array_equal(lb["bboxes"], ref[:, 1:])
        assert (lb["normalized"], lb["bbox_format"], lb["keypoints"]) == (True, "xywh", None)
        assert len(lb["segments"]) == len(store.segments_of(i))
    labels[0]["bboxes"][:] = 9  # a copy: the store is untouched
    assert float(store.labels_of(0)[:, 1:].max()) <= 1
    assert labels[-1]["im_file"] == store.im_file(15) and len(labels[2:5]) == 3
    with pytest.raises(IndexError):
        labels[16]


def test_shard_sampler_gives_each_image_once_in_whole_batches():
    for n, b, world in ((8, 4, 2), (10, 4, 2), (7, 4, 3), (3, 4, 2), (33, 8, 4)):
        parts = [list(ShardSampler(n, b, r, world)) for r in range(world)]
        assert sum(parts, []) == list(range(n))
        for p in parts:
            assert not p or p[0] % b == 0  # starts at a batch boundary: rect batches stay whole


# -- with Ultralytics --------------------------------------------------------------------------------
@pytest.fixture
def ultra(tmp_path_factory):
    """Ultralytics, offline, its settings in a temp folder (it reads both at import)."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_CONFIG_DIR", str(tmp_path_factory.mktemp("ultra_cfg")))
    return pytest.importorskip("ultralytics")


def boxes_only(labels: Path) -> None:
    """Polygon rows -> their bounding boxes.  Ultralytics leaves out, as corrupt, a label file that mixes
    polygon and box rows (5 of the sample's 8 val images); yolo_data keeps it."""
    for f in labels.glob("*.txt"):
        rows = []
        for line in f.read_text().splitlines():
            v = [float(x) for x in line.split()]
            if len(v) > 5:
                xy = np.array(v[1:]).reshape(-1, 2)
                (x0, y0), (x1, y1) = xy.min(0), xy.max(0)
                v = [v[0], (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0]
            rows.append(" ".join(f"{x:.6g}" for x in v))
        f.write_text("\n".join(rows) + "\n")


def test_validation_inputs_equal_ultralytics(sample, ultra):
    """The validator's metrics are a function of the images and labels it is fed: ours equal
    Ultralytics' own, item by item (pixels exactly; boxes to float32 rounding)."""
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset
    boxes_only(sample.parent / "sample" / "labels" / "val")
    cfg = get_cfg(overrides={"imgsz": 160, "rect": True, "batch": 4})
    data = check_det_dataset(str(sample))  # the sample yaml has no path: its own folder
    theirs = build_dataloader(build_yolo_dataset(cfg, data["val"], 4, data, mode="val", stride=32), 4, 0, shuffle=False)
    ours = create_loader(data["val"], loader_settings(cfg, "val", 4, 32, workers=0))

    def items(loader):
        out = {}
        for b in loader:
            for i, f in enumerate(b["im_file"]):
                k = b["batch_idx"] == i
                out[f] = (b["img"][i], b["cls"][k], b["bboxes"][k], tuple(b["ori_shape"][i]), b["ratio_pad"][i],
                          tuple(b["img"].shape[2:]))
        return out

    t, o = items(theirs), items(ours)
    assert set(t) == set(o) and len(t) == 8
    for f in t:
        assert torch.equal(t[f][0], o[f][0]), f
        assert torch.equal(t[f][1], o[f][1])
        torch.testing.assert_close(t[f][2], o[f][2], rtol=0, atol=1e-6, msg=lambda m: f"{f}\n{t[f][2]}\n{o[f][2]}\n{t[f][3]} {t[f][5]}")
        assert t[f][3] == o[f][3] and t[f][5] == o[f][5]
        assert tuple(t[f][4][1]) == tuple(o[f][4][1])
        np.testing.assert_allclose(t[f][4][0], o[f][4][0], rtol=1e-12)


def test_a_trainer_on_a_gpu_has_its_training_batches_made_there(ultra, monkeypatch):
    """The trainer's device decides: a CUDA trainer's training loader gets the device stage, its
    validation loader and a CPU trainer's loaders do not (no GPU needed: only the settings are made)."""
    from yolo_data.integrations import ultralytics as plugin
    from yolo_data.settings import Settings
    monkeypatch.setattr(plugin, "loader_settings",
                        lambda cfg, mode, *a, **k: Settings.training() if mode == "train" else Settings.evaluation())
    monkeypatch.setattr(plugin, "unwrap_model", lambda model: SimpleNamespace(stride=torch.tensor([8.0, 16.0, 32.0])))
    trainer = SimpleNamespace(args=None, model=None, requested_workers=0, data={}, class_balance=False,
                              remap_classes=False, endpoint_url=None, device=torch.device("cuda", 1))
    settings = plugin.YoloDataTrainer._settings
    assert settings(trainer, "train", 16).loader.device == "cuda:1"
    assert settings(trainer, "val", 16).loader.device is None
    trainer.device = torch.device("cpu")
    assert settings(trainer, "train", 16).loader.device is None


def test_trainer_runs_an_epoch_with_0_and_2_workers(sample, ultra, tmp_path):
    from ultralytics import YOLO
    from yolo_data.integrations.ultralytics import YoloDataTrainer, YoloDataValidator
    data = sample
    seen = {}
    for workers in (0, 2):
        model = YOLO("yolo11n.yaml")

        def remember(trainer):
            seen[workers] = (type(trainer.train_loader), type(trainer.validator), trainer.train_loader.num_workers,
                             trainer.train_loader.dataset.mosaic_closed)
        model.add_callback("on_train_end", remember)
        model.train(data=str(data), trainer=YoloDataTrainer, epochs=1, imgsz=64, batch=8, workers=workers,
                    device="cpu", plots=False, amp=False, val=True, project=str(tmp_path / "runs"),
                    name=f"w{workers}", exist_ok=True, verbose=False)
        assert (tmp_path / "runs" / f"w{workers}" / "weights" / "last.pt").exists()
        # epochs=1 <= close_mosaic: closed at epoch 0, after the workers' early start
        assert seen[workers] == (UltralyticsLoader, YoloDataValidator, workers, True)


def test_checkpoints_record_the_data_and_the_report_compares_it(sample, ultra, tmp_path, capsys):
    """last.pt and best.pt of a YoloDataTrainer run hold each split's digest, as the loaders have it (the
    train loader's state_dict); the report says "same data" for it, "changed" after a label edit (exit 1
    with --fail-on data-changed), and "no record" for a checkpoint of Ultralytics' own trainer."""
    from ultralytics import YOLO
    from yolo_data.cli import main as cli_main
    from yolo_data.integrations.ultralytics import YoloDataTrainer
    from yolo_data.report.checkpoint import read_record
    seen = {}

    def remember(trainer):
        seen.update(train=trainer.train_loader.state_dict()["dataset"],
                    val=trainer.test_loader.dataset.split_labels.store.names_digest())
    runs = {}
    for name, trainer in (("ours", YoloDataTrainer), ("theirs", None)):
        model = YOLO("yolo11n.yaml")
        if trainer is not None:
            model.add_callback("on_train_end", remember)
        model.train(data=str(sample), trainer=trainer, epochs=1, imgsz=64, batch=8, workers=0, device="cpu",
                    plots=False, amp=False, val=True, project=str(tmp_path / "runs"), name=name, exist_ok=True,
                    verbose=False)
        runs[name] = tmp_path / "runs" / name / "weights"
    for f in ("last.pt", "best.pt"):
        record = read_record(runs["ours"] / f)
        assert record["splits"] == {"train": {"digest": seen["train"], "images": 16},
                                    "val": {"digest": seen["val"], "images": 8}}, f
        assert record["data"] == str(sample)
    assert read_record(runs["theirs"] / "best.pt") is None

    def report(checkpoint):
        code = cli_main(["report", str(sample), "--out", str(tmp_path / "r"), "--no-pictures", "--no-duplicates",
                         "--checkpoint", str(checkpoint), "--fail-on", "data-changed"])
        return code, capsys.readouterr().out

    code, out = report(runs["ours"] / "best.pt")
    assert code == 0 and "  train: same data (16 images)\n  val: same data (8 images)" in out
    code, out = report(runs["theirs"] / "best.pt")
    assert code == 0 and "no record of its data" in out
    label = sample.parent / "sample" / "labels" / "val" / "val_001.txt"
    label.write_text(label.read_text() + "0 0.5 0.5 0.1 0.1\n")
    code, out = report(runs["ours"] / "best.pt")
    assert code == 1 and "  val: changed since that training (8 images then and now, other names or labels)" in out


# -- pose and oriented boxes ------------------------------------------------------------------------------
def _axis_xywhr(corners):
    """Pixel corners (N, 4, 2) of axis-aligned rectangles -> (N, 5) [x, y, w, h, 0] (an independent
    stand-in for Ultralytics' conversion, exact for rectangles without rotation)."""
    lo, hi = corners.min(1), corners.max(1)
    return np.concatenate([(lo + hi) / 2, hi - lo, np.zeros((len(corners), 1))], 1)


def test_pose_and_obb_batches_carry_keypoints_and_xywhr_snapped_like_the_boxes(tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from taskdata import obb_dataset, pose_dataset
    pose = pose_dataset(tmp_path / "pose", n=4)
    cfg = SimpleNamespace(imgsz=100, seed=0, task="pose")  # 100: odd paddings (half pixels)
    loader = create_loader(str(pose), loader_settings(cfg, "val", 4, 32, workers=0, data={"kpt_shape": [3, 2],
                                                                                          "flip_idx": [1, 0, 2]}),
                           split="train")
    assert loader.dataset.task.flip_idx == (1, 0, 2)
    b = next(iter(loader))
    assert b["keypoints"].shape == (len(b["cls"]), 3, 3) and b["keypoints"].dtype == torch.float32
    labels = loader.dataset.labels[0]
    assert labels["keypoints"].shape == (2, 3, 3)
    # each image's keypoints moved by the same whole-pixel offset as its boxes
    H, W = b["img"].shape[2:]
    halves = 0
    for i in range(len(b["im_file"])):
        rows = b["batch_idx"] == i
        item = loader.dataset[i]
        pad = item[3][1][1]
        left, top = whole_pixel_pad(pad)
        halves += (left, top) != tuple(pad)
        np.testing.assert_allclose(b["keypoints"][rows][..., 0], item[4]["keypoints"][..., 0] + (left - pad[0]) / W,
                                   atol=1e-6)
        np.testing.assert_allclose(b["keypoints"][rows][..., 1], item[4]["keypoints"][..., 1] + (top - pad[1]) / H,
                                   atol=1e-6)
        np.testing.assert_allclose(b["bboxes"][rows][:, 1], item[1][:, 3] + (top - pad[1]) / H, atol=1e-6)
    assert halves  # some image was padded by half a pixel, so the snap moved something

    obb = obb_dataset(tmp_path / "obb", n=2)
    cfg = SimpleNamespace(imgsz=128, seed=0, task="obb")
    loader = create_loader(str(obb), loader_settings(cfg, "val", 2, 32, workers=0), split="train",
                           to_xywhr=_axis_xywhr)
    b = next(iter(loader))
    item = loader.dataset[0]
    corners = item[4]["corners"].numpy()
    H, W = b["img"].shape[2:]
    rows = b["batch_idx"] == 0
    want = _axis_xywhr(corners * (W, H)) / (W, H, W, H, 1)
    pad = item[3][1][1]
    left, top = whole_pixel_pad(pad)
    want[:, 0] += (left - pad[0]) / W
    want[:, 1] += (top - pad[1]) / H
    assert b["bboxes"].shape == (len(b["cls"]), 5)
    np.testing.assert_allclose(b["bboxes"][rows].numpy(), want, atol=1e-6)


def test_semantic_masks_give_each_pixel_the_class_of_its_smallest_instance():
    from yolo_data.integrations.ultralytics_batch import semantic_masks
    # image 0: a big instance (class 3) under a small one (class 5); image 1: one instance (class 2);
    # image 2: none
    big, small, other = np.zeros((3, 4, 4), np.uint8)
    big[:, :3], small[1:3, 1:3] = 1, 1  # noqa (broadcast assignments)
    other[0, 0] = 1
    targets = torch.tensor([[0, 3, 0, 0, 0, 0], [0, 5, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0]], dtype=torch.float32)
    per_instance = torch.from_numpy(np.stack([big, small, other]))
    want = np.zeros((3, 4, 4), np.float32)
    want[0][big > 0] = 3
    want[0][small > 0] = 5
    want[1][other > 0] = 2
    np.testing.assert_array_equal(semantic_masks(per_instance, targets, 3, overlap=False).numpy(), want)
    overlap = torch.zeros((3, 4, 4), dtype=torch.uint8)  # rows in mask order: 1 = big, 2 = small (on top)
    overlap[0][torch.from_numpy(big > 0)] = 1
    overlap[0][torch.from_numpy(small > 0)] = 2
    overlap[1][torch.from_numpy(other > 0)] = 1
    np.testing.assert_array_equal(semantic_masks(overlap, targets, 3, overlap=True).numpy(), want)
