"""The report counts each split's images by band count and bit depth (text, JSON and page), leaves out
and names the images whose bands do not fit the dataset's channels, as a training run does, and says
which bands its pictures show."""
import json
import shutil
from pathlib import Path

import cv2
import numpy as np

from yolo_data.cli import main as cli_main
from yolo_data.report.compose import ReportOptions, make_report, write
from yolo_data.report.datastats import bands_text

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
FAST = ReportOptions(pictures=False, duplicates=False, progress=False)


def mixed(tmp_path: Path, channels=None) -> Path:
    """The sample with a grayscale PNG and a 10-page TIFF added to train (each with a box)."""
    root = tmp_path / "ds"
    shutil.copytree(SAMPLE, root)
    rng = np.random.default_rng(0)
    assert cv2.imwrite(str(root / "images" / "train" / "gray.png"), rng.integers(0, 255, (60, 80), dtype=np.uint8))
    assert cv2.imwritemulti(str(root / "images" / "train" / "bands.tif"),
                            [rng.integers(0, 255, (60, 80), dtype=np.uint8) for _ in range(10)])
    for stem in ("gray", "bands"):
        (root / "labels" / "train" / f"{stem}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    key = f"channels: {channels}\n" if channels else ""
    yaml = tmp_path / "data.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames: [circle, rectangle, triangle]\n{key}")
    return yaml


def test_images_are_counted_by_bands_and_bits_and_the_misfits_named(tmp_path, capsys):
    yaml = mixed(tmp_path)
    f = make_report(yaml, FAST).figures
    train, val = f["splits"]["train"], f["splits"]["val"]
    colour = len(list((tmp_path / "ds" / "images" / "train").glob("*.jpg")))
    assert train["image_bands"] == [{"bands": 3, "bits": 8, "images": colour}, {"bands": 1, "bits": 8, "images": 1},
                                    {"bands": 10, "bits": 8, "images": 1}]
    assert bands_text(train["image_bands"]) == f"3 bands, 8-bit: {colour}; 1 band, 8-bit: 1; 10 bands, 8-bit: 1"
    assert val["image_bands"] == [{"bands": 3, "bits": 8, "images": val["images"]}] and val["other_bands"] == 0
    # the gray PNG is read as colour at 3 channels, as always; the TIFF's pages are bands: left out
    assert train["images"] == colour + 1 and train["other_bands"] == 1 and train["left_out"] == 1
    assert f["findings"]["corrupt"] == 1 and f["settings"]["channels"] == 3
    (group,) = train["problems"]["left out"].values()
    assert [p["file"] for p in group] == [str(tmp_path / "ds" / "images" / "train" / "bands.tif")]
    assert group[0]["reason"].startswith("image has 10 bands of 8 bits, the dataset 3 channels: its bands are TIFF")

    assert cli_main(["report", str(yaml), "--out", str(tmp_path / "r"), "--no-duplicates", "--no-pictures"]) == 0
    out = capsys.readouterr().out
    assert (f"train images by bands: 3 bands, 8-bit: {colour}; 1 band, 8-bit: 1; 10 bands, 8-bit: 1 "
            "(1 of other bands left out)") in out
    assert json.loads((tmp_path / "r.json").read_text())["splits"]["train"]["image_bands"] == train["image_bands"]
    page = (tmp_path / "r.html").read_text()
    assert "<h2 id='bands'>Bands</h2>" in page and "The dataset has channels: 3; 1 image of other bands left out" in page
    assert "<td>10</td><td>8-bit</td><td>1</td>" in page


def test_at_10_channels_the_colour_images_are_the_misfits(tmp_path):
    yaml = mixed(tmp_path, channels=10)
    train = make_report(yaml, FAST).figures["splits"]["train"]
    assert train["images"] == 1 and train["other_bands"] == train["left_out"] > 1
    assert train["image_bands"][-1] == {"bands": 10, "bits": 8, "images": 1}  # the counts are of every image scanned


def test_the_page_says_which_bands_its_pictures_show(tmp_path):
    root = tmp_path / "ms"
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(3):
            assert cv2.imwritemulti(str(root / "images" / split / f"{i}.tif"),
                                    [rng.integers(0, 255, (48, 64), dtype=np.uint8) for _ in range(10)])
            (root / "labels" / split / f"{i}.txt").write_text("0 0.5 0.5 0.3 0.3\n")
    yaml = tmp_path / "ms.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames: [a]\nchannels: 10\n")
    rep = make_report(yaml, ReportOptions(img_size=64, duplicates=False, progress=False))
    show = "false colour of 10 bands: band 1 as blue, band 2 as green, band 3 as red"
    assert rep.figures["pictures_show"] == show and rep.figures["splits"]["train"]["other_bands"] == 0
    write(rep, tmp_path / "page")
    assert f"The pictures show {show}." in (tmp_path / "page.html").read_text()
