"""Letterbox, rect batch shapes and box conversions on known cases."""
import numpy as np

from yolo_data.geometry.boxes import xywhn_to_xyxy, xyxy_to_xywhn
from yolo_data.geometry.shapes import letterbox, rect_max_side, rect_plan
from yolo_data.images.load import resize_long_side


def test_500x375_at_640_becomes_640x480_content_padded_to_square():
    im = np.full((375, 500, 3), 7, np.uint8)
    r = resize_long_side(im, 640, linear=False)
    assert r.shape == (480, 640, 3)
    lb = letterbox(r, 640, auto=False, scaleup=False)
    assert lb.img.shape == (640, 640, 3) and lb.ratio == (1.0, 1.0) and lb.pad == (0.0, 80.0)
    assert (lb.img[:80] == 114).all() and (lb.img[80:560] == 7).all() and (lb.img[560:] == 114).all()


def test_auto_pads_to_stride_and_odd_padding_splits_like_yolov5():
    im = np.zeros((213, 320, 3), np.uint8)
    lb = letterbox(im, 320, auto=True, stride=32)
    assert lb.img.shape == (224, 320, 3) and lb.pad == (0.0, 5.5)
    lb = letterbox(im, 320, auto=False)
    assert lb.img.shape == (320, 320, 3) and lb.pad == (0.0, 53.5)
    assert (lb.img[:53] == 114).all() and (lb.img[53:266] == 0).all() and (lb.img[266:] == 114).all()


def test_scale_fill_scaleup_and_uncentred():
    im = np.zeros((100, 200, 3), np.uint8)
    lb = letterbox(im, (320, 320), auto=False, scale_fill=True)
    assert lb.img.shape == (320, 320, 3) and lb.ratio == (1.6, 3.2) and lb.pad == (0.0, 0.0)
    lb = letterbox(im, 320, auto=False, scaleup=False)
    assert lb.ratio == (1.0, 1.0) and lb.pad == (60.0, 110.0)
    lb = letterbox(im, 320, auto=False, center=False)
    assert lb.pad == (0.0, 0.0) and lb.img.shape == (320, 320, 3) and (lb.img[160:] == 114).all()


def test_letterbox_then_inverse_gives_boxes_back():
    rng = np.random.default_rng(0)
    xywhn = rng.uniform(0.2, 0.4, (20, 4)).astype(np.float32)
    h, w = 375, 500
    lb = letterbox(np.zeros((h, w, 3), np.uint8), 640, auto=False)
    boxes = xywhn_to_xyxy(xywhn, lb.ratio[0] * w, lb.ratio[1] * h, lb.pad[0], lb.pad[1])
    back = (boxes - np.array(lb.pad * 2, np.float32)) / np.array(lb.ratio * 2, np.float32)
    np.testing.assert_allclose(xyxy_to_xywhn(back, w, h), xywhn, atol=1e-5)


def test_rect_plan_known_case():
    # [h, w]: two landscape, two portrait, one square; batch 2
    shapes_hw = np.array([[480, 640], [640, 480], [640, 640], [320, 640], [600, 300]])
    plan = rect_plan(shapes_hw, batch_size=2, img_size=640, stride=32, pad=0.0)
    np.testing.assert_array_equal(plan.order, [3, 0, 2, 1, 4])  # sorted by h / w
    np.testing.assert_array_equal(plan.batch_index, [0, 0, 1, 1, 2])
    # batch 0: h/w 0.5 and 0.75 -> [0.75, 1]; batch 1: 1 and 1.33 -> square; batch 2: h/w 2 -> [1, 0.5]
    np.testing.assert_array_equal(plan.batch_shapes, [[480, 640], [640, 640], [640, 320]])
    padded = rect_plan(shapes_hw, 2, 640, 32, pad=0.5)
    np.testing.assert_array_equal(padded.batch_shapes, [[512, 672], [672, 672], [672, 352]])



def test_rect_max_side_is_the_longest_side_rect_plan_gives():
    """Every rect batch has one side at the long side's size, so the largest of rect_plan's shapes is
    rect_max_side exactly, for any pad and image size (also when not a stride multiple)."""
    rng = np.random.default_rng(0)
    shapes = rng.integers(50, 2000, (200, 2))
    for img_size, stride, pad in [(640, 32, 0.0), (640, 32, 0.5), (640, 32, 2.0), (600, 32, 3.7), (64, 32, 2.0)]:
        plan = rect_plan(shapes, 16, img_size, stride, pad)
        assert plan.batch_shapes.max() == rect_max_side(img_size, stride, pad), (img_size, stride, pad)

def test_xyxy_xywhn_round_trip_and_clip():
    xyxy = np.array([[10, 20, 50, 80], [-5, 0, 700, 10]], np.float32)
    back = xywhn_to_xyxy(xyxy_to_xywhn(xyxy, 640, 480), 640, 480)
    np.testing.assert_allclose(back, xyxy, atol=1e-4)
    clipped = xyxy_to_xywhn(xyxy, 640, 480, clip=True, eps=1e-3)
    assert clipped[:, [0, 2]].max() <= 1 and clipped.min() >= 0
    assert xyxy[1, 0] == -5  # the input is not clipped in place


def test_yolov5_call_style_unpacks_and_takes_scaleFill():
    im, ratio, (dw, dh) = letterbox(np.zeros((100, 200, 3), np.uint8), 320, auto=False, scaleFill=True)
    assert im.shape == (320, 320, 3) and ratio == (1.6, 3.2) and (dw, dh) == (0.0, 0.0)
