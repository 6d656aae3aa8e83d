"""Odd file names, folders and yamls: each gets a clear answer, the rest of the dataset is used.

Names whose bytes are not UTF-8, symlink loops, malformed or hostile dataset yamls, and cache file
names (glob characters, splits sharing a first entry, very long folder names).  Everything is written
into tmp_path; tests that could hang run under a hard time limit.
"""
import logging
import os
import re
import shutil
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import hard_limit, make_dataset, run_all, tree_digest, write_image
from yolo_data.cli import build_cache_main
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.images.load import imread_bgr
from yolo_data.formats.datayaml import load_dataset_yaml
from yolo_data.formats.sources import default_cache_file, list_image_files
from yolo_data.labels.split import load_split

ROOT = Path(__file__).resolve().parents[2]
CAFE = b"caf\xe9"  # Latin-1 bytes of 'café': not UTF-8


def bytes_name(folder: Path, name: bytes) -> str:
    """The str the filesystem gives for ``folder/name`` (lone surrogates for bytes that are not UTF-8)."""
    return os.fsdecode(os.path.join(os.fsencode(folder), name))


def write_bytes_named(folder: Path, name: bytes, data: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with open(os.path.join(os.fsencode(folder), name), "wb") as f:
            f.write(data)
    except OSError as e:  # e.g. a filesystem that only takes UTF-8 names (ZFS utf8only, APFS)
        pytest.skip(f"this filesystem refuses a non-UTF-8 name ({e})")
    return bytes_name(folder, name)


def jpeg_bytes(w: int, h: int, seed: int, orientation: int = 1) -> bytes:
    """A noisy JPEG with an EXIF orientation (6 decodes transposed)."""
    import io
    img = Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))
    exif = img.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif)
    return buf.getvalue()


def latin1_dataset(root: Path) -> Path:
    """a.jpg plus café.jpg (name and its label file's name in Latin-1 bytes) and an empty b\\xff.jpg."""
    yaml = make_dataset(root, [("a.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n")])
    write_bytes_named(root / "images" / "train", CAFE + b".jpg", jpeg_bytes(40, 30, 1, orientation=6))
    write_bytes_named(root / "labels" / "train", CAFE + b".txt", b"1 0.5 0.5 0.3 0.3\n2 0.2 0.2 0.1 0.1\n")
    write_bytes_named(root / "images" / "train", b"b\xff.jpg", b"")  # unreadable: a problem naming it
    return yaml


# -- 1. file names that are not UTF-8 -----------------------------------------------------------------
def test_latin1_file_name_is_listed_scanned_cached_reloaded_and_decoded(tmp_path):
    root = tmp_path / "ds"
    latin1_dataset(root)
    before = tree_digest(root / "images")
    cafe = bytes_name(root / "images" / "train", CAFE + b".jpg")
    bad = bytes_name(root / "images" / "train", b"b\xff.jpg")
    assert cafe in list_image_files(root / "images" / "train")

    built = load_split(str(root / "images" / "train"), nc=3)
    assert built.built and built.cache_file == root / "labels" / "train.yolo_data.cache"
    files = [built.store.im_file(i) for i in range(len(built.store))]
    assert cafe in files and os.fsencode(cafe).endswith(b"/caf\xe9.jpg")  # the name as on disk
    assert built.store.labels_of(files.index(cafe)).shape == (2, 5)  # its Latin-1-named label file read
    assert [(p.file, p.dropped) for p in built.problems] == [(bad, True)]

    again = load_split(str(root / "images" / "train"), nc=3)  # from the cache: same names, same problems
    assert not again.built
    assert [again.store.im_file(i) for i in range(len(again.store))] == files
    assert [(p.file, p.reason, p.dropped) for p in again.problems] == \
        [(p.file, p.reason, p.dropped) for p in built.problems]

    # the pixels, in a child: cv2.imread on such a name ends the process with SIGSEGV
    twin = root / "twin" / "café.jpg"
    twin.parent.mkdir()
    shutil.copyfile(os.fsencode(cafe), twin)
    args = [os.fsencode(cafe), str(twin), str(root / "images" / "train")]
    r = run_all([sys.executable, "-c", DECODE_CHECK, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"child ended with {r.returncode}: {r.stderr[-2000:]}"
    assert tree_digest(root / "images") == before  # nothing modified


# argv: the image's name as bytes, a copy of it under a UTF-8 name, the image folder
DECODE_CHECK = """
import os, sys
import cv2, numpy as np
from yolo_data.dataset import LoadImagesAndLabels
from yolo_data.images.load import imread_bgr
cafe, twin, folder = sys.argv[1:4]  # cafe: lone surrogates, as os.listdir gives it
im = imread_bgr(cafe)  # EXIF orientation 6 applied, as cv2.imread applies it
assert im.shape == (40, 30, 3) and np.array_equal(im, cv2.imread(twin)), im.shape
ds = LoadImagesAndLabels(folder, img_size=64, split="train")
i = list(ds.im_files).index(cafe)
img, targets, path, _ = ds[i]
assert path == cafe and tuple(img.shape) == (3, 64, 64) and len(targets) == 2
assert np.array_equal(img.numpy(), LoadImagesAndLabels(os.path.dirname(twin), img_size=64)[0][0].numpy())
"""


def test_latin1_file_name_through_the_cli(tmp_path):
    yaml = latin1_dataset(tmp_path / "ds")
    env = dict(os.environ, PYTHONIOENCODING="utf-8")  # a strict stdout, as under en_US.UTF-8
    r = run_all([sys.executable, str(ROOT / "tools" / "build_cache.py"), str(yaml)],
                capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == [b"split", b"images", b"boxes"]
    assert lines[1].split()[:5] == [b"train", b"2", b"3", b"0", b"1"]  # a.jpg and café.jpg; b\xff.jpg corrupt
    assert b"b\xff.jpg: not an image" in r.stdout  # the problem names the file with its own bytes
    assert b"Traceback" not in r.stderr


def test_txt_list_in_cp1252_names_the_files_on_disk(tmp_path):
    root = tmp_path / "ds"
    latin1_dataset(root)
    write_image(root / "images" / "train" / "naïve.jpg", 20, 20)  # a UTF-8 name beside it
    lst = root / "train.txt"
    lst.write_bytes("./images/train/café.jpg\r\n./images/train/a.jpg\r\n".encode("cp1252"))
    files = list_image_files(lst)
    assert [os.fsencode(f).rsplit(b"/", 1)[1] for f in files] == [b"a.jpg", CAFE + b".jpg"]
    assert all(os.path.isfile(f) for f in files)
    lst.write_bytes(b"\xef\xbb\xbf" + "./images/train/naïve.jpg\n./images/train/café.jpg\n".encode("utf-8")
                    .replace("café".encode("utf-8"), CAFE))  # UTF-8 with a BOM, one Latin-1 line
    files = list_image_files(lst)
    assert [os.path.isfile(f) for f in files] == [True, True]
    split = load_split(str(lst), nc=3)
    assert len(split.store) == 2 and split.cache_file == root / "train.yolo_data.cache"


def test_non_utf8_name_missing_file_is_an_image_read_error_naming_it(tmp_path):
    from yolo_data.images.load import ImageReadError
    gone = bytes_name(tmp_path, CAFE + b".jpg")
    with pytest.raises(ImageReadError, match="cannot be read"):
        imread_bgr(gone)


def test_a_nul_byte_in_a_txt_list_line_is_one_named_problem(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root, [(f"{n}.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n") for n in "abc"])
    lst = root / "train.txt"
    lst.write_bytes(b"./images/train/a.jpg\n./images/train/b\x00.jpg\n\n./images/train/c.jpg\n\x00\n")
    before = tree_digest(root)
    s = load_split(str(lst), nc=3)
    assert [Path(s.store.im_file(i)).name for i in range(len(s.store))] == ["a.jpg", "c.jpg"]
    assert [(p.file, p.reason, p.dropped) for p in s.problems] == [
        (str(lst), "line 2 contains a NUL byte; left out", True), (str(lst), "line 5 contains a NUL byte; left out", True)]
    assert s.counts["found"] == 4 and s.counts["corrupt"] == 2 and s.counts["ok"] == 2
    again = load_split(str(lst), nc=3)
    assert not again.built and [str(p) for p in again.problems] == [str(p) for p in s.problems]
    after = tree_digest(root)
    assert after.pop("train.yolo_data.cache") and after == before


def test_a_name_with_a_nul_byte_is_a_named_problem_in_the_scan_and_the_fingerprint(tmp_path):
    from yolo_data.labels import cache
    from yolo_data.labels.verify import verify_pair
    from yolo_data.formats.voc import names_in
    bad = str(tmp_path / "b\x00.jpg")
    rec = verify_pair(bad, str(tmp_path / "b\x00.txt"))
    assert rec.status == "corrupt" and rec.problems[0].file == bad
    assert "the name contains a NUL byte" in rec.problems[0].reason
    assert names_in([str(tmp_path / "x\x00.xml")]) == []
    # no file has such a name: the fingerprint counts it as missing, as a path that cannot be stat'ed
    assert list(cache._stats([bad, str(tmp_path / "gone.jpg")])) == list(cache._MISSING) * 2
    assert len(cache.fingerprint([bad], [bad], None)) == 64


# -- 2. symlink loops -------------------------------------------------------------------------------
def folder_with_loops(tmp_path: Path) -> Path:
    top = tmp_path / "images" / "train"
    write_image(top / "a.jpg", 20, 20)
    write_image(top / "sub" / "b.jpg", 20, 20)
    os.symlink(".", top / "loop")  # back to itself
    os.symlink("..", top / "sub" / "up")  # back to its parent
    return top


def test_symlink_loops_are_listed_once_with_a_warning_naming_the_link(tmp_path, caplog):
    top = folder_with_loops(tmp_path)
    with hard_limit(30), caplog.at_level(logging.WARNING, logger="yolo_data"):
        files = list_image_files(top)
    assert files == [str(top / "a.jpg"), str(top / "sub" / "b.jpg")]
    loops = [r.getMessage() for r in caplog.records if "symlink loop" in r.getMessage()]
    assert sorted(loops) == [f"{top / 'loop'}: symlink loop (leads back to {top}); not followed",
                             f"{top / 'sub' / 'up'}: symlink loop (leads back to {top}); not followed"]
    with hard_limit(60):
        split = load_split(str(top))
    assert len(split.store) == 2


def test_symlink_to_a_folder_elsewhere_is_followed_once(tmp_path, caplog):
    top = tmp_path / "images" / "train"
    write_image(top / "a.jpg", 20, 20)
    elsewhere = tmp_path / "elsewhere"
    write_image(elsewhere / "x.jpg", 20, 20)
    os.symlink(elsewhere, top / "more")
    os.symlink(elsewhere, top / "more_again")  # the same folder a second way
    with hard_limit(30), caplog.at_level(logging.WARNING, logger="yolo_data"):
        files = list_image_files(top)
    assert files == [str(top / "a.jpg"), str(top / "more" / "x.jpg")]
    assert [r.getMessage() for r in caplog.records] == \
        [f"{top / 'more_again'}: the same folder as {top / 'more'}, which is listed; not listed twice"]
    caplog.clear()
    write_image(top / "sub" / "b.jpg", 20, 20)
    os.symlink("sub", top / "alias")  # sorts before 'sub': the real folder still gives the names
    with hard_limit(30), caplog.at_level(logging.WARNING, logger="yolo_data"):
        files = list_image_files(top)
    assert files == [str(top / "a.jpg"), str(top / "more" / "x.jpg"), str(top / "sub" / "b.jpg")]
    assert f"{top / 'alias'}: the same folder as {top / 'sub'}, which is listed; not listed twice" in caplog.text


# -- 3. malformed and hostile yamls -----------------------------------------------------------------
def laughs(fan: int = 10, depth: int = 8) -> str:
    """A billion laughs: 10**9 strings once expanded, in about 400 bytes."""
    lines = ["a: &a [" + ", ".join(['"x"'] * fan) + "]"]
    for prev, c in zip("abcdefghijklmnop", "bcdefghijklmnop"[:depth]):
        lines.append(f"{c}: &{c} [" + ", ".join([f"*{prev}"] * fan) + "]")
    return "\n".join(lines) + f"\nnames: *{'bcdefghijklmnop'[depth - 1]}\n"


def merge_bomb(fan: int = 10, depth: int = 8) -> str:
    """Merge keys copy at load time: with 81 aliases safe_load itself reaches MemoryError."""
    lines = ["a: &a {" + ", ".join(f"k{i}: x" for i in range(fan)) + "}"]
    for prev, c in zip("abcdefghijklmnop", "bcdefghijklmnop"[:depth]):
        lines.append(f"{c}: &{c} " + "{<<: [" + ", ".join([f"*{prev}"] * fan) + "]}")
    return "\n".join(lines) + f"\nextra: *{'bcdefghijklmnop'[depth - 1]}\nnames: [a]\n"


BAD_YAMLS = [
    ("train: images\npath: 5\nnames: [a]\n", "'path' must be a folder (text), got a number (5); quote a folder named"),
    ("train: images\npath: [a, b]\nnames: [a]\n", "'path' must be a folder (text), got a list"),
    ("train: images\nnc: [1]\nnames: [a]\n", "'nc' must be the number of classes (a whole number), got a list"),
    ("train: images\nnc: one\nnames: [a]\n", "'nc' must be the number of classes (a whole number), got the text 'one'"),
    ("train: images\nnc: true\nnames: [a]\n", "'nc' must be the number of classes (a whole number), got a boolean"),
    ("train: images\nnc: 1.5\nnames: [a]\n", "'nc' must be the number of classes (a whole number), got a number (1.5)"),
    ("train: images\nval: 5\nnames: [a]\n", "'val' must be a folder, a .txt list or a list of those (text), got a num"),
    ("train: images\nval: [images, [x]]\nnames: [a]\n", "an entry of 'val' must be a folder, a .txt list"),
    ("train: images\nnames: [[a, b]]\n", "'names' entry 0 must be a name (text or a number), got a list"),
    ("train: images\nnames: [a, no]\n", "'names' entry 1 must be a name (text or a number), got a boolean (False"),
    ("train: images\nnames: [a, ~]\n", "'names' entry 1 must be a name (text or a number), got nothing (null)"),
    ("train: images\nnames: {0: a, x: b}\n", "'names' keys must be class ids 0..n-1, got the text 'x'"),
    ("train: images\nnames: {0: a, 1: {b: c}}\n", "'names' entry 1 must be a name (text or a number), got a mapping"),
    ("train: images\nnames: 7\n", "'names' must be a list or a mapping of id: name, got a number (7)"),
    ("- a\n- b\n", "expected a mapping with train/val/names, got a list"),
    ("train: images\n" + laughs(fan=12, depth=9), "more than 100 aliases (*name); a dataset yaml needs few"),
    ("train: images\na: &a [x, *a]\nnames: *a\n", "an alias refers to a value that contains it"),
    ("train: images\nnames: " + "[" * 5000 + "]" * 5000 + "\n", "values nested too deeply"),
    (b"train: images\nnames: [caf\xe9]\n", "not UTF-8 text (byte 0xe9 on line 2)"),
    (b"train: images\nnames: [" + b"a, " * (2 << 20) + b"]\n", "larger than 4 MiB; a dataset yaml is a few kB"),
]


@pytest.mark.parametrize("text,message", BAD_YAMLS, ids=range(len(BAD_YAMLS)))
def test_malformed_yaml_gets_one_line_naming_file_key_and_expectation(tmp_path, capsys, text, message):
    (tmp_path / "images").mkdir()
    y = tmp_path / "data.yaml"
    y.write_bytes(text if isinstance(text, bytes) else text.encode())
    with hard_limit(30):
        with pytest.raises(ValueError) as e:
            load_dataset_yaml(y)
        assert str(e.value).startswith(f"{y}: ") and message in str(e.value) and "\n" not in str(e.value)
        assert build_cache_main([str(y)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {e.value}\n"


def test_alias_bombs_are_refused_by_the_cli_within_bounded_memory(tmp_path):
    """In a child whose address space is capped 1 GiB above what it uses after import: without the
    bound both bombs end in MemoryError (the merge bomb inside safe_load itself, after 100 s)."""
    for i, text in enumerate([laughs(), merge_bomb()]):
        y = tmp_path / f"bomb{i}.yaml"
        y.write_text(text)
        code = ("import resource, sys\nfrom yolo_data.cli import build_cache_main\n"
                "vm = int([l for l in open('/proc/self/status') if l.startswith('VmSize')][0].split()[1]) * 1024\n"
                "resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))\n"
                f"sys.exit(build_cache_main([{str(y)!r}]))\n")
        r = run_all([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert r.stderr == f"error: {y}: aliases expand to more than 100,000 values; this looks like an alias bomb\n"


def test_wellformed_yamls_still_load(tmp_path):
    y = tmp_path / "d.yaml"
    y.write_text("path: .\ntrain: [a, b]\nval: c\nnc: 3\nnames: {'0': x, 1: 2, 2: 3.5}\n"
                 "x: &x [1]\ny: *x\n")  # a few aliases in unused keys are fine
    spec = load_dataset_yaml(y)
    assert spec.names == ["x", "2", "3.5"] and spec.splits["train"] == [str(tmp_path / "a"), str(tmp_path / "b")]
    y.write_text("path:\ntrain: a\nnc: 80\nnames:\n")  # nulls are absent keys
    assert load_dataset_yaml(y).names == []


def test_yaml_that_is_a_folder_or_cannot_be_looked_up_is_named(tmp_path, capsys):
    (tmp_path / "d.yaml").mkdir()
    with pytest.raises(ValueError, match="d.yaml: not a file"):
        load_dataset_yaml(tmp_path / "d.yaml")
    too_long = tmp_path / ("d" * 300 + ".yaml")  # the lookup itself fails: an OSError, not a traceback
    assert build_cache_main([str(too_long)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: [Errno 36] File name too long") and "d" * 300 in err and "Traceback" not in err


# -- 4. names and paths of caches -------------------------------------------------------------------
def test_stale_temps_of_a_split_with_glob_characters_are_removed(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root, [("a.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n")], split="tr[a]in")
    first = load_split(str(root / "images" / "tr[a]in"))
    f = first.cache_file
    assert f == root / "labels" / "tr[a]in.yolo_data.cache"
    host = socket.gethostname()
    dead = f.parent / f".{f.name}.{host}.999999999.abc123.yolo_data.tmp"
    alive = f.parent / f".{f.name}.{host}.{os.getpid()}.def456.yolo_data.tmp"
    dead.write_bytes(b"partial")
    alive.write_bytes(b"partial")
    assert not load_split(str(root / "images" / "tr[a]in")).built  # a reader removes them too
    assert not dead.exists() and alive.exists()


def test_a_split_of_several_entries_has_its_own_cache(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root, [("a.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n")], split="A")
    make_dataset(root, [("b.jpg", (32, 32), "1 0.5 0.5 0.2 0.2\n")], split="B")
    y = root / "data.yaml"
    y.write_text("path: .\ntrain: [images/A, images/B]\nval: images/A\nnames: [a, b, c]\n")
    spec = load_dataset_yaml(y)
    train = load_split(spec.splits["train"], nc=3)
    val = load_split(spec.splits["val"], nc=3)
    assert val.cache_file == root / "labels" / "A.yolo_data.cache"  # YOLOv5's place, our own name
    assert train.cache_file.parent == root / "labels" and train.cache_file.name.startswith("A-")
    assert train.cache_file != val.cache_file and len(train.store) == 2 and len(val.store) == 1
    assert not load_split(spec.splits["train"], nc=3).built and not load_split(spec.splits["val"], nc=3).built
    assert default_cache_file([str(root / "images/A")], None) == default_cache_file(str(root / "images/A"), None)
    assert default_cache_file(spec.splits["train"][::-1], None) != train.cache_file  # another split, another file


LONG = "long-" * 50  # 250 bytes: with ".cache" one more than a name may have (255)


def test_a_very_long_split_name_is_cached_and_reused(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root, [("a.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n"), ("b.jpg", (40, 30), None)], split=LONG)
    first = load_split(str(root / "images" / LONG))
    f = first.cache_file
    assert f is not None and f.parent == root / "labels" and f.is_file()
    assert f.name.startswith(LONG[:80]) and f.name.endswith(".yolo_data.cache") and len(f.name) <= 116
    assert not load_split(str(root / "images" / LONG)).built
    lst = root / (LONG + ".txt")  # a .txt list with a long name too
    lst.write_text(f"./images/{LONG}/a.jpg\n")
    assert load_split(str(lst)).cache_file.parent == root


def test_folder_cache_file_bounds_a_long_name(tmp_path):
    from yolo_data.labels import cache
    from yolo_data.labels.store import LabelStore
    default = tmp_path / "labels" / (LONG + ".yolo_data.cache")  # a caller that did not shorten it
    f = cache.folder_cache_file(default, tmp_path / "shared")
    assert f.parent == tmp_path / "shared" and f.name.startswith(LONG[:90]) and len(f.name) <= 133
    short = cache.folder_cache_file(tmp_path / "labels" / "train.yolo_data.cache", tmp_path / "shared").name
    assert re.fullmatch(r"train-[0-9a-f]{16}\.yolo_data\.cache", short) and f.name.endswith(".yolo_data.cache")
    assert cache.folder_cache_file(tmp_path / "labels" / (LONG + "x.cache"), tmp_path / "shared") != f
    f.parent.mkdir()
    cache.save(f, cache.CacheContents(LabelStore.from_records([]), "fp", {}, []))  # its temporary fits too
    assert cache.load(f).fingerprint == "fp"


@pytest.mark.parametrize("where", ["beside", "cache_dir"])
def test_a_very_long_split_name_gets_a_disk_image_cache(tmp_path, where):
    root = tmp_path / "ds"
    make_dataset(root, [("a.jpg", (32, 32), "0 0.5 0.5 0.2 0.2\n"), ("b.jpg", (40, 30), None)], split=LONG)
    cache_dir = tmp_path / "caches" if where == "cache_dir" else None
    ds = LoadImagesAndLabels(str(root / "images" / LONG), 64, cache_images="disk", cache_dir=cache_dir)
    folder = cache_dir or root / "labels"
    assert ds.split_labels.cache_file.parent == folder and ds.split_labels.built
    assert ds.image_cache is not None and ds.image_cache.path.parent == folder
    mtime = ds.image_cache.path.stat().st_mtime_ns
    again = LoadImagesAndLabels(str(root / "images" / LONG), 64, cache_images="disk", cache_dir=cache_dir)
    assert not again.split_labels.built and again.image_cache.path == ds.image_cache.path
    assert again.image_cache.path.stat().st_mtime_ns == mtime  # reused
    assert np.array_equal(again[0][0].numpy(), LoadImagesAndLabels(str(root / "images" / LONG), 64)[0][0].numpy())
