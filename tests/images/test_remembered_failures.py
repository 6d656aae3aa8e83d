"""An image that passes the scan but cannot be decoded when loaded is remembered beside the label
cache, and the next run leaves it out with the reason, until the file changes."""
import json
import logging
import multiprocessing as mp
import os
from pathlib import Path

import cv2
import pytest

from conftest import make_dataset, write_image
from procs import as_nobody, ended, shared_folder
from yolo_data.images import decode, failures
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.images.load import ImageDecodeError, ImageReadError, imread_bgr
from yolo_data.labels.split import load_split


def damage_png_pixels(path: Path) -> None:
    """Flip bytes inside the IDAT chunk: the header, size and IEND stay valid (the scan keeps it),
    the pixel data no longer decodes (libpng's CRC check fails in cv2.imread)."""
    data = bytearray(path.read_bytes())
    start = data.index(b"IDAT") + 4
    for k in range(start + 8, start + 40):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.fixture
def ds_with_bad_png(tmp_path):
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcd"] + [("e.png", (64, 48), "1 0.5 0.5 0.2 0.2\n")]
    yaml = make_dataset(tmp_path / "ds", items)
    bad = tmp_path / "ds" / "images" / "train" / "e.png"
    damage_png_pixels(bad)
    assert cv2.imread(str(bad)) is None
    return yaml, bad


def test_evaluation_failure_is_remembered_and_the_next_run_leaves_the_image_out(ds_with_bad_png, caplog):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    assert len(ds) == 5  # the scan reads headers: it cannot know
    i = [Path(f).name for f in ds.im_files].index("e.png")
    with pytest.raises(ImageReadError):
        ds[i]
    record = failures.record_file(ds.split_labels.cache_file)
    assert record.is_file() and "e.png" in record.read_text()
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        again = LoadImagesAndLabels(str(yaml), 64, split="train")
    assert len(again) == 4 and "e.png" not in [Path(f).name for f in again.im_files]
    assert any("e.png" in r.message and "could not be decoded when last loaded" in r.message for r in caplog.records)
    assert again.split_labels.counts["corrupt"] == 1 and again.split_labels.counts["boxes"] == 4
    assert [tuple(again[k][0].shape) for k in range(4)]  # the rest is used


def test_training_failure_is_remembered_too(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, 5, split="train", augment=True)
    for k in range(len(ds)):
        ds[k]  # mosaic partners include e.png sooner or later; training goes on around it
    assert "e.png" in failures.record_file(ds.split_labels.cache_file).read_text()
    assert len(LoadImagesAndLabels(str(yaml), 64, split="train")) == 4


def test_a_repaired_file_is_used_again(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    with pytest.raises(ImageReadError):
        ds[[Path(f).name for f in ds.im_files].index("e.png")]
    write_image(bad, 64, 48, seed=9)  # the user replaces it
    os.utime(bad, ns=(1, 10 ** 18))  # a new modification time for sure
    again = LoadImagesAndLabels(str(yaml), 64, split="train")
    assert len(again) == 5 and again[[Path(f).name for f in again.im_files].index("e.png")][0].shape[1:] == (64, 64)


def test_damaged_lines_of_the_record_are_skipped(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    failures.remember(ds.split_labels.cache_file, str(bad), "cannot be decoded")
    record = failures.record_file(ds.split_labels.cache_file)
    record.write_bytes(b"{not json\n\x00\xff\n" + record.read_bytes() + b'{"file": "half a li')
    assert list(failures.read(ds.split_labels.cache_file)[0]) == [str(bad)]


# -- whose record is trusted --------------------------------------------------------------------------
def _plant(path: str, text: str) -> str:
    with open(path, "x") as f:
        f.write(text)
    return "planted"


def entry(im_file: str, reason: str) -> str:
    st = os.stat(im_file)
    return json.dumps({"file": im_file, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "reason": reason}) + "\n"


def test_a_record_planted_by_another_user_is_ignored_and_never_added_to(tmp_path, caplog):
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcde"]
    with shared_folder() as (base, shared):
        images = str(base / "ds" / "images" / "train")
        make_dataset(base / "ds", items)
        first = load_split(images, cache_dir=shared)
        assert len(first.store) == 5 and first.cache_file.parent == shared
        victim = first.store.im_file(0)
        record = failures.record_file(first.cache_file)
        planted = entry(victim, "planted by another user")
        assert as_nobody(_plant, str(record), planted) == "planted"
        assert record.stat().st_uid != os.geteuid()
        with caplog.at_level(logging.WARNING, logger="yolo_data"):
            again = load_split(images, cache_dir=shared)
            load_split(images, cache_dir=shared)
        assert len(again.store) == 5 and victim in [again.store.im_file(i) for i in range(5)]  # the good image is kept
        warned = [r.message for r in caplog.records if str(record) in r.message]
        assert len(warned) == 1 and "owned by another user" in warned[0], warned
        failures.remember(first.cache_file, str(base / "ds" / "images" / "train" / "b.jpg"), "cannot be decoded")
        assert record.read_text() == planted  # nothing of ours goes into a file we do not trust


def test_our_own_record_in_a_shared_folder_is_trusted_and_never_writable_by_others(tmp_path):
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcde"]
    with shared_folder() as (base, shared):
        images = str(base / "ds" / "images" / "train")
        make_dataset(base / "ds", items)
        s = load_split(images, cache_dir=shared)
        old = os.umask(0)  # even a user whose umask lets everyone write
        try:
            failures.remember(s.cache_file, s.store.im_file(1), "cannot be decoded")
        finally:
            os.umask(old)
        record = failures.record_file(s.cache_file)
        assert not record.stat().st_mode & 0o002
        again = load_split(images, cache_dir=shared)
        assert len(again.store) == 4 and s.store.im_file(1) not in [again.store.im_file(i) for i in range(4)]


# -- one line per broken file, the whole record read ----------------------------------------------------
def _every_item(ds) -> int:
    for k in range(len(ds)):
        ds[k]
    return len(ds)


def test_a_broken_image_is_recorded_once_whatever_the_workers_and_epochs(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, 5, split="train", augment=True)
    ctx = mp.get_context("fork")
    for _ in range(2):  # workers of two epochs, each a fresh fork that remembers nothing of the others
        p = ctx.Process(target=_every_item, args=(ds,))
        with ended([p]):  # killed and reaped if it is still running after the join's timeout
            p.start()
            p.join(120)
        assert p.exitcode == 0, f"a forked epoch ended with {p.exitcode} (-9: killed, still running after 120 s)"
    for _ in range(2):  # and two epochs in this process
        _every_item(ds)
    lines = failures.record_file(ds.split_labels.cache_file).read_text().splitlines()
    assert len(lines) == 1 and "e.png" in lines[0], lines


def test_the_whole_record_is_read(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    record = failures.record_file(ds.split_labels.cache_file)
    gone = str(bad.parent / "gone.png")
    with open(record, "w") as f:  # 6 MiB of failures of files since deleted, then one that counts
        for k in range(60_000):
            f.write(json.dumps({"file": f"{gone}.{k}", "size": 1000, "mtime_ns": k, "reason": "x" * 40}) + "\n")
    assert record.stat().st_size > 6 * 2**20
    failures.remember(ds.split_labels.cache_file, str(bad), "cannot be decoded")
    again = LoadImagesAndLabels(str(yaml), 64, split="train")
    assert len(again) == 4 and str(bad) not in again.im_files


def test_an_absurdly_large_record_is_read_up_to_a_bound_with_a_warning(ds_with_bad_png, monkeypatch, caplog):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    failures.remember(ds.split_labels.cache_file, str(bad), "cannot be decoded")
    record = failures.record_file(ds.split_labels.cache_file)
    with open(record, "a") as f:
        f.write("\n" * 10_000)
    monkeypatch.setattr(failures, "MAX_BYTES", 4096)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        assert list(failures.read(ds.split_labels.cache_file)[0]) == [str(bad)]
    warned = [r.message for r in caplog.records if str(record) in r.message]
    assert len(warned) == 1 and "far more than a record of failures needs" in warned[0], warned


def test_other_ranks_read_only_what_local_rank_0_read(ds_with_bad_png, tmp_path):
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    cache_file = ds.split_labels.cache_file
    failures.remember(cache_file, str(bad), "cannot be decoded")
    on_rank_0, nbytes = failures.read(cache_file)
    assert list(on_rank_0) == [str(bad)] and nbytes == failures.record_file(cache_file).stat().st_size
    other = bad.parent / "a.jpg"
    failures.remember(cache_file, str(other), "cannot be decoded")  # a worker of rank 0, meanwhile
    assert failures.read(cache_file, upto=nbytes)[0] == on_rank_0
    assert failures.read(cache_file, upto=0) == ({}, 0)
    assert set(failures.read(cache_file)[0]) == {str(bad), str(other)}


# -- what is remembered: bytes read whole that do not decode, not a read that failed ----------------------
def damage_jpeg_huffman_table(path: Path) -> None:
    """Make the first Huffman table impossible: Pillow still reads the header and the end marker is
    there (the scan keeps the file), libjpeg refuses the data (cv2.imread says None)."""
    data = bytearray(path.read_bytes())
    dht = data.index(b"\xff\xc4")
    data[dht + 5:dht + 21] = b"\xff" * 16  # 16 counts of codes per length, far more than any table holds
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("with_simplejpeg", [True, False])
def test_a_damaged_jpeg_that_passes_the_scan_is_remembered(tmp_path, monkeypatch, with_simplejpeg):
    if with_simplejpeg:
        pytest.importorskip("simplejpeg", reason="the [dev] extra installs simplejpeg")
    else:
        monkeypatch.setattr(decode, "_simplejpeg", None)
    yaml = make_dataset(tmp_path / "ds", [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcde"])
    bad = tmp_path / "ds" / "images" / "train" / "c.jpg"
    damage_jpeg_huffman_table(bad)
    assert cv2.imread(str(bad)) is None
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    assert len(ds) == 5  # the scan reads headers: it cannot know
    with pytest.raises(ImageDecodeError, match="c.jpg"):
        ds[[Path(f).name for f in ds.im_files].index("c.jpg")]
    again = LoadImagesAndLabels(str(yaml), 64, split="train")
    assert len(again) == 4 and str(bad) not in again.im_files


def _unreadable_for_a_moment(yaml: str, image: str) -> dict:
    """As the dataset's owner: take the read permission of one image away, load every item for
    evaluation and for training, give the permission back, and start again."""
    out = {}
    ds = LoadImagesAndLabels(yaml, 64, split="train")
    train = LoadImagesAndLabels(yaml, 64, 5, split="train", augment=True)
    os.chmod(image, 0)
    try:
        ds[list(ds.im_files).index(image)]
    except ImageReadError as e:
        out["eval"] = (type(e).__name__, str(e))
    out["train"] = [tuple(train[k][0].shape) for k in range(len(train))]  # goes on around it
    record = failures.record_file(ds.split_labels.cache_file)
    out["record"] = record.read_text() if record.exists() else ""
    os.chmod(image, 0o644)
    out["again"] = len(LoadImagesAndLabels(yaml, 64, split="train"))
    return out


def test_an_image_that_cannot_be_read_for_a_moment_is_not_remembered():
    """EACCES (a chmod), like EIO on a file server or EMFILE, says nothing about the image: that run
    goes on as it always did, and the next one uses the image again."""
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcde"]
    with shared_folder() as (base, _):
        yaml = make_dataset(base / "ds", items)
        for p in [base / "ds", *(base / "ds").rglob("*")]:
            os.chown(p, 65534, 65534)  # nobody's dataset: root would read the file whatever its mode
        image = str(base / "ds" / "images" / "train" / "b.jpg")
        out = as_nobody(_unreadable_for_a_moment, str(yaml), image)
    assert isinstance(out, dict), out
    kind, message = out["eval"]
    assert kind == "ImageReadError" and image in message and "Permission denied" in message
    assert len(out["train"]) == 5
    assert "b.jpg" not in out["record"] and out["again"] == 5


def test_a_folder_where_an_image_was_is_a_read_error_not_a_decode_error(tmp_path):
    folder = tmp_path / "a.jpg"
    folder.mkdir()
    with pytest.raises(ImageReadError, match="a.jpg.*cannot be read") as e:
        imread_bgr(str(folder))
    assert not isinstance(e.value, ImageDecodeError)


def test_the_version_that_failed_is_remembered_not_the_file_as_it_is_now(ds_with_bad_png):
    """A file rewritten between the failed decode and the note is not left out for its old bytes."""
    yaml, bad = ds_with_bad_png
    ds = LoadImagesAndLabels(str(yaml), 64, split="train")
    st = bad.stat()
    failures.remember(ds.split_labels.cache_file, str(bad), "cannot be decoded", (st.st_size, st.st_mtime_ns - 1))
    assert failures.read(ds.split_labels.cache_file)[0] == {}
    failures.remember(ds.split_labels.cache_file, str(bad), "cannot be decoded", (st.st_size, st.st_mtime_ns))
    assert list(failures.read(ds.split_labels.cache_file)[0]) == [str(bad)]
