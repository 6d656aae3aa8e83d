"""Branches of the training data path checked against pixels, through the public API only
(create_dataloader, the loader, dataset[i] and YOLOv5's dataset attributes): rect training without
mosaic, mosaic probability below 1, mosaic9, the Albumentations step, quad, reassigning
``dataset.indices``, and spawned DataLoader workers (with and without the RAM cache).

Every image is a solid gray of its own level (``GRAYS``) with solid coloured rectangles whose class is
their colour, so a box can be checked against the pixels under it, and the image a region came from
can be read off its gray level.
"""
import sys
import types
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from yolo_data import create_dataloader

COLOURS = [(0, 0, 255), (0, 255, 0), (255, 0, 0), (0, 255, 255), (255, 0, 255), (255, 255, 0)]  # BGR per class
# Background of image i.  None is 114 (the letterbox and mosaic pad) and none is 255 - another one or
# 255 - 114, so inverted pixels (the fake Albumentations step below) are told apart from plain ones.
GRAYS = [20, 36, 52, 68, 84, 100, 140, 156, 172, 188, 204, 220]
SIZES = [(160, 80), (120, 120), (80, 160)]  # (w, h): three aspect ratios, so three rect batch shapes
PAD = 114

# No rotation or shear (a rotated box's envelope holds background), no mixup (it blends colours).
BASE = {"hsv_h": 0.015, "hsv_s": 0.7, "hsv_v": 0.4, "degrees": 0.0, "translate": 0.1, "scale": 0.5,
        "shear": 0.0, "perspective": 0.0, "flipud": 0.5, "fliplr": 0.5, "mosaic": 1.0, "mixup": 0.0,
        "copy_paste": 0.0}
NO_HSV = {"hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0}


def hyp(**changes):
    return {**BASE, **changes}


def write_colour_dataset(root: Path) -> Path:
    """12 PNGs (4 of each aspect ratio in SIZES) of gray GRAYS[i] with 1-4 coloured rectangles, one per
    quadrant, and their labels; returns the data.yaml."""
    rng = np.random.default_rng(7)
    for sub in ("images/train", "labels/train"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i, gray in enumerate(GRAYS):
        w, h = SIZES[i % 3]
        img = np.full((h, w, 3), gray, np.uint8)
        rows = []
        for k in range(1 + i % 4):
            cls = int(rng.integers(0, len(COLOURS)))
            x1, y1 = 4 + (k % 2) * (w // 2), 4 + (k // 2) * (h // 2)
            x2, y2 = x1 + int(rng.integers(w // 5, w // 2 - 12)), y1 + int(rng.integers(h // 5, h // 2 - 12))
            img[y1:y2, x1:x2] = COLOURS[cls]
            rows.append(f"{cls} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}")
        cv2.imwrite(str(root / f"images/train/{i:02d}.png"), img)
        (root / f"labels/train/{i:02d}.txt").write_text("\n".join(rows) + "\n")
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nnames: {[str(c) for c in range(6)]}\n")
    return root / "data.yaml"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(write_colour_dataset(tmp_path_factory.mktemp("branches")))


def image_number(path) -> int:
    return int(Path(path).stem)


def hue(bgr) -> int:
    return int(cv2.cvtColor(np.uint8([[bgr]]), cv2.COLOR_BGR2HSV)[0, 0, 0])


def on_colour(img: torch.Tensor, row, colour_of=lambda cls: COLOURS[cls]):
    """Share of the pixels inside a target box (2 px in from its edges) of the colour of its class, by
    hue and saturation, so HSV gains (hue +-1.5%, saturation x0.3..1.7) keep a colour its own; None
    when the box is too small to tell.  ``img``: (3, H, W) uint8 RGB; ``row``: [image, class, x, y, w, h]."""
    _, cls, x, y, w, h = [float(v) for v in row]
    H, W = img.shape[1:]
    x1, y1 = int((x - w / 2) * W) + 2, int((y - h / 2) * H) + 2
    x2, y2 = int((x + w / 2) * W) - 2, int((y + h / 2) * H) - 2
    if x2 - x1 < 3 or y2 - y1 < 3:
        return None
    patch = np.ascontiguousarray(img[:, y1:y2, x1:x2].permute(1, 2, 0).numpy())
    hsv = cv2.cvtColor(patch, cv2.COLOR_RGB2HSV).reshape(-1, 3).astype(int)
    d = np.abs(hsv[:, 0] - hue(colour_of(int(cls))))
    return float(((np.minimum(d, 180 - d) <= 8) & (hsv[:, 1] > 50)).mean())


def check_boxes(imgs: torch.Tensor, targets: torch.Tensor, colour_of=lambda cls: COLOURS[cls]) -> int:
    """Assert every box that can be judged lies on its class's colour and inside the image; returns
    how many were judged."""
    judged = 0
    assert ((targets[:, 2:4] >= 0) & (targets[:, 2:4] <= 1)).all() and (targets[:, 4:] > 0).all()
    for row in targets:
        share = on_colour(imgs[int(row[0])], row, colour_of)
        if share is not None:
            assert share > 0.9, (row.tolist(), share)
            judged += 1
    return judged


def gray_levels(img: torch.Tensor) -> dict:
    """{gray level: pixels} over the uniform inside of gray regions of a (3, H, W) uint8 image: pixels
    with R = G = B equal to their four neighbours (so the blends along edges never count)."""
    a = img.numpy().astype(np.int16)
    gray = (a[0] == a[1]) & (a[1] == a[2])
    v = a[0]
    inner = gray[1:-1, 1:-1] & (v[1:-1, 1:-1] == v[:-2, 1:-1]) & (v[1:-1, 1:-1] == v[2:, 1:-1]) \
        & (v[1:-1, 1:-1] == v[1:-1, :-2]) & (v[1:-1, 1:-1] == v[1:-1, 2:])
    levels, counts = np.unique(v[1:-1, 1:-1][inner], return_counts=True)
    return dict(zip(levels.tolist(), counts.tolist()))


def images_shown(img: torch.Tensor, levels=GRAYS, least=0.01) -> set:
    """Which dataset images' backgrounds cover at least ``least`` of ``img`` (needs HSV off)."""
    found, area = gray_levels(img), img.shape[1] * img.shape[2]
    return {i for i, g in enumerate(levels) if found.get(g, 0) >= least * area}


def items(loader, epochs=(0,)):
    """[(epoch, image (3, H, W), targets (n, 6) with column 0 = 0, path, shapes)] over whole passes."""
    out = []
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        for imgs, targets, paths, shapes in loader:
            for k, path in enumerate(paths):
                t = targets[targets[:, 0] == k].clone()
                t[:, 0] = 0
                out.append((epoch, imgs[k].clone(), t, path, shapes[k]))
    return out


# -- 1. training without mosaic ------------------------------------------------------------------------
def test_rect_training_letterboxes_to_the_batch_shape_with_perspective_hsv_and_flips(data):
    """rect=True, augment=True: no mosaic even with mosaic 1.0; each image letterboxed to its rect
    batch's shape, then random perspective, HSV and flips, boxes still on their colours."""
    loader, ds = create_dataloader(data, 96, 4, 32, augment=True, rect=True, hyp=hyp(), workers=0, shuffle=True,
                                   seed=1, split="train")
    files = list(ds.im_files)
    shapes_seen, judged, own_gray, moved, total = set(), 0, 0, 0, 0
    plain = {p: t for _, _, t, p, _ in items(create_dataloader(data, 96, 4, 32, rect=True, workers=0,
                                                               split="train")[0])}
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        for imgs, targets, paths, shapes in loader:
            batch = {int(ds.batch[files.index(p)]) for p in paths}
            assert len(batch) == 1
            assert tuple(imgs.shape[2:]) == tuple(ds.batch_shapes[batch.pop()])
            shapes_seen.add(tuple(imgs.shape[2:]))
            assert all(s is not None for s in shapes)  # a letterboxed image, never a mosaic (shapes None)
            judged += check_boxes(imgs, targets)
            for k, p in enumerate(paths):
                total += 1
                own_gray += GRAYS[image_number(p)] in gray_levels(imgs[k])  # HSV off would keep it
                mine = targets[targets[:, 0] == k]
                before = plain[p]
                moved += len(mine) != len(before) or not torch.allclose(
                    mine[:, 4:].sort(0).values, before[:, 4:].sort(0).values, atol=2e-3)
    assert shapes_seen == {(64, 96), (96, 96), (96, 64)}  # a mosaic would be 96 x 96 throughout
    assert judged >= 20
    assert own_gray <= total // 4, (own_gray, total)  # the value gain changed the background's gray
    assert moved >= total // 2, (moved, total)  # random scale: box sizes differ from the plain letterbox


def test_mosaic_0_gives_single_letterboxed_images_of_img_size(data):
    loader, ds = create_dataloader(data, 96, 4, 32, augment=True, hyp=hyp(mosaic=0.0, **NO_HSV), workers=0,
                                   shuffle=True, seed=2, split="train")
    got = items(loader, (0, 1))
    judged = 0
    for _, img, t, path, shapes in got:
        assert img.shape == (3, 96, 96) and shapes is not None
        assert images_shown(img) == {image_number(path)}, path  # its own image only, no mosaic tiles
        judged += check_boxes(img[None], t)
    assert len(got) == 24 and judged >= 20


def test_mosaic_half_decides_per_item_and_reproducibly(data):
    def run(seed):
        loader, ds = create_dataloader(data, 96, 4, 32, augment=True, hyp=hyp(mosaic=0.5, **NO_HSV), workers=0,
                                       shuffle=True, seed=seed, split="train")
        return items(loader, (0, 1))

    got = run(3)
    kinds = [shapes is None for _, _, _, _, shapes in got]  # YOLOv5's shapes are None for a mosaic
    assert 0 < sum(kinds) < len(kinds)
    batches = [set(kinds[i:i + 4]) for i in range(0, len(kinds), 4)]
    assert any(len(b) == 2 for b in batches)  # mosaic or not is decided per item, not per batch
    shown = []
    for (_, img, t, path, shapes), mosaic in zip(got, kinds):
        assert img.shape == (3, 96, 96)
        check_boxes(img[None], t)
        if mosaic:
            shown.append(len(images_shown(img)))
        else:
            assert images_shown(img) == {image_number(path)}, path
    assert max(shown) >= 2  # the items said to be mosaics do show several images
    again = run(3)
    assert [s is None for *_, s in again] == kinds
    assert all(torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) and a[3] == b[3] for a, b in zip(got, again))


# -- 2. mosaic9 ----------------------------------------------------------------------------------------
def test_mosaic9_through_the_dataset(data):
    """hyp mosaic9: 1.0 (its probability): 3x3 mosaics of img_size, boxes on their colours, the same
    for the same seed and epoch, other for another seed or epoch.  A 2x2 mosaic never shows more than 4
    images; a 3x3 one often does."""
    def run(seed, epochs=(0,)):
        loader, _ = create_dataloader(data, 96, 4, 32, augment=True, hyp=hyp(mosaic9=1.0, **NO_HSV), workers=0,
                                      shuffle=True, seed=seed, split="train", batch_partners=False)
        return items(loader, epochs)

    got = run(0, (0, 1))
    judged, most = 0, 0
    for _, img, t, _, shapes in got:
        assert img.shape == (3, 96, 96) and shapes is None
        judged += check_boxes(img[None], t)
        most = max(most, len(images_shown(img, least=0.005)))
    assert judged >= 20 and most >= 5, (judged, most)

    def pixels(run_items, epoch):
        return [(p, img.numpy().tobytes()) for e, img, _, p, _ in run_items if e == epoch]

    assert pixels(run(0), 0) == pixels(got, 0)
    assert pixels(run(1), 0) != pixels(got, 0)
    assert sorted(pixels(got, 0)) != sorted(pixels(got, 1))


# -- 3. the Albumentations step ------------------------------------------------------------------------
def fake_albumentations(monkeypatch):
    """A stand-in ``albumentations`` whose Compose inverts the image and records each call (the real
    package is optional and not installed here)."""
    calls = []
    mod = types.ModuleType("albumentations")

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

        def set_random_seed(self, seed):
            pass

        def __call__(self, image):
            calls.append(image.shape)
            return {"image": 255 - image}

    mod.Compose = Compose
    for name in ("Blur", "MedianBlur", "ToGray", "CLAHE"):
        setattr(mod, name, lambda p, name=name: (name, p))
    monkeypatch.setitem(sys.modules, "albumentations", mod)
    return calls


def test_albumentations_step_runs_on_training_items_only(data, monkeypatch):
    calls = fake_albumentations(monkeypatch)
    inverted = [255 - g for g in GRAYS]
    train, ds = create_dataloader(data, 96, 4, 32, augment=True, hyp=hyp(albumentations=True, mosaic=0.5, **NO_HSV),
                                  workers=0, shuffle=True, seed=4, split="train")
    got = items(train)
    assert len(calls) == len(got) == 12
    assert {s is None for *_, s in got} == {True, False}  # after mosaics and single images alike
    for _, img, t, _, _ in got:
        levels = gray_levels(img)
        assert not set(levels) & set(GRAYS + [PAD]) and images_shown(img, inverted)
        check_boxes(img[None], t, colour_of=lambda cls: tuple(255 - c for c in COLOURS[cls]))
    ds[0]
    assert len(calls) == 13  # dataset[i] takes the same step

    # evaluation: the key is ignored, the items are those without it
    kept = len(calls)
    with_key = items(create_dataloader(data, 96, 4, 32, hyp=hyp(albumentations=True), workers=0, split="train")[0])
    without = items(create_dataloader(data, 96, 4, 32, workers=0, split="train")[0])
    assert len(calls) == kept
    assert all(torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) for a, b in zip(with_key, without))
    assert all(images_shown(img) == {image_number(p)} for _, img, _, p, _ in with_key)


# -- 4. quad against pixels ----------------------------------------------------------------------------
def test_quad_images_are_the_first_item_upsampled_or_the_four_tiled(data):
    """Each quad image is made from 4 consecutive items of the batch a quad=False loader with the same
    seed yields: either the first upsampled 2x (bilinear) with its targets, or the 4 tiled
    [[0, 2], [1, 3]] with their targets halved and shifted."""
    kw = dict(augment=True, hyp=hyp(), workers=0, shuffle=True, seed=5, split="train")
    quad, _ = create_dataloader(data, 64, 8, 32, quad=True, **kw)
    plain, _ = create_dataloader(data, 64, 8, 32, **kw)
    shift = {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}  # item -> (right, down) in the 2x2 tiling
    kinds = []
    for epoch in range(6):
        quad.sampler.set_epoch(epoch)
        plain.sampler.set_epoch(epoch)
        q_imgs, q_targets, _, _ = next(iter(quad))
        p_imgs, p_targets, _, _ = next(iter(plain))
        assert q_imgs.shape == (2, 3, 128, 128) and len(quad) == 1  # 12 images // 8, the rest dropped
        assert check_boxes(q_imgs, q_targets) >= 1
        for g in range(2):
            four = [4 * g + k for k in range(4)]
            mine = q_targets[q_targets[:, 0] == g][:, 1:]
            tiled = torch.cat([torch.cat((p_imgs[four[0]], p_imgs[four[1]]), 1),
                               torch.cat((p_imgs[four[2]], p_imgs[four[3]]), 1)], 2)
            if torch.equal(q_imgs[g], tiled):
                rows = []
                for k, b in enumerate(four):
                    t = p_targets[p_targets[:, 0] == b][:, 1:].clone()
                    t[:, 1:3] = (t[:, 1:3] + torch.tensor(shift[k], dtype=t.dtype)) / 2
                    t[:, 3:] /= 2
                    rows.append(t)
                assert torch.allclose(mine, torch.cat(rows), atol=1e-6)
                kinds.append("tiled")
            else:
                first = p_imgs[four[0]].permute(1, 2, 0).numpy()
                up = cv2.resize(first, (128, 128), interpolation=cv2.INTER_LINEAR)  # half-pixel centres too
                diff = np.abs(q_imgs[g].permute(1, 2, 0).numpy().astype(int) - up.astype(int))
                assert diff.max() <= 1, (epoch, g, diff.max())
                assert torch.equal(mine, p_targets[p_targets[:, 0] == four[0]][:, 1:])
                kinds.append("upsampled")
    assert set(kinds) == {"tiled", "upsampled"}, kinds


# -- 5. reassigning dataset.indices ----------------------------------------------------------------
@pytest.mark.parametrize("augment", [True, False])
@pytest.mark.parametrize("workers", [0, 2])
def test_reassigned_indices_are_served_by_the_next_pass(data, augment, workers):
    """After ``dataset.indices = ...`` the next pass serves those images (training: in the batched
    mosaic path; evaluation: pixel for pixel the images named), also from persistent workers; a bad
    assignment raises and leaves the indices in force as they were."""
    loader, ds = create_dataloader(data, 64, 4, 32, augment=augment, hyp=hyp(), workers=workers, split="train")
    files = list(ds.im_files)
    first = items(loader, (0,))
    assert [p for *_, p, _ in first] == files
    new = np.array([(5 * k + 3) % 4 + 4 * (k % 2) for k in range(12)])  # repeats, some images left out
    ds.indices = new
    second = items(loader, (0,))
    assert [p for *_, p, _ in second] == [files[j] for j in new]
    if not augment:
        for (_, img, t, p, _), j in zip(second, new):
            assert torch.equal(img, first[j][1]) and torch.equal(t, first[j][2])
    for bad in (new[:, None], np.append(new, 0), np.full(12, 12), np.full(12, -1)):
        with pytest.raises(ValueError):
            ds.indices = bad
    assert np.array_equal(ds.indices, new)
    assert [p for *_, p, _ in items(loader, (0,))] == [files[j] for j in new]


def test_fractional_indices_are_rejected(data):
    """Before: np.asarray(value, dtype=np.int64) truncated them silently."""
    loader, ds = create_dataloader(data, 64, 4, 32, workers=0, split="train")
    with pytest.raises(ValueError, match="whole numbers"):
        ds.indices = np.arange(12) + 0.5
    with pytest.raises(ValueError, match="whole numbers"):
        ds.indices = ["0"] * 12
    ds.indices = np.arange(12, dtype=np.float32)[::-1]  # whole numbers as floats are image indices
    assert ds.indices[0] == 11


# -- 6. spawn workers end to end -----------------------------------------------------------------------
@pytest.mark.parametrize("cache", [False, "ram"])
def test_spawned_workers_yield_the_batches_of_0_workers(tmp_path, cache):
    """A plain DataLoader with multiprocessing_context='spawn' over create_dataloader's dataset, sampler
    and collate_fn yields exactly the batches of the 0-worker loader.  With cache='ram' the image files
    are deleted first: spawned workers must read every image from the cache they reopen through the
    parent (a RAM cache has no name)."""
    yaml = write_colour_dataset(tmp_path / "spawn")
    loader, ds = create_dataloader(str(yaml), 64, 4, 32, augment=True, hyp=hyp(), workers=0, shuffle=True, seed=6,
                                   split="train", cache=cache)
    loader.sampler.set_epoch(1)
    reference = [(i.clone(), t.clone(), p) for i, t, p, _ in loader]
    if cache:
        for f in (tmp_path / "spawn/images/train").iterdir():
            f.unlink()
    spawned = DataLoader(ds, batch_size=4, sampler=loader.sampler, collate_fn=loader.collate_fn, num_workers=2,
                         multiprocessing_context="spawn")
    loader.sampler.set_epoch(1)
    got = [(i, t, p) for i, t, p, _ in spawned]
    assert len(got) == len(reference) == 3
    for (i1, t1, p1), (i2, t2, p2) in zip(reference, got):
        assert p1 == p2 and torch.equal(i1, i2) and torch.equal(t1, t2)
