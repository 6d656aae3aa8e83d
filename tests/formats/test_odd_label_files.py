"""Odd files the scan must answer clearly, never hanging and never reading without bound: FIFOs and
devices in place of an image or label file, oversized label files, numbers that float() reads but a
label file must not hold, truncated PNGs, and images that Pillow reads but OpenCV (the training
decoder) cannot.

Anything that could block (a FIFO) or fill memory (/dev/zero) runs in a forked child with a time limit
and an address-space limit, so a regression fails its test instead of hanging CI.
"""
import hashlib
import multiprocessing as mp
import os
import resource
import stat
import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageFile

from yolo_data import create_dataloader
from yolo_data.formats import labelfile
from yolo_data.labels.verify import image_size, verify_pair
from yolo_data.formats.problems import LabelError
from yolo_data.labels.split import load_split
from conftest import write_image

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero")
                                or "fork" not in mp.get_all_start_methods(),
                                reason="needs FIFOs, /dev/zero and fork (Linux)")

GOOD = "0 0.5 0.5 0.4 0.4\n"
SECONDS = 30.0  # a FIFO blocks forever; a healthy answer takes milliseconds
MEMORY = 1 << 30  # more address space than the child had; reading /dev/zero to the end needs it all


# -- a hard limit on time and memory ------------------------------------------------------------------
def _child(send, fn, args):
    try:
        with open("/proc/self/statm") as f:
            vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (OSError, ValueError):
        pass  # no /proc or a lower hard limit: the time limit still holds
    try:
        send.send((True, fn(*args)))
    except BaseException as e:
        send.send((False, f"{type(e).__name__}: {e}"))


def bounded(fn, *args):
    """fn(*args) in a forked child; the test fails (never hangs) when it takes more than SECONDS or dies."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args), daemon=True)
    proc.start()
    send.close()
    try:
        if not recv.poll(SECONDS):
            pytest.fail(f"{fn.__name__}{args} gave no answer in {SECONDS:g} s (blocked on a FIFO or device?)")
        ok, value = recv.recv()
    except EOFError:
        proc.join(5)
        pytest.fail(f"{fn.__name__}{args}: the child died without an answer (exit code {proc.exitcode})")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
    if not ok:
        pytest.fail(f"{fn.__name__}{args} raised {value}")
    return value


# -- file makers ----------------------------------------------------------------------------------------
def png_chunks(data: bytes):
    """A PNG's chunks as raw bytes (length, type, data, CRC), after the 8-byte signature."""
    out, pos = [], 8
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        out.append(data[pos:pos + 12 + n])
        pos += 12 + n
    return out


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def exif_block(orientation: int) -> bytes:
    """An EXIF TIFF block as an eXIf chunk holds it (without JPEG's 'Exif\\0\\0')."""
    e = Image.Exif()
    e[0x0112] = orientation
    raw = e.tobytes()
    return raw[6:] if raw.startswith(b"Exif\0\0") else raw


def png_edit(p: Path, edit) -> None:
    """A 64x48 PNG written by OpenCV, then its chunk list [IHDR, IDAT..., IEND] rewritten by edit."""
    data = write_image(p, 64, 48).read_bytes()
    p.write_bytes(data[:8] + b"".join(edit(png_chunks(data))))


def cut_png(keep):
    def make(p):
        data = write_image(p, 64, 48).read_bytes()
        p.write_bytes(data[:keep(len(data))])
    return make


def exif_png(*orientations, late=False):
    """eXIf chunks (an int: that orientation; bytes: that raw data) after IHDR, or before IEND."""
    def make(p):
        extra = [chunk(b"eXIf", o if isinstance(o, bytes) else exif_block(o)) for o in orientations]
        png_edit(p, lambda c: c[:-1] + extra + c[-1:] if late else c[:1] + extra + c[1:])
    return make


def huge_idat_length(chunks):
    i = next(k for k, c in enumerate(chunks) if c[4:8] == b"IDAT")
    chunks[i] = struct.pack(">I", 2**31 - 1) + chunks[i][4:]
    return chunks


def pil_tiff(mode, **save):
    def make(p):
        rng = np.random.default_rng(1)
        arrays = {"F": lambda: rng.random((48, 64), dtype=np.float32),
                  "I": lambda: rng.integers(0, 2**31 - 1, (48, 64), dtype=np.int32),
                  "I;16": lambda: rng.integers(0, 2**16, (48, 64), dtype=np.uint16),
                  "RGB": lambda: rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)}
        try:
            Image.fromarray(arrays[mode](), mode if mode != "I;16" else None).save(p, **save)
        except OSError as e:  # a Pillow built without this codec
            pytest.skip(f"Pillow cannot write a {mode} TIFF with {save}: {e}")
        with Image.open(p) as im:  # Pillow writes an unknown compression name as raw, silently
            if im.info.get("compression") != save.get("compression", "raw"):
                pytest.skip(f"Pillow wrote {im.info.get('compression')} instead of {save}")
    return make


def fifo(p):
    os.mkfifo(p)


def link_to(target):
    def make(p):
        os.symlink(target, p)
    return make


def sparse(size):
    def make(p):
        with open(p, "wb") as f:
            f.truncate(size)
    return make


def text(s):
    def make(p):
        p.write_text(s, encoding="utf-8")
    return make


# -- the cases: name -> (make the file, decision, substring of the reason) -------------------------------
TRUNCATED_PNG = "truncated PNG (ends before its IEND chunk)"
CANNOT_DECODE = "OpenCV, the decoder used for training, cannot decode this TIFF"
IMAGES = {  # the label file of each is GOOD
    "fifo.jpg": (fifo, "left out", "not a regular file (a FIFO)"),
    "zero.jpg": (link_to("/dev/zero"), "left out", "not a regular file (a character device)"),
    "half.png": (cut_png(lambda n: n // 2), "left out", TRUNCATED_PNG),
    "no_iend.png": (cut_png(lambda n: n - 12), "left out", TRUNCATED_PNG),  # OpenCV refuses this too
    "short_crc.png": (cut_png(lambda n: n - 1), "left out", TRUNCATED_PNG),
    "long_chunk.png": (lambda p: png_edit(p, huge_idat_length), "left out", TRUNCATED_PNG),
    "junk_after_iend.png": (lambda p: p.write_bytes(write_image(p, 64, 48).read_bytes() + b"junk"), "kept", ""),
    "exif6.png": (exif_png(6), "kept", ""),
    "exif6_after_idat.png": (exif_png(6, late=True), "kept", ""),  # OpenCV applies it there too
    "exif3_then_6.png": (exif_png(3, 6), "kept", ""),  # OpenCV (libpng) keeps the first eXIf
    "exif_empty.png": (exif_png(b""), "warned", "unreadable EXIF data ignored"),  # OpenCV ignores it
    "exif_junk.png": (exif_png(b"not a TIFF block"), "warned", "unreadable EXIF data ignored"),
    "float32.tif": (pil_tiff("F"), "left out", CANNOT_DECODE),
    "int32.tif": (pil_tiff("I"), "left out", CANNOT_DECODE),
    "zstd.tif": (pil_tiff("RGB", compression="zstd"), "left out", CANNOT_DECODE),
    "lzw.tif": (pil_tiff("RGB", compression="tiff_lzw"), "kept", ""),
    "gray16.tif": (pil_tiff("I;16"), "kept", ""),
    "opencv.tif": (lambda p: write_image(p, 64, 48), "kept", ""),
    "good_webp.webp": (lambda p: write_image(p, 64, 48), "kept", ""),
    "good_bmp.bmp": (lambda p: write_image(p, 64, 48), "kept", ""),
    "good.png": (lambda p: write_image(p, 64, 48), "kept", ""),
}
SHAPES = {"exif6.png": (64, 48), "exif6_after_idat.png": (64, 48), "exif3_then_6.png": (48, 64)}  # (h, w)

LABELS = {  # name of the label file's stem -> its image is a good 48x48 JPEG; nc=3
    "lb_fifo": (fifo, "left out", "label file is not a regular file (a FIFO)"),
    "lb_zero": (link_to("/dev/zero"), "left out", "label file is not a regular file (a character device)"),
    "lb_huge": (sparse(labelfile.MAX_LABEL_BYTES + 1), "left out",
                "label file is 16,777,217 bytes, over the limit of 16,777,216 bytes"),
    "lb_dir_link": (link_to("/"), "warned", "a folder stands where the label file should be"),
    "cls_1e39": (text("1e39 0.5 0.5 0.1 0.1\n"), "left out", "line 1: class '1e39' is not a non-negative integer"),
    "cls_2_24_plus_1": (text(GOOD + "16777217 0.5 0.5 0.1 0.1\n"), "left out",
                        "line 2: class '16777217' is too large (class ids must be below 16,777,216"),
    "cls_underscore": (text("1_0 0.5 0.5 0.1 0.1\n"), "left out", "line 1: '1_0' is not a number"),
    "cls_hex": (text("0x1 0.5 0.5 0.1 0.1\n"), "left out", "'0x1' is not a number"),
    "cls_plus": (text("+1 0.5 0.5 0.1 0.1\n"), "left out", "class '+1' is not a non-negative integer"),
    "cls_exponent": (text("1e0 0.5 0.5 0.1 0.1\n"), "left out", "class '1e0' is not a non-negative integer"),
    "cls_minus_zero": (text("-0 0.5 0.5 0.1 0.1\n"), "left out", "class '-0' is not a non-negative integer"),
    "cls_nan": (text("nan 0.5 0.5 0.1 0.1\n"), "left out", "non-finite value 'nan'"),
    "cls_arabic_digit": (text("\u0663 0.5 0.5 0.1 0.1\n"), "left out", "'\u0663' is not a number"),
    "xy_underscore": (text("0 0.5 0.5 0.2_5 0.1\n"), "left out", "'0.2_5' is not a number"),
    "xy_fullwidth": (text("0 \uff10.5 0.5 0.1 0.1\n"), "left out", "is not a number"),
    "xy_inf": (text("0 inf 0.5 0.1 0.1\n"), "left out", "non-finite value 'inf'"),
    "xy_infinity": (text("0 0.5 -Infinity 0.1 0.1\n"), "left out", "non-finite value '-Infinity'"),
    "xy_NaN": (text("0 0.5 0.5 NaN 0.1\n"), "left out", "non-finite value 'NaN'"),
    "xy_overflow": (text("0 0.5 0.5 0.1 1e999\n"), "left out", "non-finite value '1e999'"),
    "cls_2.0": (text("2.0 0.5 0.5 0.1 0.1\n"), "kept", ""),
    "plain_forms": (text("2.00 5e-1 .5 1E-1 +0.1\n02 0.25 0.25 0.1 0.1\n"), "kept", ""),
}
LABEL_ROWS = {"cls_2.0": [[2, .5, .5, .1, .1]], "plain_forms": [[2, .5, .5, .1, .1], [2, .25, .25, .1, .1]]}


def build(root: Path, image_cases, label_cases):
    """images/train/<name> and labels/train/<stem>.txt for each case; returns (image dir, label dir)."""
    im_dir, lb_dir = root / "images" / "train", root / "labels" / "train"
    im_dir.mkdir(parents=True)
    lb_dir.mkdir(parents=True)
    for name in image_cases:
        IMAGES[name][0](im_dir / name)
        (lb_dir / (name.rsplit(".", 1)[0] + ".txt")).write_text(GOOD)
    for i, stem in enumerate(label_cases):
        write_image(im_dir / f"{stem}.jpg", 48, 48, seed=i)
        LABELS[stem][0](lb_dir / f"{stem}.txt")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nnames: [a, b, c]\n")
    return im_dir, lb_dir


def decision(rec) -> str:
    return "left out" if rec.status == "corrupt" else "warned" if rec.problems else "kept"


def regular_digest(root: Path) -> dict:
    """sha256 of each regular file that is not a symlink (FIFOs and /dev/zero are never read here)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if stat.S_ISREG(p.lstat().st_mode)}


def cv2_reads(path: Path) -> bool:
    return cv2.imread(str(path)) is not None


# -- verify_pair, one case at a time ------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(IMAGES))
def test_odd_image_gets_a_clear_answer(tmp_path, name):
    im_dir, lb_dir = build(tmp_path, [name], [])
    im, lb = im_dir / name, lb_dir / (name.rsplit(".", 1)[0] + ".txt")
    rec = bounded(verify_pair, str(im), str(lb), 3)
    _, expected, reason = IMAGES[name]
    assert decision(rec) == expected, rec.problems
    if expected == "kept":
        assert rec.status == "ok" and len(rec.labels) == 1
    else:
        assert [(p.file, p.dropped) for p in rec.problems] == [(str(im), expected == "left out")]
        assert reason in rec.problems[0].reason
    if stat.S_ISREG(os.stat(im).st_mode):  # never hand a FIFO to cv2.imread: it would block
        assert cv2_reads(im) == (expected != "left out")  # the scan agrees with the training decoder
        if expected != "left out":
            assert rec.shape == cv2.imread(str(im)).shape[:2] == SHAPES.get(name, (48, 64))


@pytest.mark.parametrize("stem", list(LABELS))
def test_odd_label_file_gets_a_clear_answer(tmp_path, stem):
    im_dir, lb_dir = build(tmp_path, [], [stem])
    lb = lb_dir / f"{stem}.txt"
    rec = bounded(verify_pair, str(im_dir / f"{stem}.jpg"), str(lb), 3)
    _, expected, reason = LABELS[stem]
    assert decision(rec) == expected, rec.problems
    if expected == "kept":
        np.testing.assert_array_equal(rec.labels, np.array(LABEL_ROWS[stem], np.float32))
    else:
        assert len(rec.problems) == 1 and rec.problems[0].file == str(lb)
        assert rec.problems[0].dropped == (expected == "left out") and reason in rec.problems[0].reason


def _verify_with_a_stale_stat(im: str, lb: str, fifo_path: str, regular: str):
    """In the child: os.stat answers for fifo_path as for a regular file, as if the FIFO had been
    swapped in between the stat and the open."""
    real_stat = os.stat
    os.stat = lambda p, *a, **k: real_stat(regular if os.fspath(p) == fifo_path else p, *a, **k)
    return verify_pair(im, lb, 3)


@pytest.mark.parametrize("swapped", ["image", "label"])
def test_fifo_swapped_in_after_the_stat_is_still_refused(tmp_path, swapped):
    """O_NONBLOCK keeps the open from blocking and the fstat of the open file refuses it."""
    im_dir, lb_dir = build(tmp_path, [], [])
    im, lb = im_dir / "a.jpg", lb_dir / "a.txt"
    regular = write_image(tmp_path / "regular.jpg", 48, 48)
    victim = im if swapped == "image" else lb
    fifo(victim)
    if swapped == "image":
        lb.write_text(GOOD)
    else:
        write_image(im, 48, 48)
    rec = bounded(_verify_with_a_stale_stat, str(im), str(lb), str(victim), str(regular))
    assert rec.status == "corrupt" and [p.file for p in rec.problems] == [str(victim)]
    assert "not a regular file (a FIFO)" in rec.problems[0].reason


@pytest.mark.parametrize("cls,ok", [("16777215", True), ("16777215.0", True), ("16777216", False),
                                    ("99999999999999999999999", False), ("9" * 400, False)])
def test_class_ids_are_exact_in_float32_up_to_the_limit(tmp_path, cls, ok):
    im_dir, lb_dir = build(tmp_path, [], [])
    im = write_image(im_dir / "a.jpg", 48, 48)
    (lb_dir / "a.txt").write_text(f"{cls} 0.5 0.5 0.1 0.1\n")
    rec = bounded(verify_pair, str(im), str(lb_dir / "a.txt"), None)  # nc unknown: only MAX_CLASS_ID applies
    assert (rec.status == "ok") == ok, rec.problems
    if ok:
        assert rec.labels[0, 0] == 16777215 == labelfile.MAX_CLASS_ID - 1
    else:
        assert "is too large" in rec.problems[0].reason and "line 1" in rec.problems[0].reason


def test_label_size_limit_is_exact(tmp_path, monkeypatch):
    monkeypatch.setattr(labelfile, "MAX_LABEL_BYTES", len(GOOD) * 3)
    im_dir, lb_dir = build(tmp_path, [], [])
    im = write_image(im_dir / "a.jpg", 48, 48)
    lb = lb_dir / "a.txt"
    lb.write_text(GOOD.replace("0.4\n", "0.3\n") + GOOD + GOOD.replace("0.4\n", "0.2\n"))  # at the limit
    assert bounded(verify_pair, str(im), str(lb), 3).status == "ok"
    lb.write_text(lb.read_text() + " ")  # one byte over
    rec = bounded(verify_pair, str(im), str(lb), 3)
    assert rec.status == "corrupt" and f"{len(GOOD) * 3 + 1} bytes, over the limit of {len(GOOD) * 3}" \
        in rec.problems[0].reason


@pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="needs /proc/self/pagemap")
def test_regular_file_whose_size_lies_is_read_only_up_to_the_limit(tmp_path):
    """/proc/self/pagemap is a regular file of size 0 that reads on for gigabytes: only the limit + 1
    bytes are read, within the child's memory limit."""
    im_dir, lb_dir = build(tmp_path, [], [])
    im = write_image(im_dir / "a.jpg", 48, 48)
    os.symlink("/proc/self/pagemap", lb_dir / "a.txt")
    rec = bounded(verify_pair, str(im), str(lb_dir / "a.txt"), 3)
    assert rec.status == "corrupt"
    assert "label file is more than 16,777,216 bytes, over the limit" in rec.problems[0].reason


def test_png_check_never_decodes_the_image(tmp_path, monkeypatch):
    """'header only, no decode': Pillow's getexif() on a PNG loads the pixels; the chunk walk does not."""
    p = tmp_path / "late.png"
    exif_png(8, late=True)(p)

    def no_decoding(self, *a, **k):
        raise AssertionError("the scan decoded a PNG")
    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    assert image_size(str(p)) == ((64, 48), [])  # (h, w): the 64 x 48 PNG turned by orientation 8
    p.write_bytes(p.read_bytes()[:-6])
    with pytest.raises(LabelError, match="truncated PNG"):
        image_size(str(p))


# -- end to end: one folder with every case plus good files -------------------------------------------------
def _scan_and_load(im_dir: Path):
    """In the child: scan with load_split, then one pass of the evaluation loader over what was kept."""
    s = load_split(str(im_dir), nc=3)
    kept = [Path(s.store.im_file(i)).name for i in range(len(s.store))]
    shapes = {n: tuple(int(v) for v in s.store.shapes_hw[i]) for i, n in enumerate(kept)}
    problems = [(p.file, p.reason, p.dropped) for p in s.problems]
    loader, ds = create_dataloader(str(im_dir.parents[1] / "data.yaml"), 64, 4, 32, workers=0, split="train")
    ds_labels = {Path(f).name: ds.labels[i].tolist() for i, f in enumerate(ds.im_files)}
    seen = sum(len(batch[0]) for batch in loader)
    return kept, shapes, problems, ds_labels, seen, s.counts


def test_load_split_over_every_odd_case_keeps_the_good_ones(tmp_path):
    root = tmp_path / "odd"
    im_dir, lb_dir = build(root, list(IMAGES), list(LABELS))
    before = regular_digest(root)
    kept, shapes, problems, ds_labels, seen, counts = bounded(_scan_and_load, im_dir)

    expected_kept = {n for n, (_, d, _) in IMAGES.items() if d != "left out"} | \
                    {f"{s}.jpg" for s, (_, d, _) in LABELS.items() if d != "left out"}
    assert set(kept) == expected_kept and seen == len(expected_kept)
    for name, (_, expected, reason) in list(IMAGES.items()) + [(f"{s}.jpg", c) for s, c in LABELS.items()]:
        stem = name.rsplit(".", 1)[0]
        hits = [(f, r, d) for f, r, d in problems if Path(f).stem == stem]
        if expected == "kept":
            assert hits == [], (name, hits)
            continue
        assert len(hits) == 1 and reason in hits[0][1], (name, hits)
        assert hits[0][2] == (expected == "left out"), (name, hits)
        is_label = name not in IMAGES
        assert hits[0][0] == str((lb_dir / f"{stem}.txt") if is_label else (im_dir / name)), (name, hits)
    # the good files are used: decodable by the training decoder, at the scanned size, with their boxes
    for name in kept:
        assert shapes[name] == cv2.imread(str(im_dir / name)).shape[:2] == \
            SHAPES.get(name, (48, 48) if name.rsplit(".", 1)[0] in LABELS else (48, 64))
    assert ds_labels["cls_2.0.jpg"] == [[2.0, 0.5, 0.5, pytest.approx(0.1), pytest.approx(0.1)]]
    assert ds_labels["good.png"] == [[0.0, 0.5, 0.5, pytest.approx(0.4), pytest.approx(0.4)]]
    assert counts["corrupt"] == len(IMAGES) + len(LABELS) - len(expected_kept)
    after = regular_digest(root)
    after.pop("labels/train.yolo_data.cache")
    assert after == before  # nothing was modified, not even the truncated files
