"""The device stage against the CPU path: the same seed gives the same targets (boxes, masks, keypoints,
corners) and pixels within interpolation rounding, on any number of workers, after a resume, for every
kind of item the training pipeline makes.  Run on the CPU here (torch ops, torchvision's CPU decoder)
and on every CUDA device a run has."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import yaml

from conftest import SHARED, copy_shared, make_dataset
from yolo_data.build import build_loader
from yolo_data.device.decode import decoded
from yolo_data.device.plan import BatchPlan, ItemPlan
from yolo_data.device.stage import DeviceStage
from yolo_data.images.load import EncodedImage, ImageSource
from yolo_data.settings import Settings

REPO = Path(__file__).resolve().parents[2]
HYP = yaml.safe_load((REPO / "data/hyps/hyp.scratch-low.yaml").read_text())
DEVICES = ["cpu"] + [f"cuda:{k}" for k in range(torch.cuda.device_count())]
#: the bound docs/device.md states: per image, the mean absolute difference from the CPU path's pixels
MAD_BOUND = 3.0


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The bundled sample and copies of the shared datasets this module uses, made once."""
    tmp = tmp_path_factory.mktemp("device")
    out = {"sample": tmp / "sample.yaml"}
    shutil.copytree(REPO / "data/sample", tmp / "sample")
    shutil.copy(REPO / "data/sample.yaml", out["sample"])
    if SHARED.is_dir():
        for name in ("coco128", "coco128-seg", "tiger-pose", "pen-obb"):
            out[name] = copy_shared(name, tmp)
    return out


def data_of(datasets, name: str, or_sample: bool = False):
    """The dataset ``name`` (a copy of ../shared's); without ../shared the bundled sample where
    ``or_sample`` (a GPU machine gets no ../shared), else the test is skipped."""
    if name not in datasets:
        if or_sample:
            return str(datasets["sample"])
        pytest.skip(f"{SHARED / name} is not available (a clone without ../shared)")
    path = datasets[name]
    if name == "coco128":
        return str(path / "images/train2017")
    yamls = sorted(path.glob("*.yaml"))
    return str(yamls[0]) if yamls else str(path)


def batches(data, device, n=3, workers=0, state=None, **fields):
    """The first ``n`` batches of a training loader of ``data`` (``device``: None for the CPU path)."""
    hyp = {**HYP, **fields.pop("hyp", {})}
    settings = Settings.training(img_size=fields.pop("img_size", 320), batch_size=fields.pop("batch_size", 8),
                                 workers=workers, seed=7, hyp=hyp, device=device, **fields)
    loader = build_loader(data, settings)
    if state is not None:
        loader.load_state_dict(state)
    out = []
    for k, batch in enumerate(loader):
        out.append(batch)
        if k + 1 == n:
            break
    return out, loader


def assert_same_batches(cpu, dev, device):
    for a, b in zip(cpu, dev, strict=True):
        assert b[0].device == torch.device(device) and b[0].dtype == torch.uint8
        assert a[0].shape == b[0].shape
        assert b[1].device == torch.device(device)
        assert torch.equal(a[1], b[1].cpu()), "targets differ from the CPU path's"
        assert a[2] == b[2] and a[3] == b[3]
        for x, y in zip(a[4:], b[4:]):  # per-object extras, masks
            if isinstance(x, dict):
                assert x.keys() == y.keys() and all(torch.equal(x[k], y[k].cpu()) for k in x)
            else:
                assert torch.equal(x, y.cpu())
        mad = (a[0].int() - b[0].cpu().int()).abs().float().mean((1, 2, 3))
        assert mad.max() <= MAD_BOUND, f"pixels: mean absolute differences {mad.tolist()}"


HYPS = {
    "scratch-low": {},  # scale and translation: mosaic tiles resized straight into the output
    "rotate-shear-perspective-flipud": dict(degrees=10.0, shear=3.0, perspective=0.0005, flipud=0.5),
    "mosaic9-mixup": dict(mosaic9=0.5, mixup=0.5),
    "no-mosaic": dict(mosaic=0.0, degrees=5.0),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("hyp", HYPS)
def test_device_batches_are_the_cpu_paths(datasets, hyp, device):
    data = data_of(datasets, "coco128", or_sample=True)
    # 20 items: more than the stage makes at once (stage.CHUNK)
    cpu, _ = batches(data, None, n=2, batch_size=20, hyp=HYPS[hyp])
    dev, _ = batches(data, device, n=2, batch_size=20, hyp=HYPS[hyp])
    assert_same_batches(cpu, dev, device)


@pytest.mark.parametrize("device", DEVICES)
def test_rect_training_batches_are_the_cpu_paths(datasets, device):
    data = data_of(datasets, "coco128")
    cpu, _ = batches(data, None, rect=True, hyp=dict(degrees=3.0))
    dev, _ = batches(data, device, rect=True, hyp=dict(degrees=3.0))
    assert cpu[0][0].shape[2] != cpu[0][0].shape[3]  # rect: not square
    assert_same_batches(cpu, dev, device)


@pytest.mark.parametrize("name,task", [("coco128-seg", "segment"), ("tiger-pose", "pose"), ("pen-obb", "obb")])
def test_tasks_keep_their_targets(datasets, name, task):
    """Masks, keypoints and rotated corners are the CPU path's: they are labels, made in the workers."""
    data = data_of(datasets, name)
    cpu, _ = batches(data, None, n=2, task=task)
    dev, _ = batches(data, "cpu", n=2, task=task)
    assert len(cpu[0]) > 4  # the task's extras or masks are there to compare
    assert_same_batches(cpu, dev, "cpu")


def test_class_balance_draws_the_same_items(datasets):
    data = data_of(datasets, "coco128")
    cpu, _ = batches(data, None, n=2, class_balance=0.1)
    dev, _ = batches(data, "cpu", n=2, class_balance=0.1)
    assert_same_batches(cpu, dev, "cpu")


def test_copy_paste_items_are_made_by_the_workers(datasets):
    """Copy-paste needs the pixels: those items come as the CPU path makes them, exactly."""
    data = data_of(datasets, "coco128-seg")
    cpu, _ = batches(data, None, n=2, hyp=dict(copy_paste=0.5), task="segment")
    dev, _ = batches(data, "cpu", n=2, hyp=dict(copy_paste=0.5), task="segment")
    assert_same_batches(cpu, dev, "cpu")
    assert all(torch.equal(a[0], b[0]) for a, b in zip(cpu, dev))


def test_the_bundled_sample_and_any_number_of_workers(datasets):
    """The bundled sample (no ../shared needed): the same batches with 0 and 2 workers, pixels equal."""
    data = str(datasets["sample"])
    cpu, _ = batches(data, None, n=2, batch_size=4)
    one, _ = batches(data, "cpu", n=2, batch_size=4)
    two, _ = batches(data, "cpu", n=2, batch_size=4, workers=2)
    assert_same_batches(cpu, one, "cpu")
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2]


def test_resume_gives_the_saved_runs_next_batches(datasets):
    data = str(datasets["sample"])
    whole, _ = batches(data, "cpu", n=3, batch_size=4)
    _, loader = batches(data, "cpu", n=1, batch_size=4)
    state = loader.state_dict()
    resumed, _ = batches(data, "cpu", n=2, batch_size=4, state=state)
    for a, b in zip(whole[1:], resumed, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2]


def test_evaluation_batches_move_to_the_device_unchanged(datasets):
    data = str(datasets["sample"])
    settings = Settings.evaluation(img_size=320, batch_size=4, workers=0, rect=True, pad=0.5)
    cpu = next(iter(build_loader(data, settings)))
    dev = next(iter(build_loader(data, settings.replace(device="cpu"))))
    assert torch.equal(cpu[0], dev[0]) and torch.equal(cpu[1], dev[1]) and cpu[2:] == dev[2:]


def test_quad_with_a_device_is_refused(datasets):
    with pytest.raises(ValueError, match="quad=True .* device='cpu'"):
        build_loader(str(datasets["sample"]), Settings.training(batch_size=4, workers=0, quad=True, device="cpu"))


def test_large_jpegs_and_exif_orientation(tmp_path):
    """A JPEG the CPU path decodes at 1/4 scale, and one stored on its side (EXIF orientation 6): the
    device's pixels are the CPU path's within the bound, the right way up."""
    rng = np.random.default_rng(0)
    small = cv2.resize(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8), (2600, 1900), interpolation=cv2.INTER_CUBIC)
    images = tmp_path / "images"
    images.mkdir()
    cv2.imwrite(str(images / "big.jpg"), small, [cv2.IMWRITE_JPEG_QUALITY, 95])
    rotated = _with_orientation(cv2.imencode(".jpg", small[:400, :700])[1].tobytes(), 6)
    (images / "turned.jpg").write_bytes(rotated)
    for name in ("big", "turned"):
        (tmp_path / "labels").mkdir(exist_ok=True)
        (tmp_path / "labels" / f"{name}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    store = _store(images, tmp_path)
    source = ImageSource(store, 640, linear=True, reduced=True)
    for i in range(len(store)):
        enc = source.encoded(i)
        assert isinstance(enc, EncodedImage)
        cpu = source(i).img[:, :, ::-1].transpose(2, 0, 1).astype(np.float32)
        dev = (decoded({i: enc}, torch.device("cpu"))[i] + 114).round().numpy()
        assert dev.shape == cpu.shape
        assert np.abs(dev - cpu).mean() <= MAD_BOUND
    assert {source.encoded(i).factor for i in range(len(store))} == {1, 4}
    assert {source.encoded(i).orientation for i in range(len(store))} == {1, 6}


def test_a_jpeg_no_decoder_takes_becomes_pad_with_a_warning(caplog):
    bad = EncodedImage("/data/broken.jpg", np.frombuffer(b"\xff\xd8\xff\xe0 not a jpeg", np.uint8), 1, (20, 30),
                       (20, 30), 1, True)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        out = decoded({0: bad}, torch.device("cpu"))[0]
    assert out.shape == (3, 20, 30) and torch.all(out == 0)  # PAD_VALUE, held minus PAD_VALUE
    assert "/data/broken.jpg" in caplog.text


def test_a_batch_of_items_of_two_sizes_is_refused():
    a = ItemPlan(made=torch.zeros((3, 32, 32), dtype=torch.uint8))
    b = ItemPlan(made=torch.zeros((3, 32, 64), dtype=torch.uint8))
    with pytest.raises(ValueError, match="different sizes"):
        BatchPlan.join([a, b])
    out = DeviceStage("cpu")((BatchPlan.join([a, a]), torch.zeros((0, 6)), ("x", "y"), (None, None)))
    assert out[0].shape == (2, 3, 32, 32)


def _store(images: Path, root: Path):
    from yolo_data.labels.split import load_split
    return load_split(str(images), cache_dir=str(root / "cache")).store


def _with_orientation(jpeg: bytes, orientation: int) -> bytes:
    """``jpeg`` with an EXIF block (APP1) holding one orientation tag, right after its SOI marker."""
    import struct
    ifd = struct.pack("<HHHIHH", 1, 0x0112, 3, 1, orientation, 0) + struct.pack("<I", 0)
    tiff = b"II" + struct.pack("<HI", 42, 8) + ifd
    body = b"Exif\x00\x00" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body + jpeg[2:]


def test_yolov5s_create_dataloader_takes_the_device_as_a_keyword(datasets):
    from yolo_data import create_dataloader
    data = str(datasets["sample"])
    kw = dict(augment=True, hyp=str(REPO / "data/hyps/hyp.scratch-low.yaml"), workers=0, shuffle=True, seed=5)
    cpu_loader, _ = create_dataloader(data, 320, 4, 32, **kw)
    dev_loader, _ = create_dataloader(data, 320, 4, 32, device="cpu", **kw)
    assert dev_loader.device_stage is not None and cpu_loader.device_stage is None
    assert_same_batches([next(iter(cpu_loader))], [next(iter(dev_loader))], "cpu")


def test_ultralytics_batches_get_their_images_from_the_device_stage(datasets):
    """The plug-in's loader (its batches are Ultralytics' dicts, made in the workers): 'img' is made
    by the device stage, the other keys are the CPU path's, moved."""
    from yolo_data.integrations.ultralytics_loader import create_loader
    data = str(datasets["sample"])
    settings = Settings.training(img_size=320, batch_size=4, workers=0, seed=5, hyp=HYP)
    cpu = next(iter(create_loader(data, settings)))
    dev = next(iter(create_loader(data, settings.replace(device="cpu"))))
    assert cpu.keys() == dev.keys() and isinstance(dev["img"], torch.Tensor)
    assert dev["img"].shape == cpu["img"].shape
    assert (cpu["img"].int() - dev["img"].int()).abs().float().mean() <= MAD_BOUND
    for k in ("batch_idx", "cls", "bboxes"):
        assert torch.equal(cpu[k], dev[k])
    assert cpu["im_file"] == dev["im_file"]


@pytest.mark.parametrize("device", DEVICES)
def test_images_of_the_image_cache_are_read_where_the_stage_runs(datasets, tmp_path, device):
    """With an image cache the workers send each cached image's number, not its pixels: the stage
    reads them in its own view of the cache.  The batches are the CPU path's."""
    data = data_of(datasets, "coco128", or_sample=True)
    cache = dict(cache="disk", cache_dir=str(tmp_path))
    cpu, _ = batches(data, None, n=2, **cache)
    dev, loader = batches(data, device, n=2, **cache)
    assert loader.dataset.image_cache is not None and loader.device_stage.cache is loader.dataset.image_cache
    assert_same_batches(cpu, dev, device)


def test_an_item_on_its_own_has_its_pixels(datasets):
    """``dataset[i]`` of a loader with a device stage: the image is a uint8 (3, H, W) CPU tensor, the
    item as the device stage makes it in a batch."""
    data = str(datasets["sample"])
    settings = Settings.training(img_size=320, batch_size=4, workers=0, seed=5, hyp=HYP)
    cpu = build_loader(data, settings).dataset[0]
    dev = build_loader(data, settings.replace(device="cpu")).dataset[0]
    assert isinstance(dev[0], torch.Tensor) and dev[0].dtype == torch.uint8 and dev[0].shape == cpu[0].shape
    assert torch.equal(cpu[1], dev[1]) and cpu[2] == dev[2]
    assert (cpu[0].int() - dev[0].int()).abs().float().mean() <= MAD_BOUND


def test_other_formats_are_decoded_by_the_workers(tmp_path):
    """PNG (and JPEG mixed in): the workers decode what is not JPEG and send its pixels; the batches
    are the CPU path's."""
    items = [(f"{i:02d}.{'png' if i % 3 else 'jpg'}", (96 + 8 * i, 64 + 4 * i), "0 0.5 0.5 0.3 0.4\n1 0.3 0.3 0.2 0.2\n")
             for i in range(12)]
    data = str(make_dataset(tmp_path, items, names=("a", "b")))
    cpu, _ = batches(data, None, n=2, batch_size=4, img_size=96, cache_dir=str(tmp_path / "c"))
    dev, loader = batches(data, "cpu", n=2, batch_size=4, img_size=96, cache_dir=str(tmp_path / "c"))
    assert_same_batches(cpu, dev, "cpu")
    plan = loader.collate_fn(loader.dataset.__getitems__(list(range(4))))[0]
    kinds = {type(s).__name__ for s in plan.sources.values()}
    assert kinds == {"LoadedImage", "EncodedImage"}, kinds
