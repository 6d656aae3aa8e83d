"""Duplicate images (yolo_data.report.dedupe): fingerprints read each file once and name the broken ones; every
injected copy (bytes, JPEG quality, PNG, 50% and 75% resizes, within and across splits) is grouped with
its original and nothing else is; BCCD's one known near-identical pair across train and val is found;
the multi-index search agrees with a brute-force reference; flat (one-colour) pictures are grouped only
with byte copies; labels_agree."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import ROOT, SHARED
from yolo_data.report import dedupe
from yolo_data.report.dedupe import DuplicateGroup, ImagePrints, find_duplicates, fingerprint_images, labels_agree
from yolo_data.report.nearpairs import hamming, near_pairs

SAMPLE = ROOT / "data" / "sample" / "images"


def image_files(folder: Path):
    return sorted(str(p) for p in Path(folder).iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def fingerprint_splits(root: Path):
    """{split folder name: (paths, prints)} of every split folder under ``root``."""
    splits = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        paths = image_files(d)
        splits[d.name] = (paths, fingerprint_images(paths, workers=2))
    return splits


def summary(groups):
    """{frozenset of 'split/file name': (kind, across)}: what a group is, independent of the order found."""
    return {frozenset(f"{m[0]}/{Path(m[2]).name}" for m in g.members): (g.kind, g.across) for g in groups}


def reencode(src: Path, dst: Path, quality: int = None, scale: float = 1.0) -> None:
    im = cv2.imread(str(src))
    if scale != 1.0:
        im = cv2.resize(im, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if quality else []
    assert cv2.imwrite(str(dst), im, params)


@pytest.fixture(scope="module")
def injected(tmp_path_factory):
    """Splits train/val/test holding the bundled sample (all 24 pictures) and, where ../shared is there,
    all 128 coco128 train photos, plus copies made here; returns (root, the groups expected)."""
    root = tmp_path_factory.mktemp("dupes")
    train, val, test = (root / s for s in ("train", "val", "test"))
    for d in (train, val, test):
        d.mkdir()
    originals = [Path(p) for p in image_files(SAMPLE / "train") + image_files(SAMPLE / "val")]
    coco = SHARED / "coco128" / "images" / "train2017"
    if coco.is_dir():
        originals += [Path(p) for p in image_files(coco)]
    for p in originals:
        shutil.copy(p, train / p.name)
    photos = [train / p.name for p in originals]
    real = photos[24:] or photos  # photos from coco128 where they are there
    want = {}
    assert len(real) >= 16

    def add(kind, across, *names):
        want[frozenset(names)] = (kind, across)

    a, b, c, d, e, f, g, h = real[1], real[3], real[5], real[7], real[9], real[11], real[13], real[15]
    shutil.copy(a, train / f"copy_{a.name}")  # byte copy, same split
    add("identical", False, f"train/{a.name}", f"train/copy_{a.name}")
    shutil.copy(b, val / b.name)  # byte copy, leaked into val under the same name
    add("identical", True, f"train/{b.name}", f"val/{b.name}")
    reencode(c, test / f"q60_{c.stem}.jpg", quality=60)  # another JPEG quality, leaked into test
    add("similar", True, f"train/{c.name}", f"test/q60_{c.stem}.jpg")
    reencode(d, train / f"{d.stem}.png")  # PNG of a JPEG, same split
    add("similar", False, f"train/{d.name}", f"train/{d.stem}.png")
    reencode(e, val / f"half_{e.stem}.jpg", quality=90, scale=0.5)  # resized, across
    add("similar", True, f"train/{e.name}", f"val/half_{e.stem}.jpg")
    reencode(f, train / f"r75_{f.stem}.jpg", quality=95, scale=0.75)  # resized, same split
    add("similar", False, f"train/{f.name}", f"train/r75_{f.stem}.jpg")
    # one picture three times: bytes in val, quality 60 at 75% in test: one group over three splits
    shutil.copy(g, val / f"copy_{g.name}")
    reencode(g, test / f"r75q60_{g.stem}.jpg", quality=60, scale=0.75)
    add("similar", True, f"train/{g.name}", f"val/copy_{g.name}", f"test/r75q60_{g.stem}.jpg")
    reencode(h, test / f"q95_{h.stem}.jpg", quality=95)
    add("similar", True, f"train/{h.name}", f"test/q95_{h.stem}.jpg")
    # the synthetic pictures (flat shapes on plain backgrounds: the hard case for a gradient hash)
    s1, s2 = photos[2], photos[20]
    reencode(s1, val / f"{s1.stem}.png")
    add("similar", True, f"train/{s1.name}", f"val/{s1.stem}.png")
    reencode(s2, train / f"half_{s2.stem}.jpg", quality=80, scale=0.5)
    add("similar", False, f"train/{s2.name}", f"train/half_{s2.stem}.jpg")
    return root, want


def test_every_injected_duplicate_and_nothing_else(injected):
    root, want = injected
    splits = fingerprint_splits(root)
    assert all(p.ok.all() for _, p in splits.values())
    groups = find_duplicates(splits)
    got = summary(groups)
    assert got == want, {"missed": {k: v for k, v in want.items() if got.get(k) != v},
                         "unexpected": {k: v for k, v in got.items() if want.get(k) != v}}
    for grp in groups:
        assert grp.members == sorted(grp.members)
        for split, i, path in grp.members:
            assert splits[split][0][i] == path
    leak = next(grp for grp in groups if len(grp.members) == 3)
    assert leak.splits == ["test", "train", "val"] and leak.across


def test_no_false_positives_on_the_bundled_sample():
    splits = {s: (image_files(SAMPLE / s), None) for s in ("train", "val")}
    splits = {s: (paths, fingerprint_images(paths)) for s, (paths, _) in splits.items()}
    assert sum(len(p) for p, _ in splits.values()) == 24
    assert find_duplicates(splits) == []


def test_no_false_positives_on_coco128(tmp_path):
    src = SHARED / "coco128" / "images"
    if not src.is_dir():
        pytest.skip(f"{src} is not available (a clone without ../shared)")
    shutil.copytree(src, tmp_path / "images")
    splits = fingerprint_splits(tmp_path / "images")
    assert {s: len(p) for s, (p, _) in splits.items()} == {"train2017": 128, "val2017": 128}
    assert find_duplicates(splits) == []


def test_bccd_near_identical_pair_across_train_and_val(tmp_path):
    """BCCD holds two shots of one field of view, BloodImage_00038 (train) and 00037 (val), a focus step
    apart (DCT hashes 4 bits apart, gradient hashes 4): leakage the detector reports, with labels that
    disagree.  Nothing else in BCCD is within the bounds: the next closest pair (00386 and 00391, the
    same cells with the slide moved) is 14 and 14 bits apart, a new picture to a detector."""
    src = SHARED / "bccd"
    if not src.is_dir():
        pytest.skip(f"{src} is not available (a clone without ../shared)")
    shutil.copytree(src / "images", tmp_path / "images")
    splits = fingerprint_splits(tmp_path / "images")
    groups = find_duplicates(splits)
    for grp in groups:
        print(grp.kind, grp.splits, [Path(m[2]).name for m in grp.members])
    assert summary(groups) == {frozenset({"train2017/BloodImage_00038.jpg", "val2017/BloodImage_00037.jpg"}):
                              ("similar", True)}
    labels = [np.loadtxt(src / "labels" / s / f"{Path(p).stem}.txt", ndmin=2) for s, _, p in groups[0].members]
    assert not labels_agree(*labels)


def test_fingerprints_read_once_name_the_broken_files_and_go_on(tmp_path):
    good = tmp_path / "good.jpg"
    shutil.copy(SAMPLE / "train" / "train_000.jpg", good)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 this is not a picture")
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    missing = tmp_path / "missing.jpg"
    paths = [str(good), str(broken), str(missing), str(empty), str(good)]
    calls = []
    prints = fingerprint_images(paths, workers=2, progress=lambda done, total: calls.append((done, total)))
    assert prints.ok.tolist() == [True, False, False, False, True]
    assert sorted(prints.errors) == [1, 2, 3]
    for i in (1, 2, 3):
        assert paths[i] in prints.errors[i], prints.errors[i]
    assert calls[-1] == (5, 5)
    assert prints.digest.shape == (5, 16) and prints.digest.dtype == np.uint8
    assert prints.phash.dtype == np.uint64 and prints.dhash.dtype == np.uint64
    assert bytes(prints.digest[0]) == hashlib.sha256(good.read_bytes()).digest()[:16]
    # the failed files take no part; the two readings of one file are one identical group
    groups = find_duplicates({"train": (paths, prints)})
    assert groups == [DuplicateGroup("identical", [("train", 0, str(good)), ("train", 4, str(good))])]
    assert not groups[0].across


def test_progress_counts_every_file_across_chunks(tmp_path):
    paths = [str(SAMPLE / "train" / "train_001.jpg")] * (dedupe._CHUNK * 2 + 5)
    calls = []
    prints = fingerprint_images(paths, workers=2, progress=lambda d, t: calls.append((d, t)))
    assert prints.ok.all() and len(calls) == 3 and calls[-1] == (len(paths), len(paths))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_jpeg_size_is_the_decoded_size():
    for p in image_files(SAMPLE / "train")[:4]:
        data = Path(p).read_bytes()
        assert dedupe.jpeg_size(data) == cv2.imread(p).shape[:2]
    assert dedupe.jpeg_size(b"\x89PNG....") is None
    assert dedupe.jpeg_size(b"\xff\xd8\xff\xe0\x00") is None


def test_exif_orientation_is_applied_before_hashing(tmp_path):
    """A sideways JPEG tagged to be turned upright is the upright picture (the dataset decodes it so)."""
    from crafting import exif_block, with_app1
    im = cv2.imread(str(SAMPLE / "train" / "train_000.jpg"))
    upright = tmp_path / "upright.jpg"
    cv2.imwrite(str(upright), im, [cv2.IMWRITE_JPEG_QUALITY, 95])
    sideways = tmp_path / "sideways.jpg"
    stored = cv2.rotate(im, cv2.ROTATE_90_COUNTERCLOCKWISE)  # orientation 6 turns it clockwise
    data = cv2.imencode(".jpg", stored, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    sideways.write_bytes(with_app1(data, b"Exif\0\0" + exif_block(6)))
    rotated = tmp_path / "rotated.jpg"  # rotated for real: another picture to the model
    cv2.imwrite(str(rotated), stored, [cv2.IMWRITE_JPEG_QUALITY, 95])
    paths = [str(upright), str(sideways), str(rotated)]
    groups = find_duplicates({"train": (paths, fingerprint_images(paths))})
    assert summary(groups) == {frozenset({"train/upright.jpg", "train/sideways.jpg"}): ("similar", False)}


# -- the search -------------------------------------------------------------------------------------
def random_hashes(rng, n):
    return (rng.integers(0, 2 ** 32, n, dtype=np.uint64) << np.uint64(32)) | rng.integers(0, 2 ** 32, n, dtype=np.uint64)


def flip_bits(rng, h, k):
    for b in rng.choice(64, k, replace=False):
        h ^= np.uint64(1) << np.uint64(int(b))
    return h


def test_near_pairs_agree_with_all_pairs_on_clustered_hashes():
    """Hashes in tight clusters (many pairs near each bound) against a brute-force reference."""
    rng = np.random.default_rng(1)
    centres_p, centres_d = random_hashes(rng, 40), random_hashes(rng, 40)
    pick = rng.integers(0, 40, 1500)
    ph = np.array([flip_bits(rng, centres_p[c], int(rng.integers(0, 6))) for c in pick], np.uint64)
    dh = np.array([flip_bits(rng, centres_d[c], int(rng.integers(0, 6))) for c in pick], np.uint64)
    _, first = np.unique(np.stack([ph, dh], 1), axis=0, return_index=True)
    ph, dh = ph[np.sort(first)], dh[np.sort(first)]
    dp, dd = hamming(ph[:, None], ph[None]), hamming(dh[:, None], dh[None])
    ref = np.argwhere(np.triu((dp <= 6) & (dd <= 6), 1))
    got = near_pairs(ph, dh, 6, 6)
    assert len(ref) > 1000
    assert np.array_equal(got, ref)
    got = near_pairs(ph, dh, 3, 5)
    assert np.array_equal(got, np.argwhere(np.triu((dp <= 3) & (dd <= 5), 1)))


def test_near_pairs_among_random_hashes():
    rng = np.random.default_rng(2)
    n = 50_000
    ph, dh = random_hashes(rng, n), random_hashes(rng, n)
    src = rng.choice(n // 2, 300, replace=False)
    dst = n // 2 + rng.choice(n // 2, 300, replace=False)
    for k, (s, t) in enumerate(zip(src, dst)):
        far = k % 3 == 0  # one in three just beyond a bound: must not be found
        ph[t] = flip_bits(rng, ph[s], 8 if far and k % 2 else int(rng.integers(0, 7)))
        dh[t] = flip_bits(rng, dh[s], 7 if far and not k % 2 else int(rng.integers(0, 7)))
    want = {(int(s), int(t)) for k, (s, t) in enumerate(zip(src, dst)) if k % 3}
    assert {tuple(p) for p in near_pairs(ph, dh).tolist()} == want


def test_a_thousand_equal_hashes_make_one_group_and_a_huge_bucket_warns(caplog):
    n = 1000
    zeros = np.zeros(n, np.uint64)
    digest = np.arange(n * 16, dtype=np.int64).astype(np.uint8).reshape(n, 16)  # distinct bytes
    digest[:, 0] = np.arange(n) % 256
    digest[:, 1] = np.arange(n) // 256
    prints = ImagePrints(digest, zeros.copy(), zeros.copy(), np.ones(n, bool))
    paths = [f"frame_{i}.png" for i in range(n)]  # copies of one picture, each encoded differently
    groups = find_duplicates({"train": (paths, prints)})
    assert len(groups) == 1 and len(groups[0].members) == n and groups[0].kind == "similar"
    # distinct hashes one bit apart, all in one bucket of every table: neighbours only, and a warning
    ph = np.array([np.uint64(1) << np.uint64(k) for k in range(64)] * 4, np.uint64)
    dh = np.repeat(np.array([0, 1, 2, 4], np.uint64), 64)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        pairs = near_pairs(ph, dh, 6, 6, cap=8)
    assert "hash buckets held over 9 pictures" in caplog.text
    assert len(pairs) > 0 and np.all(hamming(ph[pairs[:, 0]], ph[pairs[:, 1]]) <= 6)


def test_split_with_paths_and_prints_of_other_lengths_is_refused():
    prints = ImagePrints(np.zeros((1, 16), np.uint8), np.zeros(1, np.uint64), np.zeros(1, np.uint64), np.ones(1, bool))
    with pytest.raises(ValueError, match="2 paths but 1 fingerprints"):
        find_duplicates({"val": (["a.jpg", "b.jpg"], prints)})


# -- labels -----------------------------------------------------------------------------------------
def test_labels_agree():
    a = np.array([[0, 0.5, 0.5, 0.2, 0.2], [1, 0.2, 0.3, 0.1, 0.1], [1, 0.7, 0.7, 0.3, 0.2]])
    assert labels_agree(a, a[::-1])  # order does not matter
    assert labels_agree(a, a + [0, 0.002, -0.001, 0.001, 0])  # rounding of a resized copy
    assert labels_agree(np.zeros((0, 5)), np.zeros((0, 5)))
    assert not labels_agree(a, a[:2])  # a box missing
    assert not labels_agree(a, np.r_[a, a[:1]])  # a box more
    other = a.copy()
    other[0, 0] = 2  # another class
    assert not labels_agree(a, other)
    moved = a.copy()
    moved[1, 1] += 0.05  # half a box width off: IoU 0.33
    assert not labels_agree(a, moved)
    assert labels_agree(a, moved, iou=0.3)
    # two boxes of one class: one-to-one, so one box of b cannot match both boxes of a
    two = np.array([[0, 0.5, 0.5, 0.2, 0.2], [0, 0.5, 0.5, 0.2, 0.2]])
    assert not labels_agree(two, np.array([[0, 0.5, 0.5, 0.2, 0.2], [0, 0.1, 0.1, 0.05, 0.05]]))


# -- flat pictures ----------------------------------------------------------------------------------
def flat_frames(folder: Path) -> dict:
    """Black, white and gray frames (some with sensor noise, as video frames have), one black frame
    with a time stamp drawn on it, and a byte copy of the black frame: {name: path}."""
    rng = np.random.default_rng(5)
    folder.mkdir(parents=True, exist_ok=True)
    frames = {"black.jpg": np.zeros((480, 640, 3), np.uint8), "white.jpg": np.full((480, 640, 3), 255, np.uint8),
              "gray.png": np.full((240, 320, 3), 128, np.uint8),
              "dark_noisy.jpg": np.clip(rng.normal(12, 3, (480, 640, 3)), 0, 255).astype(np.uint8),
              "bright_noisy.jpg": np.clip(rng.normal(250, 3, (480, 640, 3)), 0, 255).astype(np.uint8),
              "black_small.png": np.zeros((120, 160, 3), np.uint8)}
    stamp = np.zeros((480, 640, 3), np.uint8)
    cv2.putText(stamp, "2024-01-01 12:00:00", (10, 470), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1)
    frames["stamped.jpg"] = stamp
    out = {}
    for name, img in frames.items():
        out[name] = folder / name
        cv2.imwrite(str(out[name]), img)
    out["black_copy.jpg"] = folder / "black_copy.jpg"
    shutil.copyfile(out["black.jpg"], out["black_copy.jpg"])
    return out


def test_flat_pictures_are_grouped_only_with_byte_copies(tmp_path):
    frames = flat_frames(tmp_path / "frames")
    paths = [str(p) for p in frames.values()]
    prints = fingerprint_images(paths, workers=2)
    flat = {Path(p).name for p, f in zip(paths, prints.flat) if f}
    assert flat == set(frames) - {"stamped.jpg"}  # a time stamp is a picture: compared as any other
    # the black frame in every size and format is one hash, the white and gray ones a bit away
    groups = find_duplicates({"train": (paths[:4], _rows(prints, range(4))),
                              "val": (paths[4:], _rows(prints, range(4, len(paths))))})
    assert summary(groups) == {frozenset({"train/black.jpg", "val/black_copy.jpg"}): ("identical", True)}
    # without the flat marks (as before they existed) every one-colour frame was one near-identical group
    unmarked = dataclasses.replace(prints, flat=None)
    assert any(len(g.members) > 2 for g in find_duplicates({"train": (paths, unmarked)}))


def _rows(prints: ImagePrints, rows) -> ImagePrints:
    idx = np.asarray(list(rows), np.int64)
    return ImagePrints(prints.digest[idx], prints.phash[idx], prints.dhash[idx], prints.ok[idx], {}, prints.flat[idx])


def test_photos_are_never_flat():
    paths = image_files(SAMPLE / "train") + image_files(SAMPLE / "val")
    assert not fingerprint_images(paths, workers=2).flat.any()
    gray = np.tile(np.linspace(0, 30, 64, dtype=np.float32), (48, 1)).astype(np.uint8)  # a dark ramp has a layout
    assert not dedupe.is_flat(gray) and dedupe.is_flat(np.full((48, 64), 200, np.uint8))
