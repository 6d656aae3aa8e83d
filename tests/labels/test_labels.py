"""verify_pair on good and broken files: what is kept, warned about, or left out, and why."""

import cv2
import numpy as np
import pytest
from PIL import Image

from yolo_data.labels.verify import verify_pair
from yolo_data.formats.problems import LabelError
from yolo_data.formats.yolotxt import YoloReader
from conftest import write_image


def check(tmp_path, text, nc=3, size=(64, 48), name="im.jpg"):
    im = write_image(tmp_path / "images" / name, *size)
    lb = tmp_path / "labels" / "im.txt"
    lb.parent.mkdir(exist_ok=True)
    if text is not None:
        (lb.write_bytes if isinstance(text, bytes) else lb.write_text)(text)
    return verify_pair(str(im), str(lb), nc)


def test_good_pair(tmp_path):
    r = check(tmp_path, "0 0.5 0.5 0.2 0.4\n2 0.1 0.2 0.1 0.1\n")
    assert r.status == "ok" and r.shape == (48, 64) and not r.problems  # (h, w): 64 wide, 48 high
    np.testing.assert_array_equal(r.labels, np.array([[0, .5, .5, .2, .4], [2, .1, .2, .1, .1]], np.float32))
    assert r.labels.dtype == np.float32 and r.segments is None


@pytest.mark.parametrize("text,reason", [
    ("0 0.5 0.5 0.2\n", "4 columns"),
    ("0 0.5 0.5 0.2 0.2 0.1\n", "6 columns"),
    ("0 nan 0.5 0.2 0.2\n", "non-finite"),
    ("0 0.5 0.5 1.5 0.2\n", "normalised"),
    ("0 -0.2 0.5 0.1 0.2\n", "normalised"),
    ("cat 0.5 0.5 0.1 0.2\n", "'cat' is not a number"),
    ("1.5 0.5 0.5 0.1 0.2\n", "not a non-negative integer"),
    ("-1 0.5 0.5 0.1 0.2\n", "not a non-negative integer"),
    ("3 0.5 0.5 0.1 0.2\n", "class 3 but the dataset has 3 names"),
    (b"\x00\x01\x02garbage", "binary"),
    (b"\xff\xfe0 0.5", "not UTF-8"),
])
def test_bad_label_files_are_left_out_with_their_reason(tmp_path, text, reason):
    r = check(tmp_path, text)
    assert r.status == "corrupt"
    assert len(r.problems) == 1 and r.problems[0].dropped
    assert reason in r.problems[0].reason and r.problems[0].file.endswith("im.txt")


def test_crlf_blank_lines_and_tiny_overshoot_are_fine(tmp_path):
    r = check(tmp_path, "0 0.5 0.5 0.2 0.2\r\n\r\n1 0.5 0.5 1.00001 0.2\r\n")
    assert r.status == "ok" and len(r.labels) == 2 and r.labels[1, 3] == 1.0


def test_duplicates_removed_with_a_warning(tmp_path):
    r = check(tmp_path, "1 0.5 0.5 0.2 0.2\n0 0.1 0.1 0.1 0.1\n1 0.5 0.5 0.2 0.2\n")
    assert r.status == "ok" and len(r.labels) == 2
    assert [p.reason for p in r.problems] == ["1 duplicate label rows removed"] and not r.problems[0].dropped


def test_polygon_row_becomes_its_envelope_and_keeps_the_polygon(tmp_path):
    r = check(tmp_path, "1 0.1 0.2 0.5 0.2 0.3 0.6\n0 0.5 0.5 0.2 0.2\n")
    assert r.status == "ok"
    np.testing.assert_allclose(r.labels[0], [1, 0.3, 0.4, 0.4, 0.4], atol=1e-6)
    assert r.segments[0].shape == (3, 2) and r.segments[1].shape == (0, 2)


# -- coordinate tolerances: Ultralytics 8.4's.  Its verify_image_label keeps every row below marked inside and
# leaves out every one marked outside (checked on these rows), except the three marked "here only": it checks
# neither a pose row's box against 1.01 nor a polygon's points (only their envelope's centre and size).
def read_row(tmp_path, row, task="detect", kpt_shape=None):
    lb = tmp_path / "r.txt"
    lb.write_text(row + "\n")
    return YoloReader(3, task, kpt_shape).read(str(lb), (80, 100))


@pytest.mark.parametrize("task,kpt_shape,inside,outside", [
    ("detect", None, "0 1.009 0.5 0.2 0.2", "0 1.011 0.5 0.2 0.2"),  # box x y w h: 1% past [0, 1]
    ("detect", None, "0 0.5 -0.009 0.2 0.2", "0 0.5 -0.011 0.2 0.2"),
    ("detect", None, "0 0.5 0.5 1.009 0.2", "0 0.5 0.5 1.011 0.2"),
    ("detect", None, "0 0.5 0.5 0.2 0", "0 0.5 0.5 0.2 -0.001"),  # w and h not negative
    ("pose", (1, 2), "0 0.5 0.5 0.2 0.2 -0.009 0.5", "0 0.5 0.5 0.2 0.2 -0.011 0.5"),  # keypoint x y
    ("pose", (1, 2), "0 0.5 0.5 0.2 0.2 0.5 1.009", "0 0.5 0.5 0.2 0.2 0.5 1.011"),
    ("pose", (1, 3), "0 0.5 0.5 0.2 0.2 1.009 0.5 2", "0 0.5 0.5 0.2 0.2 1.011 0.5 2"),
    ("pose", (1, 2), "0 0.5 0.5 1.009 0.2 0.5 0.5", "0 0.5 0.5 1.011 0.2 0.5 0.5"),  # a pose row's box (here only)
    ("segment", None, "0 0.1 0.1 1.009 0.1 0.5 0.9", "0 0.1 0.1 1.011 0.1 0.5 0.9"),  # polygon points (here only)
    ("detect", None, "0 -0.009 0.1 0.9 0.1 0.5 0.9", "0 -0.011 0.1 0.9 0.1 0.5 0.9"),  # (here only)
    # 4 points, an oriented box: the centre (and size) of the corners' envelope, 1.009 and 1.011
    ("obb", None, "0 0.998 0.2 1.02 0.3 1.01 0.5 1.0 0.4", "0 1.002 0.2 1.02 0.3 1.01 0.5 1.005 0.4"),
    ("detect", None, "0 0.998 0.2 1.02 0.3 1.01 0.5 1.0 0.4", "0 1.002 0.2 1.02 0.3 1.01 0.5 1.005 0.4"),
    ("obb", None, "0 0.0 0.1 1.009 0.1 1.009 0.5 0.0 0.5", "0 0.0 0.1 1.011 0.1 1.011 0.5 0.0 0.5"),
])
def test_each_coordinate_tolerance_keeps_a_row_just_inside_and_refuses_one_just_outside(tmp_path, task, kpt_shape,
                                                                                        inside, outside):
    assert read_row(tmp_path, inside, task, kpt_shape)[2] == "ok"
    with pytest.raises(LabelError, match=r"line 1: (coordinates must be normalised to \[0, 1\] \(at most 0.01 past "
                                         r"it\)|negative box width or height)"):
        read_row(tmp_path, outside, task, kpt_shape)


def test_a_box_past_the_edge_is_clipped_to_the_image_and_one_inside_kept_as_written(tmp_path):
    labels = read_row(tmp_path, "0 1.009 0.5 0.2 0.2")[0]  # edges 0.909 .. 1.109: the part inside
    np.testing.assert_allclose(labels, [[0, 0.9545, 0.5, 0.091, 0.2]], atol=1e-6)
    labels = read_row(tmp_path, "0 0.5 0.5 1.008 0.2")[0]
    np.testing.assert_allclose(labels, [[0, 0.5, 0.5, 1.0, 0.2]], atol=1e-6)
    # every value in [0, 1]: kept bit for bit, as YOLOv5 keeps it, though its right edge is at 1.05
    assert read_row(tmp_path, "0 0.95 0.5 0.2 0.2")[0].tolist() == [[0, np.float32(0.95), 0.5, np.float32(0.2),
                                                                      np.float32(0.2)]]


def test_keypoints_past_the_edge_are_clipped_and_invisible_where_ultralytics_makes_them_so(tmp_path):
    # no visibility column: a negative coordinate makes the keypoint invisible (as Ultralytics makes it);
    # one past the right edge stays visible, as in Ultralytics
    kp = read_row(tmp_path, "0 0.5 0.5 0.2 0.2 -0.005 0.5 1.005 0.4 0.3 -0.002", "pose", (3, 2))[4]
    np.testing.assert_allclose(kp[0], [[0, 0.5, 0], [1, 0.4, 1], [0.3, 0, 0]], atol=1e-6)
    kp = read_row(tmp_path, "0 0.5 0.5 0.2 0.2 -0.005 0.5 2", "pose", (1, 3))[4]
    np.testing.assert_allclose(kp[0], [[0, 0.5, 2]], atol=1e-6)  # a visibility given is kept


def test_polygon_points_past_the_edge_are_clipped_and_oriented_corners_kept_as_written(tmp_path):
    labels, segments = read_row(tmp_path, "0 0.1 0.1 1.005 0.1 0.5 0.9", "segment")[:2]
    np.testing.assert_allclose(segments[0], [[0.1, 0.1], [1, 0.1], [0.5, 0.9]], atol=1e-6)
    np.testing.assert_allclose(labels, [[0, 0.55, 0.5, 0.9, 0.8]], atol=1e-6)
    corners = "0 0.9 0.2 1.02 0.3 0.95 0.5 0.83 0.4"  # a corner 2% past the edge (Ultralytics keeps it)
    labels, segments = read_row(tmp_path, corners, "obb")[:2]
    np.testing.assert_allclose(segments[0], [[0.9, 0.2], [1.02, 0.3], [0.95, 0.5], [0.83, 0.4]], atol=1e-6)
    np.testing.assert_allclose(labels, [[0, 0.915, 0.35, 0.17, 0.3]], atol=1e-6)  # its box: the part inside


def test_missing_empty_and_folder_label_keep_the_image_as_background(tmp_path):
    assert check(tmp_path, None).status == "missing"
    assert check(tmp_path, "\n\n").status == "empty"
    lb = tmp_path / "labels" / "im.txt"
    lb.unlink()
    lb.mkdir()
    r = check(tmp_path, None)
    assert r.status == "missing" and "folder" in r.problems[0].reason and not r.problems[0].dropped


@pytest.mark.parametrize("content,reason", [(b"", "cannot identify"), (b"hello, I am text", "cannot identify")])
def test_unreadable_images_are_left_out(tmp_path, content, reason):
    im = tmp_path / "images" / "x.jpg"
    im.parent.mkdir()
    im.write_bytes(content)
    r = verify_pair(str(im), str(tmp_path / "labels" / "x.txt"))
    assert r.status == "corrupt" and "not an image" in r.problems[0].reason and r.problems[0].file == str(im)


def test_tiny_image_is_left_out(tmp_path):
    r = check(tmp_path, "0 0.5 0.5 0.2 0.2\n", size=(4, 4))
    assert r.status == "corrupt" and "4x4" in r.problems[0].reason


def test_jpeg_tail_problems_are_reported_and_file_untouched(tmp_path):
    im = write_image(tmp_path / "images" / "t.jpg", 64, 64)
    data = im.read_bytes()
    im.write_bytes(data + b"trailing junk")
    r = verify_pair(str(im), str(tmp_path / "labels" / "t.txt"))
    assert r.status == "missing" and "after the JPEG end marker" in r.problems[0].reason
    assert im.read_bytes() == data + b"trailing junk"
    im.write_bytes(data[: len(data) * 2 // 3])
    r = verify_pair(str(im), str(tmp_path / "labels" / "t.txt"))
    assert "truncated JPEG" in r.problems[0].reason and not r.problems[0].dropped
    assert im.read_bytes() == data[: len(data) * 2 // 3]


def test_png_named_jpg_is_kept_with_a_warning(tmp_path):
    im = write_image(tmp_path / "images" / "p.jpg", 32, 24, ext=".png")
    r = verify_pair(str(im), str(tmp_path / "labels" / "p.txt"))
    assert r.status == "missing" and r.shape == (24, 32) and "PNG data in a .jpg" in r.problems[0].reason


@pytest.mark.parametrize("orientation,shape", [(1, (40, 60)), (3, (40, 60)), (6, (60, 40)), (8, (60, 40)),
                                               (5, (60, 40)), (0, (40, 60)), (42, (40, 60))])  # (h, w)
def test_exif_orientation_gives_the_decoded_shape(tmp_path, orientation, shape):
    im = tmp_path / "images" / "e.jpg"
    im.parent.mkdir()
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.new("RGB", (60, 40), (10, 200, 30)).save(im, exif=exif)
    r = verify_pair(str(im), str(tmp_path / "labels" / "e.txt"))
    assert r.shape == shape
    assert cv2.imread(str(im)).shape[:2] == shape  # the scan agrees with what OpenCV will decode
    assert ("invalid EXIF orientation" in " ".join(p.reason for p in r.problems)) == (orientation in (0, 42))
