"""A FIFO or a device where a cache file (or the failure record) should be: never blocks, never
trusted, replaced by a real cache.  Each test runs under a hard time limit: a regression fails
instead of hanging the suite."""
import logging
import os

from conftest import hard_limit
from yolo_data.images import failures
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.labels.split import load_split


def test_fifo_as_label_cache(small_dataset, caplog):
    cache = small_dataset.parent / "labels" / "train.yolo_data.cache"
    os.mkfifo(cache)
    with hard_limit(20), caplog.at_level(logging.WARNING, logger="yolo_data"):
        s = load_split(str(small_dataset.parent / "images" / "train"), nc=3)
    assert s.built and len(s.store) == 6 and cache.is_file()
    assert any("not a regular file" in r.message and str(cache) in r.message for r in caplog.records)


def test_fifo_as_disk_image_cache(small_dataset, caplog):
    path = small_dataset.parent / "labels" / "train-images-64.imgcache"
    os.mkfifo(path)
    with hard_limit(20), caplog.at_level(logging.WARNING, logger="yolo_data"):
        ds = LoadImagesAndLabels(str(small_dataset), 64, split="train", cache_images="disk")
    assert ds.image_cache is not None and ds.image_cache.path == path and path.is_file()
    assert any("not a regular file" in r.message for r in caplog.records)


def test_device_as_label_cache(small_dataset, tmp_path, caplog):
    d = tmp_path / "caches"
    d.mkdir()
    first = load_split(str(small_dataset.parent / "images" / "train"), nc=3, cache_dir=d)
    first.cache_file.unlink()
    first.cache_file.symlink_to("/dev/zero")  # would be read forever, or mapped as zeros
    with hard_limit(20), caplog.at_level(logging.WARNING, logger="yolo_data"):
        s = load_split(str(small_dataset.parent / "images" / "train"), nc=3, cache_dir=d)
    assert s.built and len(s.store) == 6 and any("not a regular file" in r.message for r in caplog.records)


def test_fifo_as_failure_record(small_dataset):
    ds = LoadImagesAndLabels(str(small_dataset), 64, split="train")
    record = failures.record_file(ds.split_labels.cache_file)
    os.mkfifo(record)
    with hard_limit(20):
        failures.remember(ds.split_labels.cache_file, ds.im_files[0], "test")  # no reader: skipped
        assert failures.read(ds.split_labels.cache_file) == ({}, 0)
        assert len(LoadImagesAndLabels(str(small_dataset), 64, split="train")) == 6
