"""The label cache: reuse, invalidation, damage, planted files, read-only folders, atomic writes."""
import logging
import os
import pickle
import shutil
import stat
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from yolo_data.labels import cache
from yolo_data.storage import container
from yolo_data.labels.split import load_split
from conftest import tree_digest
from procs import in_child
import crafting


def images(yaml_path):
    return str(Path(yaml_path).parent / "images" / "train")


def cache_file(yaml_path):
    return Path(yaml_path).parent / "labels" / "train.yolo_data.cache"


def same_labels(a, b):
    sa, sb = a.store, b.store
    return (len(sa) == len(sb) and all(sa.im_file(i) == sb.im_file(i) for i in range(len(sa)))
            and np.array_equal(sa.labels, sb.labels) and np.array_equal(sa.shapes_hw, sb.shapes_hw)
            and np.array_equal(sa.label_offsets, sb.label_offsets) and np.array_equal(sa.seg_points, sb.seg_points))


def test_built_once_then_reused_and_dataset_untouched(small_dataset):
    root = small_dataset.parent
    before = tree_digest(root)
    first = load_split(images(small_dataset), nc=3)
    assert first.built and first.cache_file == cache_file(small_dataset)
    assert first.counts == {"found": 6, "ok": 4, "missing": 1, "empty": 1, "corrupt": 0, "boxes": 6,
                            "backgrounds": 2, "warnings": 0}
    second = load_split(images(small_dataset), nc=3)
    assert not second.built and second.counts == first.counts and same_labels(first, second)
    after = tree_digest(root)
    assert after.pop("labels/train.yolo_data.cache") and after == before  # only the cache file was added
    assert not [p for p in root.rglob("*.tmp")]


def test_a_yolov5_cache_beside_ours_is_never_touched(small_dataset):
    """YOLOv5 and Ultralytics write labels/train.cache; ours has its own name, so switching loaders
    rescans nothing and their pickle stays byte for byte as it was, with its modification time."""
    import io
    theirs = Path(small_dataset).parent / "labels" / "train.cache"
    buf = io.BytesIO()  # what YOLOv5's np.save(path, dict) writes: a pickled dict in an .npy file
    np.save(buf, {"hash": "0" * 64, "version": 0.6, "msgs": [], "results": (6, 1, 1, 0, 6)}, allow_pickle=True)
    theirs.write_bytes(buf.getvalue())
    os.utime(theirs, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    first = load_split(images(small_dataset), nc=3)
    second = load_split(images(small_dataset), nc=3)
    assert first.built and first.cache_file == cache_file(small_dataset) != theirs
    assert not second.built and second.cache_file == first.cache_file  # ours reused
    assert theirs.read_bytes() == buf.getvalue() and theirs.stat().st_mtime_ns == 1_600_000_000_000_000_000
    assert sorted(p.name for p in theirs.parent.glob("*.cache")) == ["train.cache", "train.yolo_data.cache"]


def test_edited_label_file_and_changed_settings_are_picked_up(small_dataset):
    load_split(images(small_dataset), nc=3)
    lb = small_dataset.parent / "labels" / "train" / "d.txt"
    lb.write_text("1 0.3 0.3 0.2 0.2\n0 0.6 0.6 0.1 0.1\n")
    again = load_split(images(small_dataset), nc=3)
    assert again.built
    i = [again.store.im_file(k).endswith("d.jpg") for k in range(len(again.store))].index(True)
    np.testing.assert_array_equal(again.store.labels_of(i)[:, 0], [1, 0])
    assert load_split(images(small_dataset), nc=3).built is False
    narrower = load_split(images(small_dataset), nc=2)  # the class check depends on nc: a new scan
    assert narrower.built and len(narrower.store) == 5 and "class 2" in narrower.problems[0].reason
    new_image = small_dataset.parent / "images" / "train" / "g.jpg"
    shutil.copy(small_dataset.parent / "images" / "train" / "a.jpg", new_image)
    assert len(load_split(images(small_dataset), nc=3).store) == 7


@pytest.mark.parametrize("damage", ["empty", "one byte", "10%", "50%", "minus one", "flip middle", "flip last"])
def test_damaged_cache_is_reported_and_rebuilt(small_dataset, damage, caplog):
    good = load_split(images(small_dataset), nc=3)
    f = cache_file(small_dataset)
    data = bytearray(f.read_bytes())
    cut = {"empty": 0, "one byte": 1, "10%": len(data) // 10, "50%": len(data) // 2, "minus one": len(data) - 1}
    if damage in cut:
        data = data[:cut[damage]]
    else:
        data[len(data) // 2 if damage == "flip middle" else -1] ^= 0x40
    f.write_bytes(bytes(data))
    assert_rejected_then_rebuilt(small_dataset, good, caplog)


def assert_rejected_then_rebuilt(small_dataset, good, caplog):
    """The cache file is refused, a warning names it, the next load rescans to the same labels and
    writes a whole file again."""
    f = cache_file(small_dataset)
    with pytest.raises(cache.CacheError):
        cache.load(f)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        rebuilt = load_split(images(small_dataset), nc=3)
    assert rebuilt.built and same_labels(good, rebuilt)
    assert any(str(f) in r.message and "rebuilding" in r.message for r in caplog.records)
    cache.load(f)


class _Plant:
    """Unpickling this would create a marker file: the cache loader must never get that far."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("kind", ["pickle", "numpy object array", "torch.save"])
def test_planted_code_running_cache_is_never_executed(small_dataset, tmp_path, kind, caplog):
    good = load_split(images(small_dataset), nc=3)
    f, marker = cache_file(small_dataset), str(tmp_path / "pwned")
    payload = {"labels": _Plant(marker)}
    if kind == "pickle":
        f.write_bytes(pickle.dumps(payload))
    elif kind == "numpy object array":
        with open(f, "wb") as fh:
            np.save(fh, np.array([payload], dtype=object), allow_pickle=True)
    else:
        torch.save(payload, f)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        rebuilt = load_split(images(small_dataset), nc=3)
    assert not os.path.exists(marker)
    assert rebuilt.built and same_labels(good, rebuilt)
    assert any("was not loaded" in r.message for r in caplog.records)


def test_save_load_round_trip(small_dataset, tmp_path):
    s = load_split(images(small_dataset), nc=3)
    cache.save(tmp_path / "x.cache", cache.CacheContents(s.store, "fp", s.counts, s.problems))
    back = cache.load(tmp_path / "x.cache")
    assert back.fingerprint == "fp" and back.counts == s.counts
    assert all(np.array_equal(a, back.store.arrays()[k]) for k, a in s.store.arrays().items())
    assert back.store.labels.dtype == np.float32 and not back.store.labels.flags.writeable


def _craft_offset(name, value):
    def edit(h):
        h["arrays"][name]["offset"] = value(h)
    return edit


CRAFTED = {  # each with a valid checksum: only the checks of offsets and values can catch it
    "array offset negative": dict(header=_craft_offset("labels", lambda h: -64)),
    "array offset inside the header": dict(header=_craft_offset("path_bytes", lambda h: 64)),
    "arrays overlapping": dict(header=_craft_offset("labels", lambda h: h["arrays"]["shapes_hw"]["offset"])),
    "array past the end": dict(header=_craft_offset("labels", lambda h: 1 << 40)),
    "object dtype": dict(header=lambda h: h["arrays"]["labels"].update(dtype="|O")),
    "payload size wrong": dict(header=lambda h: h.update(payload=[h["payload"][0], 64])),
    "kind changed": dict(header=lambda h: h.update(kind="images")),
    "label offsets decreasing": dict(arrays=lambda a: a["label_offsets"].__setitem__(2, 0)),
    "label offsets negative": dict(arrays=lambda a: a["label_offsets"].__setitem__(1, -5)),
    "label offsets past the rows": dict(arrays=lambda a: a["label_offsets"].__setitem__(1, 10 ** 6)),
    "path offsets decreasing": dict(arrays=lambda a: a["path_offsets"].__setitem__(3, 1)),
    "segment offsets decreasing": dict(arrays=lambda a: a["seg_offsets"].__setitem__(1, -1)),
    "class negative": dict(arrays=lambda a: a["labels"].__setitem__((0, 0), -1)),
    "class infinite": dict(arrays=lambda a: a["labels"].__setitem__((0, 0), np.inf)),
    "image size zero": dict(arrays=lambda a: a["shapes_hw"].__setitem__((0, 0), 0)),
    "kept flags not one row": dict(header=lambda h: h["arrays"]["kept"].update(shape=[2, 3])),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_cache_with_a_valid_checksum_is_rejected_and_rebuilt(small_dataset, case, caplog):
    good = load_split(images(small_dataset), nc=3)
    f = cache_file(small_dataset)
    crafting.rewrite(f, **CRAFTED[case])
    assert_rejected_then_rebuilt(small_dataset, good, caplog)


def _rename_stored(old: bytes, new: bytes):
    """An edit of the stored image paths: the first ``old`` in them becomes ``new`` (as long)."""
    def edit(a):
        i = a["path_bytes"].tobytes().index(old)
        a["path_bytes"][i:i + len(new)] = np.frombuffer(new, np.uint8)
    return edit


@pytest.mark.parametrize("case,old,new", [("a file that does not exist", b"/b.jpg", b"/x.jpg"),
                                          ("another image", b"/a.jpg", b"/d.jpg")])
def test_a_cache_whose_stored_paths_are_not_the_listed_files_is_rebuilt(small_dataset, case, old, new, caplog):
    good = load_split(images(small_dataset), nc=3)
    f = cache_file(small_dataset)
    crafting.rewrite(f, arrays=_rename_stored(old, new))  # with a valid checksum, the same fingerprint
    assert cache.load(f).fingerprint == good.fingerprint
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        rebuilt = load_split(images(small_dataset), nc=3)
    assert rebuilt.built and same_labels(good, rebuilt)
    warned = [r.message for r in caplog.records if str(f) in r.message]
    assert len(warned) == 1 and "rebuilding it" in warned[0], warned
    assert f"but the listed file there is '{images(small_dataset)}{old.decode()}'" in warned[0]
    again = load_split(images(small_dataset), nc=3)
    assert not again.built and same_labels(good, again)


def test_left_out_images_are_recorded_and_their_flags_checked(small_dataset, caplog):
    lb = Path(small_dataset).parent / "labels" / "train"
    (lb / "b.txt").write_text("7 0.5 0.5 0.1 0.1\n")  # class 7 of 3: b.jpg is left out
    good = load_split(images(small_dataset), nc=3)
    assert good.counts["corrupt"] == 1 and len(good.store) == 5
    assert not load_split(images(small_dataset), nc=3).built  # a cache with a left-out image is reused
    assert cache.load(cache_file(small_dataset)).kept.tolist() == [True, False, True, True, True, True]

    def shift(a):  # b.jpg marked kept, c.png left out: the stored paths no longer line up with the flags
        a["kept"][1:3] = [1, 0]
    crafting.rewrite(cache_file(small_dataset), arrays=shift)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        rebuilt = load_split(images(small_dataset), nc=3)
    assert rebuilt.built and same_labels(good, rebuilt)
    assert any("its image 1 is" in r.message and str(cache_file(small_dataset)) in r.message for r in caplog.records)


def test_a_coco_cache_whose_stored_paths_were_edited_is_rebuilt_on_the_warm_start(tmp_path, caplog):
    import json
    from conftest import write_image
    root = tmp_path / "c"
    for k, name in enumerate("ab"):
        write_image(root / f"{name}.jpg", 64, 64, seed=k)
    js = root / "a.json"
    js.write_text(json.dumps({"images": [{"id": k, "file_name": f"{n}.jpg", "width": 64, "height": 64}
                                         for k, n in enumerate("ab")],
                              "annotations": [{"id": 1, "image_id": 0, "category_id": 1, "bbox": [0, 0, 8, 8]}],
                              "categories": [{"id": 1, "name": "x"}]}))
    good = load_split(str(js))
    f = good.cache_file
    crafting.rewrite(f, arrays=_rename_stored(b"/a.jpg", b"/b.jpg"))  # a.jpg's labels on b.jpg's pixels
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        rebuilt = load_split(str(js))
    assert rebuilt.built and same_labels(good, rebuilt)
    assert any(str(f) in r.message and "rebuilding it" in r.message for r in caplog.records)


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_label_cache_mode_follows_the_umask(small_dataset, umask, mode):
    old = os.umask(umask)
    try:
        load_split(images(small_dataset), nc=3)
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache_file(small_dataset).stat().st_mode) == mode


def test_label_cache_writable_by_every_user_is_not_trusted(small_dataset, caplog):
    load_split(images(small_dataset), nc=3)
    os.chmod(cache_file(small_dataset), 0o666)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        again = load_split(images(small_dataset), nc=3)
    assert again.built and any("writable by every user" in r.message for r in caplog.records)


def test_stale_temp_files_of_dead_writers_are_removed(small_dataset):
    load_split(images(small_dataset), nc=3)
    f = cache_file(small_dataset)
    host = __import__('socket').gethostname()
    dead = f.parent / f".{f.name}.{host}.999999999.abc123.yolo_data.tmp"
    alive = f.parent / f".{f.name}.{host}.{os.getpid()}.def456.yolo_data.tmp"
    dead.write_bytes(b"partial")
    alive.write_bytes(b"partial")
    load_split(images(small_dataset), nc=3, force=True)
    assert not dead.exists() and alive.exists()


def test_a_writers_temporary_is_named_as_ours_and_left_while_it_writes(tmp_path):
    layout = container.plan("test", {}, {"a": ("<i4", (3,))})
    with container.NewFile(layout, path=tmp_path / "x.cache") as f:
        assert f.tmp.name.startswith(f".x.cache.{__import__('socket').gethostname()}.{os.getpid()}.")
        assert f.tmp.name.endswith(".yolo_data.tmp")
        assert list(container.stale_temps(tmp_path)) == []  # its writer is alive
        os.close(f.commit({"a": np.arange(3)}))
    assert [p.name for p in tmp_path.iterdir()] == ["x.cache"]


def test_a_temporary_of_the_older_name_goes_only_when_it_holds_our_magic(small_dataset):
    """'.<name>.<host>.<pid>.<random>.tmp' is a shape anyone's file may have: without our container's
    magic bytes at its start a dead writer's file of that name is not taken for ours."""
    load_split(images(small_dataset), nc=3)
    f = cache_file(small_dataset)
    host = __import__('socket').gethostname()
    ours = f.parent / f".{f.name}.{host}.999999999.abc123.tmp"
    theirs = f.parent / f".{f.name}.{host}.999999998.abc123.tmp"
    ours.write_bytes(b"YOLODATA" + b"\0" * 100)
    theirs.write_bytes(b"a user's own notes")
    load_split(images(small_dataset), nc=3, force=True)
    assert not ours.exists() and theirs.read_bytes() == b"a user's own notes"


def test_explicit_cache_dir_holds_the_cache(small_dataset, tmp_path):
    d = tmp_path / "my_caches"
    s = load_split(images(small_dataset), nc=3, cache_dir=d)
    assert s.built and s.cache_file.parent == d and not cache_file(small_dataset).exists()
    assert not load_split(images(small_dataset), nc=3, cache_dir=d).built


def _scan_twice(img_dir):
    """(built, cache file, images, boxes) of two scans in a row."""
    out = []
    for _ in range(2):
        s = load_split(img_dir, nc=3)
        out.append((s.built, str(s.cache_file), len(s.store), s.counts["boxes"]))
    return out


def test_read_only_dataset_uses_the_user_cache_folder_and_reuses_it(small_dataset, caplog):
    """Run as a non-root user (a forked child drops to 'nobody' when the suite runs as root)."""
    base = Path(tempfile.mkdtemp(prefix="yolo_data_ro_"))
    try:
        data = base / "ds"
        shutil.copytree(small_dataset.parent, data)
        user_cache = base / "user_cache"
        user_cache.mkdir()
        os.chmod(base, 0o755)
        os.chmod(user_cache, 0o777)
        for p in [data, *data.rglob("*")]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        before = tree_digest(data)
        os.environ["YOLO_DATA_CACHE_DIR"] = str(user_cache)  # restored by the autouse fixture
        with caplog.at_level(logging.WARNING, logger="yolo_data"):
            result = in_child(_scan_twice, str(data / "images" / "train"), timeout=120,
                              user=65534 if os.geteuid() == 0 else None)  # root reads whatever the modes
        assert isinstance(result, list), result
        (built1, file1, n1, boxes1), (built2, file2, n2, boxes2) = result
        assert built1 and not built2 and file1 == file2 and Path(file1).parent == user_cache
        assert (n1, boxes1) == (n2, boxes2) == (6, 6)
        assert tree_digest(data) == before
    finally:
        for p in [base, *base.rglob("*")]:
            if p.is_dir():
                os.chmod(p, 0o755)
        shutil.rmtree(base, ignore_errors=True)
