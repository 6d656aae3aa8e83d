"""The index and the mappers without files: a store made in memory, images from a stand-in source."""
import numpy as np
import pytest

from yolo_data.augment.hyp import load_hyp
from yolo_data.images.load import ImageDecodeError, ImageReadError, ImageSource, LoadedImage
from yolo_data.items.index import build_index
from yolo_data.settings import Settings
from yolo_data.labels.verify import PairRecord
from yolo_data.items.mapping import EvalMapper, DrawKey, TrainMapper, TrainSettings
from yolo_data.labels.store import LabelStore
from yolo_data.loading.tensors import BatchImages

# (h, w), boxes [class, x, y, w, h] normalised
IMAGES = [((40, 80), [[0, 0.5, 0.5, 0.5, 0.5]]), ((80, 40), [[1, 0.25, 0.25, 0.2, 0.2], [2, 0.7, 0.7, 0.2, 0.2]]),
          ((60, 60), []), ((50, 100), [[3, 0.5, 0.5, 1.0, 1.0]])]


def store():
    return LabelStore.from_records([PairRecord(f"/nowhere/{i}.jpg", hw, np.array(b, np.float32).reshape(-1, 5))
                                    for i, (hw, b) in enumerate(IMAGES)])


class Solid:
    """An ImageSource stand-in: image i is filled with the value 10 * (i + 1), at long side img_size."""

    channels, keep16 = 3, False  # colour images of 8 bits, as an ImageSource of a colour dataset

    def __init__(self, st, img_size):
        self.st, self.img_size, self.calls = st, img_size, []

    def __call__(self, i):
        self.calls.append(i)
        h0, w0 = (int(v) for v in self.st.shapes_hw[i])
        r = self.img_size / max(h0, w0)
        h, w = round(h0 * r), round(w0 * r)
        return LoadedImage(np.full((h, w, 3), 10 * (i + 1), np.uint8), (h0, w0), (h, w))


def test_index_filters_and_rect_order_with_shapes_of_the_global_batch():
    ix = build_index(store(), ["a"], Settings.evaluation(img_size=64, min_items=1), 2)
    assert [ix.store.im_file(i) for i in range(len(ix))] == ["/nowhere/0.jpg", "/nowhere/1.jpg", "/nowhere/3.jpg"]
    assert ix.batch.tolist() == [0, 0, 1] and ix.batch_shapes is None and ix.shape_of(2) == 64
    single = build_index(store(), [], Settings.evaluation(single_cls=True), 16)
    assert set(single.store.labels[:, 0]) == {0} and single.num_classes() == 1
    assert build_index(store(), [], Settings.evaluation(), 16).num_classes() == 4  # no names: largest id + 1
    rect = build_index(store(), [], Settings.evaluation(img_size=64, rect=True, stride=32), 2)
    # sorted by h / w: 100x50 (0.5), 80x40 (0.5), 60x60 (1), 40x80 (2)
    assert sorted(rect.store.im_file(i) for i in range(2)) == ["/nowhere/0.jpg", "/nowhere/3.jpg"]
    assert rect.shape_of(0).tolist() == [32, 64] and rect.shape_of(3).tolist() == [64, 64]


def test_eval_mapper_letterboxes_without_enlarging_and_places_the_boxes():
    ix = build_index(store(), [], Settings.evaluation(img_size=64), 16)
    src = Solid(ix.store, 32)  # images smaller than img_size: evaluation never enlarges them
    out = BatchImages(1)
    img, targets, path, shapes = EvalMapper(ix, src)(0, DrawKey(0), out, 0)
    assert tuple(img.shape) == (3, 64, 64) and path == "/nowhere/0.jpg"
    assert shapes == ((40, 80), ((16 / 40, 32 / 80), (16.0, 24.0)))
    content = img[0].numpy()
    assert (content[24:40, 16:48] == 10).all() and (content[:24] == 114).all()
    # the box [0.5, 0.5, 0.5, 0.5] of a 32x16 content at (16, 24): centre (32, 32), 16 x 8 pixels of 64
    np.testing.assert_allclose(targets.numpy(), [[0, 0, 0.5, 0.5, 0.25, 0.125]], atol=1e-6)


def test_train_mapper_without_augmentation_is_the_enlarging_letterbox_and_keys_its_randomness():
    ix = build_index(store(), [], Settings.evaluation(img_size=64), 16)
    flat = load_hyp({k: 0.0 for k in ("degrees", "translate", "scale", "shear", "perspective", "hsv_h", "hsv_s",
                                      "hsv_v", "fliplr", "flipud", "mosaic", "mixup")})
    m = TrainMapper(ix, Solid(ix.store, 64), TrainSettings(flat, 64, mosaic=True))
    img, targets, _, shapes = m(1, DrawKey(epoch=0), BatchImages(1), 0)
    assert tuple(img.shape) == (3, 64, 64) and shapes[0] == (80, 40)
    assert (img.numpy()[:, :, 16:48] == 20).all()  # content 32 x 64, centred
    np.testing.assert_allclose(targets[:, 1].numpy(), [1, 2])
    # the key is an input: another epoch or draw gives another item once augmentation is on
    lively = TrainMapper(ix, Solid(ix.store, 64), TrainSettings(load_hyp(None), 64, mosaic=True))
    pix = lambda key: lively(1, key, BatchImages(1), 0)[0].numpy().copy()  # noqa: E731
    assert np.array_equal(pix(DrawKey(3, 5)), pix(DrawKey(3, 5)))
    assert not np.array_equal(pix(DrawKey(3, 5)), pix(DrawKey(4, 5)))
    assert not np.array_equal(pix(DrawKey(3, 5)), pix(DrawKey(3, 6)))


def test_train_mapper_batch_decodes_each_image_once_and_draws_partners_in_the_group():
    ix = build_index(store(), [], Settings.evaluation(img_size=64), 16)
    src = Solid(ix.store, 64)
    m = TrainMapper(ix, src, TrainSettings(load_hyp({"mosaic": 1.0}), 64, mosaic=True))
    items = m.batch([0, 1, 2, 3], [DrawKey(0, d) for d in range(4)], [0, 0, 0, 0], BatchImages(4))
    assert len(items) == 4 and sorted(set(src.calls)) == [0, 1, 2, 3] and len(src.calls) == 4
    src.calls.clear()
    m.batch([0, 1], [DrawKey(0, 0), DrawKey(0, 1)], [0, 0], BatchImages(2))  # a group of 2 borrows from all
    assert set(src.calls) - {0, 1}


def test_image_source_reports_an_image_that_cannot_be_decoded_not_one_that_cannot_be_read(tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image at all")
    st = LabelStore.from_records([PairRecord(str(tmp_path / "gone.jpg"), (10, 10)), PairRecord(str(broken), (10, 10))])
    told = []
    src = ImageSource(st, 32, linear=True, on_failure=told.append)
    with pytest.raises(ImageReadError, match="gone.jpg.*cannot be read"):
        src(0)
    assert told == []  # a missing file is no fact about its bytes
    with pytest.raises(ImageDecodeError, match="broken.jpg.*cannot be decoded"):
        src(1)
    assert len(told) == 1 and told[0].path == str(broken) and told[0].size == 19


def test_rect_boxes_are_scaled_in_float64_as_yolov5_scales_them():
    """YOLOv5 scales float32 labels by NumPy float64 ratios (float64 arithmetic, stored as float32).
    A rect shape given as Python ints once made it float32 arithmetic: targets 1e-7 off YOLOv5's in
    benchmarks/compat/parity_yolov5.py (320 rect)."""
    from yolo_data.geometry.boxes import xywhn_to_xyxy
    from yolo_data.loading.tensors import targets_of
    rng = np.random.default_rng(0)
    xywh = np.concatenate([rng.uniform(0.3, 0.7, (200, 2)), rng.uniform(0.01, 0.3, (200, 2))], 1)
    labels = np.concatenate([np.zeros((200, 1)), xywh], 1).astype(np.float32)
    st = LabelStore.from_records([PairRecord("/nowhere/a.jpg", (251, 333), labels),
                                  PairRecord("/nowhere/b.jpg", (250, 333), labels[:1])])
    ix = build_index(st, [], Settings.evaluation(img_size=320, rect=True, stride=32), 2)
    k = [ix.store.im_file(i) for i in range(2)].index("/nowhere/a.jpg")
    solid = Solid(ix.store, 320)
    _, targets, _, ((h0, w0), ((rh, rw), (padw, padh))) = EvalMapper(ix, solid)(k, DrawKey(0), BatchImages(1), 0)
    (h, w) = solid(k).hw
    shape = ix.batch_shapes[ix.batch[k]]
    r = min(shape[0] / h, shape[1] / w)  # NumPy float64, as in YOLOv5's letterbox
    y = labels[:, 1:].copy()  # float32, as YOLOv5's labels
    x = labels[:, 1:]
    y[:, 0] = r * w * (x[:, 0] - x[:, 2] / 2) + padw  # float32 array x float64 scalar: float64
    y[:, 1] = r * h * (x[:, 1] - x[:, 3] / 2) + padh
    y[:, 2] = r * w * (x[:, 0] + x[:, 2] / 2) + padw
    y[:, 3] = r * h * (x[:, 1] + x[:, 3] / 2) + padh
    expected = targets_of(labels[:, 0], y, tuple(int(v) for v in shape))
    assert targets.shape == (200, 6) and np.array_equal(targets.numpy(), expected.numpy())
    assert not np.array_equal(xywhn_to_xyxy(labels[:, 1:], float(r) * w, float(r) * h, float(padw), float(padh)),
                              y)  # the float32 way does differ on these boxes
