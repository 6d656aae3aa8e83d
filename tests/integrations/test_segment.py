"""Segmentation batches (yolo_data.integrations.yolov5_segment): instance masks from polygons, checked against the pixels
they were drawn on, in evaluation (letterbox) and training (mosaic, perspective, flips)."""
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from conftest import copy_shared
from yolo_data.geometry.masks import instance_masks, overlap_mask, polygon_mask
from yolo_data.integrations.yolov5_segment import LoadImagesAndLabelsAndMasks, create_dataloader

# BGR colour per class; none of them is gray (the letterbox and mosaic fill) or the black background
COLOURS = [(0, 0, 255), (0, 255, 0), (255, 0, 0), (0, 255, 255), (255, 0, 255), (255, 255, 0)]


def write_item(root: Path, name: str, img: np.ndarray, rows, split: str = "train") -> None:
    """images/<split>/<name>.png and labels/<split>/<name>.txt; ``rows``: (class, (k, 2) pixel polygon)
    or None for no label file."""
    h, w = img.shape[:2]
    (root / "images" / split).mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(root / "images" / split / f"{name}.png"), img)
    if rows is not None:
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        lines = [f"{c} " + " ".join(f"{x / w:.6f} {y / h:.6f}" for x, y in poly) for c, poly in rows]
        (root / "labels" / split / f"{name}.txt").write_text("".join(line + "\n" for line in lines))


def write_yaml(root: Path, split: str = "train") -> Path:
    (root / "data.yaml").write_text(f"path: .\n{split}: images/{split}\nval: images/{split}\n"
                                    f"names: {[str(c) for c in range(len(COLOURS))]}\n")
    return root / "data.yaml"


def star(cx, cy, r_out, r_in, k=5, turn=0.0):
    """A (2k, 2) star polygon (not convex, so a fill of its envelope would be caught)."""
    a = turn + np.arange(2 * k) * np.pi / k
    r = np.where(np.arange(2 * k) % 2 == 0, r_out, r_in)
    return np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], 1)


@pytest.fixture
def shapes_dataset(tmp_path):
    """10 black images, each with 2-3 non-overlapping solid stars and triangles; class = colour."""
    rng = np.random.default_rng(0)
    root = tmp_path / "shapes"
    for i in range(10):
        w, h = [(200, 120), (120, 200), (160, 160)][i % 3]
        img = np.zeros((h, w, 3), np.uint8)
        rows = []
        cells = [(0, 0), (1, 0), (0, 1)]  # one shape per quadrant: no overlaps
        for k in range(int(rng.integers(2, 4))):
            cls = int(rng.integers(0, len(COLOURS)))
            qx, qy = cells[k]
            cx, cy, s = (qx + 0.5) * w / 2, (qy + 0.5) * h / 2, min(w, h) / 4 - 4
            poly = star(cx, cy, s, s / 2, turn=rng.random()) if k % 2 == 0 else \
                np.array([[cx - s, cy + s], [cx + s, cy + s * 0.6], [cx - s * 0.3, cy - s]])
            cv2.fillPoly(img, [np.round(poly).astype(np.int32)], COLOURS[cls])
            rows.append((cls, poly))
        write_item(root, f"{i:02d}", img, rows)
    return write_yaml(root)


def colour_of(imgs: torch.Tensor, b: int, cls: int, tol: int = 40) -> np.ndarray:
    """(H, W) bool: pixels of batch image ``b`` (RGB) within ``tol`` of class ``cls``'s colour in
    every channel."""
    rgb = np.array(COLOURS[cls][::-1])
    return (np.abs(imgs[b].permute(1, 2, 0).numpy().astype(int) - rgb).max(-1) <= tol)


def shrink(m: np.ndarray, r: int, share: float = 0.5) -> np.ndarray:
    """(H, W) bool -> (H // r, W // r) bool: more than ``share`` of the block is set."""
    h, w = m.shape[0] // r, m.shape[1] // r
    return m[:h * r, :w * r].reshape(h, r, w, r).mean((1, 3)) > share


def misplaced(m: np.ndarray, drawn: np.ndarray, tol: int = 1, blended: np.ndarray = None) -> int:
    """Pixels where mask ``m`` and the ``drawn`` pixels disagree by more than ``tol`` pixels: drawn
    pixels deeper than ``tol`` inside the shape that the mask misses, plus mask pixels farther than
    ``tol`` from it (its edge may differ: fills include their edges, resampling blends them).
    ``blended``: the drawn pixels with those half blended into the background (a warp's linear
    resampling thins sharp tips out of ``drawn``), for the second count; default ``drawn``."""
    k = np.ones((2 * tol + 1, 2 * tol + 1), np.uint8)
    d = drawn.astype(np.uint8)
    loose = d if blended is None else blended.astype(np.uint8)
    return int((cv2.erode(d, k).astype(bool) & ~m).sum() + (m & ~cv2.dilate(loose, k).astype(bool)).sum())


def near(box, hw, margin: int) -> np.ndarray:
    """(h, w) bool: a normalised [x, y, w, h] box on an (h, w) mask, grown by ``margin`` pixels."""
    x, y, w, h = box
    H, W = hw
    out = np.zeros(hw, bool)
    out[max(int((y - h / 2) * H) - margin, 0):int((y + h / 2) * H) + margin + 1,
        max(int((x - w / 2) * W) - margin, 0):int((x + w / 2) * W) + margin + 1] = True
    return out


def per_instance(masks, targets, overlap: bool):
    """[(image index, class, (h, w) bool mask, normalised [x, y, w, h] box)] per target row, for either
    mask layout."""
    out = []
    for row, t in enumerate(targets):
        b = int(t[0])
        if overlap:
            first = int((targets[:, 0] == b).nonzero()[0, 0])
            m = masks[b].numpy() == row - first + 1
        else:
            m = masks[row].numpy() > 0
        out.append((b, int(t[1]), m, t[2:].numpy()))
    return out


# -- the rasteriser on its own ------------------------------------------------------------------------
def test_rectangle_mask_golden_pixels_at_ratio_1_and_4():
    # a fill includes its edges: corners (8, 8) and (24, 40) cover columns 8..24 and rows 8..40; shrinking
    # by 4 keeps a block when the 2 x 2 pixels at its centre (offsets 1 and 2) are mostly set
    rect = np.array([[8, 8], [24, 8], [24, 40], [8, 40]], np.float32)
    full = np.zeros((64, 64), np.uint8)
    full[8:41, 8:25] = 1
    assert np.array_equal(polygon_mask((64, 64), rect, 1), full)
    small = np.zeros((16, 16), np.uint8)
    small[2:10, 2:6] = 1
    assert np.array_equal(instance_masks((64, 64), [rect], 4)[0], small)
    assert np.array_equal(polygon_mask((64, 64), rect, 4), small)


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_blockwise_rasterising_equals_whole_image_fill(ratio):
    """Each polygon filled only under its bounding box gives the same mask as a fill of the whole image
    shrunk (points partly outside the image, odd sizes that do not divide by the ratio)."""
    rng = np.random.default_rng(ratio)
    for t in range(60):
        h, w = int(rng.integers(3, 40)) * ratio + (t % 3 == 0) * int(rng.integers(0, ratio)), int(rng.integers(3, 40)) * ratio
        polys = [(rng.random((int(rng.integers(3, 9)), 2)) * [w * 1.4, h * 1.4] - [w * 0.2, h * 0.2]).astype(np.float32)
                 for _ in range(3)]
        ref = np.stack([polygon_mask((h, w), p, ratio) for p in polys])
        assert np.array_equal(instance_masks((h, w), polys, ratio), ref)
        m, order = overlap_mask((h, w), polys, ratio)
        painted = np.zeros_like(ref[0])
        for rank, i in enumerate(order, 1):
            painted[ref[i] > 0] = rank
        assert np.array_equal(m, painted)
        areas = ref.reshape(3, -1).sum(1).astype(np.int64)
        nonzero = areas[order][areas[order] > 0]
        assert (np.diff(nonzero) <= 0).all()  # by area, descending


def test_overlap_mask_keeps_more_than_255_instances_apart():
    # 300 separate 6 x 6 squares: their ranks 1..300 must all survive (uint8 would wrap)
    polys = [np.array([[x, y], [x + 5, y], [x + 5, y + 5], [x, y + 5]], np.float32)
             for y in range(0, 150, 10) for x in range(0, 200, 10)]
    m, order = overlap_mask((150, 200), polys, 1)
    assert len(polys) == 300 and m.dtype == np.int32
    assert sorted(np.unique(m[m > 0]).tolist()) == list(range(1, 301))
    assert sorted(order.tolist()) == list(range(300))
    m8, _ = overlap_mask((150, 200), polys[:255], 1)
    assert m8.dtype == np.uint8 and m8.max() == 255


# -- evaluation: letterboxed masks on the letterboxed pixels -----------------------------------------
@pytest.mark.parametrize("ratio", [1, 4])
@pytest.mark.parametrize("overlap", [False, True])
def test_eval_masks_cover_their_drawn_shapes_after_letterbox(shapes_dataset, ratio, overlap):
    loader, ds = create_dataloader(str(shapes_dataset), 160, 4, 32, augment=False, workers=0,
                                   mask_downsample_ratio=ratio, overlap_mask=overlap, split="train")
    seen, tol = 0, 2 if ratio == 1 else 1  # full-size pixels: fill edges, truncated points, area resizing
    for imgs, targets, paths, shapes, masks in loader:
        assert masks.shape == ((len(imgs) if overlap else len(targets)), 160 // ratio, 160 // ratio)
        for b, cls, m, box in per_instance(masks, targets, overlap):
            # other shapes of the same colour lie in other quadrants: compare near the target's box
            drawn = shrink(colour_of(imgs, b, cls), ratio) & near(box, m.shape, 2)
            assert m.sum() > drawn.sum() / 2 and misplaced(m, drawn, tol) == 0, (paths[b], cls)
            seen += 1
    assert seen == ds.store.num_boxes()


# -- overlap order, many instances, empty images -------------------------------------------------------
def square(x, y, s):
    return np.array([[x, y], [x + s, y], [x + s, y + s], [x, y + s]], np.float64)


@pytest.mark.parametrize("small_first", [True, False])
def test_overlap_puts_the_smaller_instance_on_top_and_reorders_targets(tmp_path, small_first):
    img = np.zeros((128, 128, 3), np.uint8)
    big, small = (1, square(16, 16, 96)), (2, square(40, 40, 24))
    write_item(tmp_path, "a", img, [small, big] if small_first else [big, small])
    loader, _ = create_dataloader(str(write_yaml(tmp_path)), 128, 1, 32, augment=False, workers=0,
                                  mask_downsample_ratio=1, overlap_mask=True, split="train")
    imgs, targets, _, _, masks = next(iter(loader))
    assert targets[:, 1].tolist() == [1, 2]  # by area, descending: the big square is instance 1
    m = masks[0].numpy()
    assert masks.shape == (1, 128, 128)
    assert m[52, 52] == 2 and m[20, 20] == 1 and m[5, 5] == 0 and m[120, 120] == 0
    # each target's box is where its value is
    for k, (_, _, x, y, w, h) in enumerate(targets.tolist(), 1):
        ys, xs = np.nonzero(m >= k) if k == 1 else np.nonzero(m == k)
        assert abs(xs.min() - (x - w / 2) * 128) <= 1 and abs(ys.max() - (y + h / 2) * 128) <= 1


@pytest.mark.parametrize("overlap", [False, True])
def test_more_than_255_instances_stay_distinct_in_the_batch(tmp_path, overlap):
    img = np.zeros((160, 320, 3), np.uint8)
    rows = [(0, square(x, y, 5)) for y in range(2, 150, 10) for x in range(2, 320, 16)]  # 15 x 20 = 300
    write_item(tmp_path, "many", img, rows)
    write_item(tmp_path, "few", img, rows[:3])
    loader, _ = create_dataloader(str(write_yaml(tmp_path)), 320, 2, 32, augment=False, workers=0,
                                  mask_downsample_ratio=1, overlap_mask=overlap, split="train")
    imgs, targets, paths, _, masks = next(iter(loader))
    many = [Path(p).stem for p in paths].index("many")
    assert (targets[:, 0] == many).sum() == 300
    if overlap:
        assert masks.dtype == torch.int32 and masks.shape == (2, 320, 320)  # letterboxed square
        values = masks[many][masks[many] > 0].unique()
        assert values.tolist() == list(range(1, 301))
    else:
        assert masks.dtype == torch.uint8 and masks.shape == (len(targets), 320, 320)
        rows_many = masks[targets[:, 0] == many]
        assert (rows_many.flatten(1).sum(1) > 0).all() and rows_many.sum(0).max() == 1  # all there, apart


@pytest.mark.parametrize("ratio", [1, 4])
@pytest.mark.parametrize("overlap", [False, True])
def test_images_without_instances_get_empty_masks(tmp_path, ratio, overlap):
    img = np.zeros((96, 96, 3), np.uint8)
    write_item(tmp_path, "a_empty", img, [])
    write_item(tmp_path, "b_nolabel", img, None)
    write_item(tmp_path, "c_one", img, [(0, square(10, 10, 40))])
    loader, _ = create_dataloader(str(write_yaml(tmp_path)), 96, 3, 32, augment=False, workers=0,
                                  mask_downsample_ratio=ratio, overlap_mask=overlap, split="train")
    imgs, targets, paths, _, masks = next(iter(loader))
    assert [Path(p).stem for p in paths] == ["a_empty", "b_nolabel", "c_one"] and targets[:, 0].tolist() == [2]
    assert masks.shape == ((3 if overlap else 1), 96 // ratio, 96 // ratio) and masks.dtype == torch.uint8
    if overlap:
        assert masks[:2].sum() == 0 and masks[2].max() == 1
    else:
        assert masks[0].sum() > 0
    # one image alone, as YOLOv5-seg gives it: (1 if overlap else 0, h/r, w/r) zeros
    ds = LoadImagesAndLabelsAndMasks(str(tmp_path / "images" / "train"), 96, 1, downsample_ratio=ratio,
                                     overlap=overlap)
    item = ds[0]
    assert item[4]["masks"].shape == ((1 if overlap else 0), 96 // ratio, 96 // ratio)
    assert LoadImagesAndLabelsAndMasks.collate_fn([ds[0], ds[2]])[4].shape == masks[[0, 2] if overlap else [0]].shape


# -- training: masks follow the pixels through mosaic, perspective and flips ---------------------------
GEOMETRY = {"hsv_h": 0, "hsv_s": 0, "hsv_v": 0, "mixup": 0, "copy_paste": 0, "mosaic": 1.0, "degrees": 15,
            "translate": 0.1, "scale": 0.4, "shear": 3, "perspective": 0.0, "flipud": 0.5, "fliplr": 0.5}


def check_masks_on_pixels(imgs, targets, masks, overlap, ratio, tol):
    """Per image and class: the union of that class's masks against the pixels of its colour."""
    checked = 0
    for b in range(len(imgs)):
        for cls in targets[targets[:, 0] == b][:, 1].unique().int().tolist():
            union = np.zeros(masks.shape[1:], bool)
            for bb, c, m, _ in per_instance(masks, targets, overlap):
                if bb == b and c == cls:
                    union |= m
            drawn = shrink(colour_of(imgs, b, cls), ratio)
            # half blended: each class colour is 255 from every other and 141 from the gray fill
            blended = shrink(colour_of(imgs, b, cls, tol=128), ratio, share=0)
            assert misplaced(union, drawn, tol, blended) <= 2, (b, cls)  # a stray pixel at a thin tip
            checked += 1
    return checked


@pytest.mark.parametrize("mosaic", [1.0, 0.0])
@pytest.mark.parametrize("ratio,overlap", [(1, False), (4, True)])
def test_training_masks_follow_mosaic_perspective_and_flips(shapes_dataset, mosaic, ratio, overlap):
    hyp = dict(GEOMETRY, mosaic=mosaic)
    loader, _ = create_dataloader(str(shapes_dataset), 160, 5, 32, augment=True, hyp=hyp, workers=0, seed=3,
                                  mask_downsample_ratio=ratio, overlap_mask=overlap, split="train", shuffle=True)
    checked = 0
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for imgs, targets, paths, shapes, masks in loader:
            assert masks.shape[1:] == (160 // ratio, 160 // ratio)
            assert len(masks) == (len(imgs) if overlap else len(targets))
            # a rotated, enlarged edge is resampled over up to 3 pixels
            checked += check_masks_on_pixels(imgs, targets, masks, overlap, ratio, 3 if ratio == 1 else 1)
    assert checked > 20


def test_training_batches_equal_for_0_and_2_workers(shapes_dataset):
    def run(workers):
        loader, _ = create_dataloader(str(shapes_dataset), 160, 4, 32, augment=True, hyp=GEOMETRY, workers=workers,
                                      seed=5, mask_downsample_ratio=4, overlap_mask=True, split="train", shuffle=True)
        out = []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            out += [(i.clone(), t.clone(), p, m.clone()) for i, t, p, _, m in loader]
        return out

    a, b = run(0), run(2)
    assert len(a) == len(b) == 6
    for (i1, t1, p1, m1), (i2, t2, p2, m2) in zip(a, b):
        assert p1 == p2 and torch.equal(i1, i2) and torch.equal(t1, t2) and torch.equal(m1, m2)
    assert any(m.max() > 1 for *_, m in a)  # overlap masks with several instances were compared


@pytest.mark.parametrize("overlap", [False, True])
def test_coco128_seg_batches_are_consistent(tmp_path, overlap):
    root = copy_shared("coco128-seg", tmp_path)
    loader, ds = create_dataloader(str(root / "data.yaml"), 320, 16, 32, augment=False, workers=0, rect=True, pad=0.5,
                                   mask_downsample_ratio=4, overlap_mask=overlap, split="val")
    images = 0
    for imgs, targets, paths, shapes, masks in loader:
        h, w = imgs.shape[2:]
        assert masks.shape == ((len(imgs) if overlap else len(targets)), h // 4, w // 4)
        for b, cls, m, box in per_instance(masks, targets, overlap):
            x, y, bw, bh = box
            if bw * w > 16 and bh * h > 16:  # a mask lies within its box (1 mask pixel of slack)
                assert m.sum() > 0 and not (m & ~near(box, m.shape, 1)).any()
        if overlap:  # ranks run 1..n per image, larger instances first
            for b in range(len(imgs)):
                n = int((targets[:, 0] == b).sum())
                assert int(masks[b].max()) <= n
                areas = [int((masks[b] == k).sum()) for k in range(1, n + 1)]
                visible = [a for a in areas if a]
                assert len(visible) >= n * 0.8
        images += len(imgs)
    assert images == len(ds) == 32


# -- Ultralytics' mask rule ---------------------------------------------------------------------------------
def test_resample_outline_keeps_the_vertices_and_spaces_points_by_vertex_index():
    from yolo_data.geometry.masks import resample_outline
    square = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], np.float32)
    pts = resample_outline(square, 22)  # 17 evenly spaced over the 4 edges (index steps of 1/4) + 5 vertices
    assert pts.shape == (22, 2) and pts.dtype == np.float32
    for v in np.concatenate([square, square[:1]]):  # every vertex, and the closing point
        assert (np.abs(pts - v).max(1) == 0).any()
    edge = pts[(pts[:, 1] == 0) & (pts[:, 0] > 0) & (pts[:, 0] < 10), 0]  # inside the first edge
    np.testing.assert_allclose(np.sort(edge), [2.5, 5, 7.5], atol=1e-5)
    assert np.array_equal(resample_outline(pts, 22), pts)
    long = resample_outline(np.random.default_rng(0).uniform(0, 9, (30, 2)), 8)  # more points than asked
    assert long.shape == (8, 2)


def test_the_ultralytics_rule_draws_resampled_polygons_at_the_whole_pixel_border(tmp_path):
    from yolo_data import Settings, YoloDataset
    from yolo_data.geometry.masks import resample_outline
    img = np.zeros((61, 100, 3), np.uint8)  # 100 x 61 in 128 x 128: 67 rows of padding, 33.5 above
    write_item(tmp_path, "a", img, [(0, star(50, 30, 28, 12))])
    yaml = write_yaml(tmp_path)
    masks = {}
    for rule in ("yolov5", "ultralytics"):
        ds = YoloDataset(str(yaml), Settings.evaluation(split="train", img_size=128, task="segment", mask_ratio=1,
                                                        overlap_mask=False, mask_rule=rule))
        item = ds[0]
        masks[rule] = item[4]["masks"][0].numpy()
        (h0, w0), ((rh, rw), plan_pad) = item[3]
    assert plan_pad[1] % 1 == 0.5  # YOLOv5's half-pixel offset; Ultralytics' border is whole pixels
    poly = ds.segments[0][0] * np.array([rw * w0, rh * h0], np.float32) + np.array(plan_pad, np.float32)
    np.testing.assert_array_equal(masks["yolov5"], polygon_mask((128, 128), poly))
    whole = poly + np.array([0, round(plan_pad[1] - 0.1) - plan_pad[1]], np.float32)
    np.testing.assert_array_equal(masks["ultralytics"], polygon_mask((128, 128), resample_outline(whole, 1000)))
    assert not np.array_equal(masks["yolov5"], masks["ultralytics"])
