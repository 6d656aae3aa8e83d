"""In-memory sources (formats/memory.py): the bundled sample's images and labels held in memory, as encoded
bytes and as decoded arrays, give the batches of the same data as YOLO .txt files on disk: evaluation bit
for bit, training with the same seed (mosaic on, 0 and 2 workers), the RAM image cache, class balance,
resume and DDP; a 1-channel source; a source that gives the wrong thing is named with what was wrong.
"""
import json
import logging
import os
import pickle
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

import conftest
from procs import init, run
from yolo_data import ItemSource, MemorySource, create_dataloader
from yolo_data.build import build_loader
from yolo_data.formats.yolotxt import YoloReader
from yolo_data.settings import Settings

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
NAMES = ["circle", "rectangle", "triangle"]


@pytest.fixture(scope="module")
def on_disk(tmp_path_factory) -> Path:
    """The sample's train split copied into a temp folder (its label cache is written there)."""
    root = tmp_path_factory.mktemp("sample")
    shutil.copytree(SAMPLE / "images" / "train", root / "images" / "train")
    shutil.copytree(SAMPLE / "labels" / "train", root / "labels" / "train")
    return root / "images" / "train"


@pytest.fixture(scope="module")
def as_png(on_disk, tmp_path_factory) -> Path:
    """The same split with each JPEG decoded and written as PNG: the files a source of decoded arrays
    equals (training decodes a large JPEG file at a reduced scale, which decoded pixels cannot be)."""
    root = tmp_path_factory.mktemp("sample_png")
    shutil.copytree(on_disk.parents[1] / "labels", root / "labels")
    (root / "images" / "train").mkdir(parents=True)
    for p in on_disk.iterdir():
        cv2.imwrite(str(root / "images" / "train" / (p.stem + ".png")), cv2.imread(str(p)))
    return root / "images" / "train"


def held(images: Path, arrays: bool = False, flags: int = cv2.IMREAD_COLOR, **kw) -> MemorySource:
    """The split of ``images`` in memory: each image's bytes (or its decoded array) and its labels and
    polygons as the YOLO reader reads its .txt file (no label file: an empty (0, 5) array)."""
    pixels, labels = [], []
    for p in sorted(images.iterdir()):
        data = p.read_bytes()
        im = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
        lb = images.parents[1] / "labels" / images.name / (p.stem + ".txt")
        rows, segments = YoloReader(len(NAMES)).read(str(lb), im.shape[:2])[:2]
        labels.append(rows if segments is None else (rows, segments))  # the triangles' rows are polygons
        pixels.append(im if arrays else data)
    return MemorySource(pixels, labels, NAMES, **kw)


def batches(path, workers=0, epochs=1, **kw):
    loader, ds = create_dataloader(path, 64, 4, 32, workers=workers, **kw)
    return [[(imgs, targets) for imgs, targets, _, _ in loader] for _ in range(epochs)], ds


def same(a, b):
    assert len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b))
    for ea, eb in zip(a, b):
        for (ia, ta), (ib, tb) in zip(ea, eb):
            assert ia.dtype == ib.dtype == torch.uint8 and torch.equal(ia, ib)
            assert torch.equal(ta, tb)


@pytest.mark.parametrize("arrays", [False, True], ids=["bytes", "arrays"])
def test_evaluation_batches_equal_those_of_the_same_files_bit_for_bit(on_disk, arrays, caplog):
    src = held(on_disk, arrays)
    assert isinstance(src, ItemSource)
    with caplog.at_level(logging.INFO, logger="yolo_data"):
        got, ds = batches(src)
    assert "kept in memory: the source has no fingerprint)" in caplog.text
    want, files = batches(str(on_disk))
    same(got, want)
    assert ds.split_labels.kind == "memory" and ds.split_labels.cache_file is None  # no fingerprint: not on disk
    assert ds.im_files[0] == f"{ds.path}/00.{'png' if arrays else 'jpg'}" and ds.path.startswith("memory://")
    assert ds.split_labels.counts["boxes"] == files.split_labels.counts["boxes"] == 44


@pytest.mark.parametrize("arrays", [False, True], ids=["bytes", "arrays"])
def test_training_batches_with_mosaic_equal_those_of_the_files_with_0_and_2_workers(on_disk, as_png, arrays):
    kw = dict(augment=True, shuffle=True, seed=7, epochs=2)
    files = as_png if arrays else on_disk
    want, _ = batches(str(files), **kw)
    for workers in (0, 2):
        got, ds = batches(held(files, arrays), workers=workers, **kw)
        assert ds.mosaic
        same(got, want)


def test_a_ram_image_cache_and_class_balance_work_on_a_source(as_png):
    kw = dict(augment=True, shuffle=True, seed=5, class_balance=0.5, epochs=2)
    want, files = batches(str(as_png), **kw)
    got, ds = batches(held(as_png, arrays=True), cache="ram", workers=2, **kw)
    assert ds.images.cache is not None and ds.images.cache.ok.all()
    same(got, want)
    assert files.__len__() == ds.__len__()


def test_resume_gives_the_remaining_batches(on_disk):
    def make(workers=0):
        return create_dataloader(held(on_disk), 64, 4, 32, augment=True, shuffle=True, seed=2, workers=workers)[0]

    def steps(loader):  # each source is its own id: its items compared by index
        return [([f.rpartition("/")[2] for f in p], i.sum().item()) for i, _, p, _ in loader]

    ref = steps(make())
    loader = make()
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    resumed = make(workers=2)
    resumed.load_state_dict(state)
    assert steps(resumed) == ref[1:]


def test_a_fingerprint_keeps_the_label_cache_and_the_disk_image_cache(on_disk, user_cache_dir):
    first, ds = batches(held(on_disk, fingerprint="sample v1"), cache="disk")
    assert ds.split_labels.built and ds.split_labels.cache_file.is_relative_to(user_cache_dir)
    again, ds = batches(held(on_disk, fingerprint="sample v1"), cache="disk")
    assert not ds.split_labels.built  # found again in a later run (the same id: the fingerprint's)
    same(first, again)
    _, ds = batches(held(on_disk, fingerprint="sample v2"))
    assert ds.split_labels.built  # another fingerprint: scanned anew
    with pytest.raises(ValueError, match="without a fingerprint.*cache='ram'"):
        batches(held(on_disk), cache="disk")


def test_a_one_channel_source_gives_the_batches_of_its_grayscale_files(on_disk, tmp_path):
    gray = tmp_path / "images" / "train"
    gray.mkdir(parents=True)
    shutil.copytree(on_disk.parents[1] / "labels", tmp_path / "labels")
    for p in on_disk.iterdir():
        cv2.imwrite(str(gray / (p.stem + ".png")), cv2.imread(str(p), cv2.IMREAD_GRAYSCALE))
    src = held(gray, arrays=True, flags=cv2.IMREAD_GRAYSCALE)
    assert src.image(0).ndim == 2
    got, _ = batches(src, channels=1, augment=True, shuffle=True, seed=1)
    want, _ = batches(str(gray), channels=1, augment=True, shuffle=True, seed=1)
    assert got[0][0][0].shape[1] == 1
    same(got, want)


def test_a_source_giving_the_wrong_thing_is_named_with_what_was_wrong(on_disk, caplog):
    src = held(on_disk, arrays=True)
    src.images[1] = src.images[1].astype(np.float32)
    src._labels[2] = np.zeros((1, 5), np.float64)
    src._shapes = [src.shape(i) for i in range(len(src))]
    src._shapes[3] = (7, 9)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        _, ds = batches(src)
    assert "the full list: the dataset's split_labels.problems" in caplog.text  # no command reads it
    found = {p.file.rpartition("/")[2].split(" ")[0]: p.reason for p in ds.split_labels.problems}
    assert "(h, w) or (h, w, C) uint8 or uint16" in found["01.png"] and "float32" in found["01.png"]
    assert found["01.png"].startswith("cannot read image header (item 1 of MemorySource")
    assert "item 1 of MemorySource" in found["01.png"]
    assert "(n, 5) float32" in found["02.png"] and "float64" in found["02.png"]
    assert "shape(3) is (7, 9)" in found["03.png"]
    assert len(ds) == len(src) - 3


def test_a_spawned_worker_gets_a_picklable_source_and_a_clear_refusal_of_another(on_disk):
    loader, ds = create_dataloader(held(on_disk), 64, 4, 32, workers=0)
    backend = ds.images.storage.backend_for(ds.im_files[0])
    copy = pickle.loads(pickle.dumps(backend))  # what a spawned worker gets with the dataset's storage
    assert copy.read(ds.im_files[0]) == backend.read(ds.im_files[0])
    backend.sources["x"] = lambda: None
    with pytest.raises(TypeError, match=r"cannot be pickled into a spawned DataLoader worker.*'fork'"):
        pickle.dumps(backend)


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


def _rank_worker(rank, world, port, images, out_dir):
    init(rank, world, port)
    warned = Warnings()
    logging.getLogger("yolo_data").addHandler(warned)
    try:
        settings = Settings.training(img_size=64, batch_size=2, stride=32, seed=4, workers=0)
        loader = build_loader(held(Path(images)), settings, rank=rank)
        steps = [list(p) for _, _, p, _ in loader]
        Path(out_dir, f"{rank}.json").write_text(json.dumps({"steps": steps, "warnings": warned.seen}))
    finally:
        import torch.distributed as dist
        dist.destroy_process_group()


def test_two_ranks_get_disjoint_shares_of_the_same_global_order(on_disk, tmp_path):
    settings = Settings.training(img_size=64, batch_size=4, stride=32, seed=4, workers=0)
    want = [list(p) for _, _, p, _ in build_loader(held(on_disk), settings)]
    run(_rank_worker, 2, str(on_disk), str(tmp_path))
    got = [json.loads(Path(tmp_path, f"{r}.json").read_text()) for r in range(2)]
    assert not [w for g in got for w in g["warnings"] if "scans the files itself" in w]  # each rank reads its own
    ranks = [g["steps"] for g in got]
    assert len(ranks[0]) == len(ranks[1]) == len(want)
    ids = {f.rpartition("/")[0] for r in ranks for step in r for f in step}
    assert len(ids) == 1  # the ranks name the source alike (then a label cache's key, a store's, agree)

    def items(paths):
        return [f.rpartition("/")[2] for f in paths]

    for p0, p1, w in zip(ranks[0], ranks[1], want):
        assert items(p0) + items(p1) == items(w) and not set(p0) & set(p1)


def test_the_ultralytics_data_string_names_both_sources_and_their_names(on_disk):
    from yolo_data.integrations.ultralytics_args import memory_data, remote_dataset
    train, val = held(on_disk), held(on_disk)
    data = memory_data(train, val, channels=3)
    assert data.startswith("memory://") and "?val=" in data
    got = remote_dataset(data)
    assert got["names"] == dict(enumerate(NAMES)) and got["nc"] == 3 and got["channels"] == 3
    assert (got["train"], got["val"]) == (f"memory://{data.split('//')[1].split('?')[0]}", entry_of_val(data))
    del train, val  # Ultralytics keeps only the string: the sources stay named by it
    loader, ds = create_dataloader(got["val"], 64, 4, 32, workers=0)
    assert len(ds) == 16
    with pytest.raises(TypeError, match="in-memory sources"):
        memory_data(str(on_disk))


def entry_of_val(data: str) -> str:
    return "memory://" + data.partition("?val=")[2].partition("&")[0]


def test_a_fraction_of_a_source_is_its_first_items(on_disk):
    settings = Settings.evaluation(img_size=64, batch_size=4, stride=32, workers=0, fraction=0.25)
    ds = build_loader(held(on_disk), settings).dataset
    assert [f.rpartition("/")[2] for f in ds.im_files] == ["00.jpg", "01.jpg", "02.jpg", "03.jpg"]


def test_the_dataset_report_takes_a_source(on_disk, tmp_path):
    from yolo_data.report.compose import ReportOptions, make_report
    got = make_report(held(on_disk), ReportOptions(workers=1))
    want = make_report(str(on_disk), ReportOptions(workers=1))
    (split,) = got.figures["splits"].values()
    (files,) = want.figures["splits"].values()
    assert got.figures["names"] == NAMES and got.figures["data"].startswith("memory://")
    assert split["classes"] == files["classes"] and split["images"] == files["images"]
    dup, dup_files = (dict(r.figures["duplicates"], seconds=None) for r in (got, want))
    assert dup == dup_files and dup["checked"] and "batch0" in got.pictures


# the datasets beside the project (as conftest finds them), or where YOLO_DATA_BENCH_DATA says (a worktree)
SHARED = Path(os.environ.get("YOLO_DATA_BENCH_DATA") or conftest.SHARED)


@pytest.mark.parametrize("name, task, kpt_shape", [("coco128-seg", "segment", None), ("tiger-pose", "pose", (12, 2)),
                                                     ("pen-obb", "obb", None)])
def test_segment_pose_and_obb_sources_give_the_batches_of_their_files(tmp_path, name, task, kpt_shape):
    """12 images of a shared dataset, copied with their labels; the source holds each image's bytes and the
    rows, polygons and keypoints the YOLO reader reads for the task."""
    top = SHARED / name
    if not top.is_dir():
        pytest.skip(f"{top} is not here")
    split = sorted(p for p in (top / "images").iterdir() if p.is_dir())[0].name
    images, labels = tmp_path / "images" / split, tmp_path / "labels" / split
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    pixels, rows = [], []
    reader = YoloReader(None, task, kpt_shape)
    for p in sorted((top / "images" / split).iterdir())[:12]:
        shutil.copy(p, images / p.name)
        lb = top / "labels" / split / (p.stem + ".txt")
        if lb.exists():
            shutil.copy(lb, labels / lb.name)
        data = p.read_bytes()
        shape = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
        got = reader.read(str(labels / lb.name), shape)
        pixels.append(data)
        rows.append((got[0], got[1], got[4]) if task == "pose" else (got[0], got[1]))
    names = [str(i) for i in range(80)]
    for augment in (False, True):
        settings = (Settings.training if augment else Settings.evaluation)(
            img_size=64, batch_size=4, stride=32, workers=0, seed=3, task=task, kpt_shape=kpt_shape, names=names)
        files, held_ = build_loader(str(images), settings), build_loader(MemorySource(pixels, rows, names), settings)
        want, got = list(files), list(held_)
        assert len(got) == len(want) == 3
        for a, b in zip(got, want):
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), (task, augment)  # images, targets
        for x, y in zip(held_.dataset.segments, files.dataset.segments):  # the polygons (of masks, of corners)
            assert len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))
        if task == "pose":
            assert all(np.array_equal(x, y) for x, y in zip(held_.dataset.keypoints, files.dataset.keypoints))
            assert sum(len(k) for k in held_.dataset.keypoints) > 0


class Squares:
    """A synthetic ItemSource of its own (no MemorySource): item i is a 48 x 64 BGR image made on request,
    a square of class i % 2 at a place drawn from i."""
    names = ["red", "blue"]

    def __len__(self):
        return 10

    def shape(self, i):
        return (48, 64)

    def _box(self, i):
        x, y = 4 + 5 * i % 40, 4 + 3 * i % 24
        return x, y, x + 16, y + 16

    def image(self, i):
        im = np.full((48, 64, 3), 20 * i, np.uint8)
        x1, y1, x2, y2 = self._box(i)
        im[y1:y2, x1:x2] = (0, 0, 255) if i % 2 == 0 else (255, 0, 0)
        return im

    def labels(self, i):
        x1, y1, x2, y2 = self._box(i)
        return np.array([[i % 2, (x1 + x2) / 128, (y1 + y2) / 96, 16 / 64, 16 / 48]], np.float32)


def test_a_source_of_its_own_making_its_items_on_request_trains_alike_on_0_and_2_workers():
    src = Squares()
    assert isinstance(src, ItemSource) and not hasattr(src, "fingerprint")
    kw = dict(augment=True, shuffle=True, seed=9, epochs=2)
    want, ds = batches(src, **kw)
    got, _ = batches(src, workers=2, **kw)
    same(got, want)
    assert ds.names == ["red", "blue"] and len(ds) == 10 and ds.split_labels.counts["boxes"] == 10
