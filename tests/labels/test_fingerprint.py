"""The label cache's fingerprint: every file is stat'ed, so an in-place edit (same size, new mtime) or a
replaced image is noticed, in this process and in the forked pool alike, and both give one value."""
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from yolo_data.labels import cache
from yolo_data.formats.sources import img2label_path, list_image_files
from yolo_data.labels.split import load_split
from conftest import write_image

N = 300
SEQUENTIAL = dict(parallel_min=10**9)  # below the threshold: stat'ed in this process
PARALLEL = dict(parallel_min=0, workers=2)  # above it: stat'ed in 2 forked processes


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 pairs, so a few hundred files make several chunks for the pool."""
    monkeypatch.setattr(cache, "FINGERPRINT_CHUNK", 64)
    monkeypatch.setattr(cache, "STAT_BATCH", 50)


@pytest.fixture(params=["sequential", "processes", "threads"])
def how(request, monkeypatch):
    """The three ways of computing it: in this process, in the forked pool (above the threshold), and
    in threads (where stat is slow, as on NFS; forced here by a threshold below any stat's time)."""
    if request.param == "threads":
        monkeypatch.setattr(cache, "SLOW_STAT_S", -1.0)
    return PARALLEL if request.param == "processes" else SEQUENTIAL


def fake_split(root: Path, n: int = N):
    """n images (bytes only: the fingerprint never reads them) and their labels, every third missing."""
    im_dir, lb_dir = root / "images" / "train", root / "labels" / "train"
    im_dir.mkdir(parents=True)
    lb_dir.mkdir(parents=True)
    for i in range(n):
        (im_dir / f"{i:04d}.jpg").write_bytes(b"\xff\xd8" + bytes([i % 251]) * 100)
        if i % 3:
            (lb_dir / f"{i:04d}.txt").write_text(f"{i % 7} 0.5 0.5 0.25 0.25\n")
    im_files = list_image_files(im_dir)
    return im_files, [img2label_path(f) for f in im_files]


def set_mtime(path: Path, ns: int) -> None:
    os.utime(path, ns=(ns, ns))


def test_in_place_label_edit_same_size_is_noticed(tmp_path, small_chunks, how):
    im_files, lb_files = fake_split(tmp_path)
    label = Path(lb_files[200])
    set_mtime(label, 1_700_000_000_000_000_000)
    before = cache.fingerprint(im_files, lb_files, 80, **how)
    text = label.read_text()
    edited = text.replace("0.25 0.25", "0.75 0.25")
    assert len(edited) == len(text) and edited != text
    with open(label, "r+") as f:  # in place: same inode, same size
        f.write(edited)
    set_mtime(label, 1_700_000_000_000_000_001)  # 1 ns later
    assert label.stat().st_size == len(text)
    assert cache.fingerprint(im_files, lb_files, 80, **how) != before


def test_replaced_image_is_noticed(tmp_path, small_chunks, how):
    im_files, lb_files = fake_split(tmp_path)
    image = Path(im_files[250])
    old_ns = image.stat().st_mtime_ns
    before = cache.fingerprint(im_files, lb_files, 80, **how)
    new = tmp_path / "new.jpg"  # another photo of the same size, written elsewhere and moved over it
    new.write_bytes(b"\xff\xd8" + b"\x07" * 100)
    set_mtime(new, old_ns + 1_000_000_000)
    os.replace(new, image)
    assert image.stat().st_size == 102
    assert cache.fingerprint(im_files, lb_files, 80, **how) != before
    other = tmp_path / "other.jpg"  # copied with its times kept (cp -p) but of another size
    other.write_bytes(b"\xff\xd8" + b"\x07" * 99)
    set_mtime(other, old_ns)
    os.replace(other, image)
    set_mtime(image, old_ns)
    assert cache.fingerprint(im_files, lb_files, 80, **how) != before


def test_added_removed_and_retyped_files_are_noticed(tmp_path, small_chunks, how):
    im_files, lb_files = fake_split(tmp_path)
    fp = lambda: cache.fingerprint(im_files, lb_files, 80, **how)  # noqa: E731
    before = fp()
    missing = Path(lb_files[0])
    assert not missing.exists()
    missing.write_text("")  # an empty label file where there was none
    added = fp()
    assert added != before
    missing.unlink()
    assert fp() == before
    image = Path(im_files[299])
    image.unlink()
    image.mkdir()  # a folder under an image's name, with the size and time the file had: the type counts
    size, ns = image.stat().st_size, 1_700_000_000_000_000_000
    set_mtime(image, ns)
    as_folder = fp()
    image.rmdir()
    image.write_bytes(b"x" * size)
    set_mtime(image, ns)
    assert as_folder != fp() != before and as_folder != before
    assert cache.fingerprint(im_files, lb_files, 79, **how) != cache.fingerprint(im_files, lb_files, 80, **how)


def test_same_value_in_this_process_in_the_pool_and_in_threads(tmp_path, small_chunks, monkeypatch):
    im_files, lb_files = fake_split(tmp_path)
    one = cache.fingerprint(im_files, lb_files, None, **SEQUENTIAL)
    assert cache.fingerprint(im_files, lb_files, None, **PARALLEL) == one
    assert cache.fingerprint(im_files, lb_files, None, parallel_min=0, workers=3) == one
    with monkeypatch.context() as m:
        m.setattr(cache, "SLOW_STAT_S", -1.0)
        assert cache.fingerprint(im_files, lb_files, None) == one
    # the order of the pairs counts (a chunk's place in the whole)
    swapped = im_files[64:128] + im_files[:64] + im_files[128:], lb_files[64:128] + lb_files[:64] + lb_files[128:]
    assert cache.fingerprint(*swapped, None, **PARALLEL) != one
    assert cache.fingerprint(*swapped, None, **SEQUENTIAL) != one
    with pytest.raises(ValueError):
        cache.fingerprint(im_files, lb_files[:-1], None)


def test_load_split_rescans_after_an_in_place_edit_above_the_parallel_threshold(tmp_path, monkeypatch):
    """End to end: a cache built and checked with the pool (threshold 0, chunks of 64) is reused while
    nothing changed and rebuilt after a same-size edit of one label file."""
    monkeypatch.setattr(cache, "FINGERPRINT_CHUNK", 64)
    monkeypatch.setattr(cache, "PARALLEL_FINGERPRINT_MIN", 0)
    im_dir = tmp_path / "ds" / "images" / "train"
    src = write_image(im_dir / "0000.jpg", 40, 30)
    for i in range(1, 200):
        os.link(src, im_dir / f"{i:04d}.jpg")
    lb_dir = tmp_path / "ds" / "labels" / "train"
    lb_dir.mkdir(parents=True)
    for i in range(200):
        (lb_dir / f"{i:04d}.txt").write_text("0 0.5 0.5 0.25 0.25\n")
    calls = []
    real = cache.fingerprint

    def spy(*a, **k):
        calls.append(len(a[0]))
        return real(*a, **k)
    monkeypatch.setattr(cache, "fingerprint", spy)
    first = load_split(str(im_dir), nc=2)
    assert first.built and load_split(str(im_dir), nc=2).built is False
    label = lb_dir / "0150.txt"
    ns = label.stat().st_mtime_ns
    label.write_text("1 0.5 0.5 0.25 0.25\n")
    set_mtime(label, ns + 1)
    again = load_split(str(im_dir), nc=2)
    assert again.built and calls == [200, 200, 200]
    k = [again.store.im_file(i).endswith("0150.jpg") for i in range(len(again.store))].index(True)
    assert again.store.labels_of(k)[0, 0] == 1


def test_slow_stats_are_waited_for_in_threads(tmp_path, small_chunks, monkeypatch):
    """A stat of 0.2 ms (as on a network filesystem) is taken for slow, and the threads give the value
    of one process; local stats (about 1.5 us) are not taken for slow.  The probe's decision is checked
    on a clock that only the stats move, so a busy machine cannot change it."""
    im_files, lb_files = fake_split(tmp_path, 100)
    one = cache.fingerprint(im_files, lb_files, None, **SEQUENTIAL)
    clock, real_stat = [0.0], os.stat

    def costing(seconds):
        def stat(path, *a, **k):
            clock[0] += seconds
            return real_stat(path, *a, **k)
        return stat

    monkeypatch.setattr(cache, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    for seconds, slow in ((1.5e-6, False), (cache.SLOW_STAT_S * 0.8, False), (cache.SLOW_STAT_S * 1.2, True),
                          (2e-4, True)):
        monkeypatch.setattr(os, "stat", costing(seconds))
        assert cache._slow_stats(im_files, lb_files) is slow, seconds
    monkeypatch.setattr(cache, "time", time)
    used = []

    def slow_stat(path, *a, **k):
        time.sleep(0.0002)
        return real_stat(path, *a, **k)

    real_pool = cache.ThreadPoolExecutor
    monkeypatch.setattr(cache, "ThreadPoolExecutor", lambda n: used.append(n) or real_pool(n))
    monkeypatch.setattr(os, "stat", slow_stat)
    assert cache._slow_stats(im_files, lb_files)
    assert cache.fingerprint(im_files, lb_files, None, **SEQUENTIAL) == one and used == [cache.STAT_THREADS]
