"""device.colour: the HSV step in torch ops gives exactly the CPU path's pixels
(photometric.apply_hsv with to=cv2.COLOR_HSV2RGB), on photos, on a grid of every colour kind, in
batches of different gains, at widths that leave OpenCV a scalar tail in each row, on every device
this machine has."""
import cv2
import numpy as np
import pytest
import torch

from yolo_data.augment import photometric
from yolo_data.device import apply_hsv
from yolo_data.device.colour import opencv_block

from conftest import SHARED

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# hue, saturation, value multipliers: YOLOv5's extremes (hsv_h 0.5, hsv_s 1, hsv_v 0.7 and beyond),
# gains of exactly 1 (OpenCV's round trip alone), and random draws from YOLOv5's default ranges.
GAINS = np.concatenate([
    [[1.0, 1.0, 1.0], [1.5, 0.0, 0.3], [0.5, 2.0, 1.7], [1.5, 2.0, 0.3], [0.5, 0.0, 1.7], [0.0, 1.0, 1.0],
     [1.0, 1.0, 0.0], [1.23, 0.77, 1.41]],
    np.random.default_rng(0).uniform(-1, 1, (8, 3)) * [0.015, 0.7, 0.4] + 1,
])


def photos():
    """Three coco128 training photos, BGR as cv2 reads them, 640, 481 and 381 wide (OpenCV's rows with
    and without a scalar tail); skips without ../shared."""
    folder = SHARED / "coco128" / "images" / "train2017"
    paths = [folder / f"0000000000{n}.jpg" for n in ("09", "36", "49")]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"{folder} is not available (a clone without ../shared)")
    return [cv2.imread(str(p)) for p in paths]


def grid_image(width: int = 100) -> np.ndarray:
    """(H, width, 3) uint8 BGR: every colour of a 0, 15, .., 255 grid in each channel, every grey
    level, the pure and secondary colours at every level, and black (v = 0, s = 0)."""
    levels = np.arange(0, 256, 15)
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(-1, 3)
    ramp = np.arange(256)[:, None]
    corners = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 1], [1, 1, 1]])
    pure = (ramp[None] * corners[:, None]).reshape(-1, 3)
    pixels = np.concatenate([grid, pure, [[0, 0, 0]]]).astype(np.uint8)
    pixels = np.concatenate([pixels, np.zeros((-len(pixels) % width, 3), np.uint8)])
    return pixels.reshape(-1, width, 3)


def cpu_path(bgr: np.ndarray, gains: np.ndarray) -> np.ndarray:
    """(3, H, W) uint8 RGB from the CPU path."""
    return photometric.apply_hsv(bgr, gains, to=cv2.COLOR_HSV2RGB).transpose(2, 0, 1)


def on_device(bgrs, gains: np.ndarray, device: str) -> np.ndarray:
    """(B, 3, H, W) uint8 RGB from the device path, for BGR images of one size and (B, 3) gains."""
    images = torch.from_numpy(np.stack([b[..., ::-1].transpose(2, 0, 1) for b in bgrs])).to(device)
    out = apply_hsv(images, torch.from_numpy(np.asarray(gains, np.float64)))
    assert out.device == images.device and out.dtype == torch.uint8 and out.shape == images.shape
    return out.cpu().numpy()


@pytest.mark.parametrize("device", DEVICES)
def test_photos_give_the_cpu_paths_pixels_exactly_for_every_gain(device):
    """Bound: identical on every value (OpenCV's integer RGB->HSV, its float32 HSV->RGB with the fused
    multiply-add of its vector code and the rounding of its row tails).  Each photo's top 200 rows, one
    batch of every gain."""
    for bgr in photos():
        bgr = np.ascontiguousarray(bgr[:200])
        got = on_device([bgr] * len(GAINS), GAINS, device)
        for out, gains in zip(got, GAINS):
            expect = cpu_path(bgr, gains)
            assert np.array_equal(out, expect), (bgr.shape, gains, np.abs(out.astype(int) - expect).max(),
                                                 (out != expect).mean())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", [100, 96, 33])
def test_every_kind_of_colour_gives_the_cpu_paths_pixels_exactly(device, width):
    """A grid over the RGB cube, greys (s = 0), pure colours and black (v = 0), at widths with and
    without OpenCV's scalar tail (96 is three of its 32-pixel blocks on x86)."""
    bgr = grid_image(width)
    for gains in GAINS:
        expect = cpu_path(bgr, gains)
        got = on_device([bgr], gains[None], device)[0]
        assert np.array_equal(got, expect), (width, gains, np.argwhere(got != expect)[:5])


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_with_a_gain_per_item_equals_each_item_alone(device):
    """Three crops of one size, each with its own gains, in one call: each equals the CPU path and the
    device path on that item alone."""
    crops = [p[:320, :381] for p in photos()]
    gains = GAINS[[1, 2, 12]]
    batch = on_device(crops, gains, device)
    for i, (crop, g) in enumerate(zip(crops, gains)):
        assert np.array_equal(batch[i], cpu_path(np.ascontiguousarray(crop), g)), i
        assert np.array_equal(batch[i], on_device([crop], g[None], device)[0]), i


def test_the_input_is_left_alone_any_strides_serve_and_shapes_are_checked():
    images = torch.from_numpy(grid_image(64)[..., ::-1].transpose(2, 0, 1).copy())[None]
    before = images.clone()
    apply_hsv(images, torch.tensor([[0.5, 2.0, 1.7]], dtype=torch.float64))
    assert torch.equal(images, before)
    strided = images.permute(0, 1, 3, 2)  # a view with other strides gives the pixels of its copy
    gains = torch.tensor([[1.5, 0.0, 0.3]], dtype=torch.float64)
    assert torch.equal(apply_hsv(strided, gains), apply_hsv(strided.contiguous(), gains))
    with pytest.raises(ValueError, match="uint8"):
        apply_hsv(images.float(), torch.ones(1, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="gains"):
        apply_hsv(images, torch.ones(2, 3, dtype=torch.float64))


def test_batched_tables_are_the_tables_of_each_row():
    rows = photometric.hsv_tables(GAINS)
    for i, gains in enumerate(GAINS):
        for batched, single in zip(rows, photometric.hsv_tables(gains)):
            assert batched.shape == (len(GAINS), 256) and np.array_equal(batched[i], single)


def test_opencv_block_is_a_vector_width_in_pixels():
    assert opencv_block() in (8, 16, 32, 64, 128)
