"""The dataset report: figures equal to what the label cache holds, every problem named, injected
duplicates and leakage found (flat frames only as byte copies), ``--fail-on`` exit codes (an unreadable
split fails every check), the output names kept, the dataset left byte for byte as it was, and the page
checked in a real browser."""
import json
from collections import Counter
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import tree_digest
from yolo_data.cli import main as cli_main
from yolo_data.report.compose import FINDINGS, ReportOptions, make_report, write, write_report
from yolo_data.labels.split import load_split

sys.path.insert(0, str(Path(__file__).parent.parent))
from browser import find_browser, visit  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
FAST = ReportOptions(pictures=False, progress=False)


def sample_copy(tmp_path: Path, names=("circle", "rectangle", "triangle")) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(SAMPLE, root)
    yaml = tmp_path / "data.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames: {list(names)}\n")
    return yaml


def troubled(tmp_path: Path) -> Path:
    """The sample with a fourth class ('star', train only), and injected trouble: an exact copy, a
    re-encoded copy with other labels and a resized copy with boxes nudged of train images in val
    (leakage), a copy within train with boxes nudged, an undecodable image, a label with an unknown class, and a box of a tenth of a pixel."""
    yaml = sample_copy(tmp_path, ("circle", "rectangle", "triangle", "star"))
    root = tmp_path / "ds"
    im, lb = root / "images", root / "labels"

    def put(src_split, src, dst_split, dst, data=None, label=None):
        (im / dst_split / dst).write_bytes(data if data is not None else (im / src_split / src).read_bytes())
        text = label if label is not None else (lb / src_split / (Path(src).stem + ".txt")).read_text()
        (lb / dst_split / (Path(dst).stem + ".txt")).write_text(text)

    def nudged(src):  # every box moved right by a tenth of its width: IoU 0.82 with the original
        rows = [r.split() for r in (lb / "train" / (Path(src).stem + ".txt")).read_text().splitlines()]
        return "".join(" ".join(r[:1] + [f"{float(r[1]) + float(r[3]) / 10:.6f}"] + r[2:] if len(r) == 5 else r) + "\n"
                       for r in rows)

    def jpeg(img, q):
        return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, q])[1].tobytes()

    put("train", "train_001.jpg", "val", "leak_copy.jpg")
    b = cv2.imread(str(im / "train" / "train_002.jpg"))
    put("train", "train_002.jpg", "val", "leak_reencoded.jpg", jpeg(b, 60), label="0 0.5 0.5 0.2 0.2\n")
    c = cv2.imread(str(im / "train" / "train_003.jpg"))
    put("train", "train_003.jpg", "val", "leak_resized.jpg", jpeg(cv2.resize(c, None, fx=0.75, fy=0.75), 90),
        label=nudged("train_003.jpg"))  # near-identical: boxes agree at IoU 0.5
    put("train", "train_004.jpg", "train", "again_004.jpg", label=nudged("train_004.jpg"))  # a copy: not at 0.9
    (im / "train" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (lb / "train" / "broken.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    put("train", "train_005.jpg", "train", "unknown_class.jpg", label="9 0.5 0.5 0.1 0.1\n")
    star = (lb / "train" / "train_006.txt")
    # train_006 is 320 px on its long side: at 640 a box of width 0.0001, 0.0024 (1.5 px), 0.009 (5.8 px)
    star.write_text(star.read_text() + "3 0.5 0.5 0.3 0.3\n0 0.5 0.5 0.0001 0.2\n0 0.3 0.5 0.0024 0.2\n"
                    "0 0.7 0.5 0.009 0.009\n")
    return yaml


def test_sample_figures_equal_the_label_cache(tmp_path):
    yaml = sample_copy(tmp_path)
    before = tree_digest(tmp_path / "ds" / "images")
    rep = make_report(yaml, FAST)
    f = rep.figures
    assert list(f["splits"]) == ["train", "val"]
    for name in ("train", "val"):
        ref = load_split(tmp_path / "ds" / "images" / name, names=["circle", "rectangle", "triangle"])
        s, store = f["splits"][name], ref.store
        assert s["images"] == len(store) and s["objects"] == len(store.labels)
        assert s["backgrounds"] == store.num_backgrounds() and s["left_out"] == ref.counts["corrupt"] == 0
        classes = store.labels[:, 0].astype(int)
        assert s["classes"]["instances"] == np.bincount(classes, minlength=3).tolist()
        images = [sum(1 for i in range(len(store)) if c in store.labels_of(i)[:, 0]) for c in range(3)]
        assert s["classes"]["images"] == images
        assert sum(s["boxes_per_image"]["counts"]) == len(store)
        assert sum(s["box_size"]["counts"]) == len(store.labels) == sum(s["aspect_ratio"]["counts"])
        hw = store.shapes_hw
        o = s["image_sizes"]["orientation"]
        assert (o["landscape"], o["portrait"], o["square"]) == (
            int((hw[:, 1] > hw[:, 0]).sum()), int((hw[:, 1] < hw[:, 0]).sum()), int((hw[:, 1] == hw[:, 0]).sum()))
        sizes = Counter((int(w), int(h)) for h, w in hw.tolist())
        assert {(w, h): c for w, h, c in s["image_sizes"]["common"]} == dict(sizes.most_common(10))
        assert s["image_sizes"]["distinct"] == len(sizes)
        # a box's size after the letterbox, by hand for the first one
        h0, w0 = hw[0]
        x, y, w, h = store.labels[0, 1:]
        side = np.sqrt(w * w0 * h * h0) * 640 / max(h0, w0)
        edges = s["box_size"]["edges"]
        k = max(i for i, e in enumerate(edges) if side >= e)
        assert s["box_size"]["counts"][k] >= 1
    assert f["duplicates"]["checked"] and f["duplicates"]["groups"] == []  # no false positive on the sample
    assert f["duplicates"]["images_read"] == 24
    assert all(v == 0 for v in f["findings"].values()), f["findings"]
    assert tree_digest(tmp_path / "ds" / "images") == before  # nothing written among the images


def test_troubled_dataset_every_problem_and_duplicate(tmp_path):
    yaml = troubled(tmp_path)
    rep = make_report(yaml, FAST)
    f = rep.figures
    train, val = f["splits"]["train"], f["splits"]["val"]
    left_out = [p for group in train["problems"]["left out"].values() for p in group]
    named = {Path(p["file"]).name for p in left_out}
    assert {"broken.jpg", "unknown_class.txt"} <= named or {"broken.jpg", "unknown_class.jpg"} <= named
    assert train["left_out"] == 2 and f["findings"]["corrupt"] == 2
    groups = f["duplicates"]["groups"]
    across = [g for g in groups if g["across"]]
    leaked = {frozenset(Path(m["file"]).name for m in g["members"]) for g in across}
    assert leaked == {frozenset({"train_001.jpg", "leak_copy.jpg"}), frozenset({"train_002.jpg", "leak_reencoded.jpg"}),
                      frozenset({"train_003.jpg", "leak_resized.jpg"})}
    kinds = {frozenset(Path(m["file"]).name for m in g["members"]): g["kind"] for g in groups}
    assert kinds[frozenset({"train_001.jpg", "leak_copy.jpg"})] == "identical"
    assert kinds[frozenset({"train_003.jpg", "leak_resized.jpg"})] == "similar"
    within = [g for g in groups if not g["across"]]
    assert [sorted(Path(m["file"]).name for m in g["members"]) for g in within] == [["again_004.jpg", "train_004.jpg"]]
    disagree = sorted(sorted(Path(m["file"]).name for m in g["members"]) for g in groups if not g["labels_agree"])
    assert disagree == [["again_004.jpg", "train_004.jpg"], ["leak_reencoded.jpg", "train_002.jpg"]]
    assert f["findings"]["leakage"] == 3 and f["findings"]["duplicates"] == 1 and f["findings"]["label-conflict"] == 2
    star = f["classes"][3]
    assert star["name"] == "star" and star["instances"] == {"train": 1, "val": 0} and star["absent_from"] == ["val"]
    assert f["missing_classes"] == [{"id": 3, "name": "star", "absent_from": ["val"], "present_in": ["train"]}]
    assert train["box_size"]["dropped_by_filter"] == 2 == f["findings"]["tiny-boxes"]
    # every object's letterboxed size, box by box, against the histograms
    ref = load_split(tmp_path / "ds" / "images" / "train", names=["circle", "rectangle", "triangle", "star"]).store
    sides, ratios = [], []
    for i in range(len(ref)):
        h0, w0 = (float(v) for v in ref.shapes_hw[i])
        for _, _, _, w, h in ref.labels_of(i).tolist():
            bw, bh = w * w0 * 640 / max(h0, w0), h * h0 * 640 / max(h0, w0)
            sides.append((bw, bh))
            ratios.append(bw / bh)
    assert train["box_size"]["dropped_by_filter"] == sum(min(s) <= 2 for s in sides)
    assert train["box_size"]["below_finest_stride"] == sum(max(s) < 8 for s in sides) == 1
    edges = train["box_size"]["edges"] + [float("inf")]
    sizes = [(bw * bh) ** 0.5 for bw, bh in sides]
    assert train["box_size"]["counts"] == [sum(a <= v < b for v in sizes) for a, b in zip(edges, edges[1:])]
    redges = [0.0] + train["aspect_ratio"]["edges"][1:] + [float("inf")]
    assert train["aspect_ratio"]["counts"] == [sum(a <= v < b for v in ratios) for a, b in zip(redges, redges[1:])]
    assert val["images"] == 8 + 3
    assert f["sampled"]["split"] == "train" and f["sampled"]["class_instances"][3] > 1.0  # the rare star repeated
    assert f["splits"]["train"]["imbalance"]["rarest"]["name"] == "star"


def test_cli_fail_on_and_files(tmp_path, capsys):
    yaml = troubled(tmp_path)
    out = tmp_path / "out" / "rep"
    assert cli_main(["report", str(yaml), "--out", str(out), "--no-pictures", "--fail-on", "leakage,corrupt"]) == 1
    captured = capsys.readouterr()
    assert "failed on: leakage, corrupt" in captured.err
    assert f"wrote {out}.html and {out}.json" in captured.out
    figures = json.loads(out.with_suffix(".json").read_text())
    assert figures["findings"]["leakage"] == 3
    page = out.with_suffix(".html").read_text()
    assert "leak_reencoded.jpg" in page and "broken.jpg" in page and "star" in page
    assert cli_main(["report", str(yaml), "--out", str(out), "--no-pictures", "--no-duplicates",
                     "--fail-on", "leakage"]) == 0  # not checked: nothing found
    with pytest.raises(SystemExit) as e:
        cli_main(["report", str(yaml), "--fail-on", "leekage"])
    assert e.value.code == 2 and "unknown leekage" in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path / "nothing.yaml"), "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err
    assert set(FINDINGS) == set(figures["findings"])


def test_clean_sample_passes_fail_on_all(tmp_path, capsys):
    yaml = sample_copy(tmp_path)
    assert cli_main(["report", str(yaml), "--out", str(tmp_path / "r"), "--fail-on", "all"]) == 0
    assert "findings: corrupt 0" in capsys.readouterr().out


def test_a_folder_is_one_split(tmp_path):
    sample_copy(tmp_path)
    rep = make_report(tmp_path / "ds" / "images" / "val", FAST)
    assert list(rep.figures["splits"]) == ["val"] and rep.figures["splits"]["val"]["images"] == 8
    assert rep.figures["names"] == ["0", "1", "2"]  # no yaml: classes by number


def test_page_in_a_real_browser(tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium installed (.ci/run installs Debian's chromium)")
    yaml = troubled(tmp_path)
    rep = write_report(yaml, tmp_path / "report", ReportOptions(progress=False))
    assert set(rep.figures["pictures"]) >= {"batch0", "batch1"} and any(k.startswith("class") for k in rep.figures["pictures"])
    seen = visit(browser, rep.html_file)
    assert seen.errors == []
    assert seen.title == f"Dataset report: {yaml}"
    assert len(seen.images) == len(rep.figures["pictures"])
    assert all(complete and width > 0 for _, complete, width in seen.images), seen.images
    # nothing fetched: the page itself and its inline pictures only
    assert all(u.startswith("data:image/jpeg;base64,") for u in seen.requests[1:]) and seen.requests[0].startswith("file:")
    for text in ("Findings", "leak_reencoded.jpg", "class N but the dataset has N names", "star",
                 "Training batches as the loader makes them"):
        assert text in seen.text
    assert "broken.jpg: cannot read image header" in seen.all_text  # in its problem group, folded
    assert seen.screenshot.startswith(b"\x89PNG")
    (tmp_path / "report.png").write_bytes(seen.screenshot)


def test_yolo_data_command_dispatch(tmp_path, capsys):
    assert cli_main([]) == 2 and "usage: yolo-data {report,split,cache,demo,bench}" in capsys.readouterr().err
    help_text = (cli_main(["--help"]), capsys.readouterr().out)
    assert help_text[0] == 0 and "report DATA" in help_text[1] and "bench DATA" in help_text[1] and "split DATA" in help_text[1]
    assert cli_main(["reprot"]) == 2 and "unknown command 'reprot'" in capsys.readouterr().err
    yaml = sample_copy(tmp_path)
    assert cli_main(["cache", str(yaml), "--workers", "1"]) == 0
    assert "train.yolo_data.cache (built)" in capsys.readouterr().out


def test_a_coco_json_split_names_its_classes_and_problems(tmp_path):
    from conftest import write_image
    root = tmp_path / "coco"
    for k in range(3):
        write_image(root / "val2017" / f"{k}.jpg", 80, 60, seed=k)
    images = [{"id": k, "file_name": f"{k}.jpg", "width": 80, "height": 60} for k in range(3)]
    images.append({"id": 9, "file_name": "gone.jpg", "width": 80, "height": 60})
    anns = [{"id": 1, "image_id": 0, "category_id": 7, "bbox": [8, 6, 16, 12]},
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [8, 6, 16, 12]},
            {"id": 3, "image_id": 2, "category_id": 7, "bbox": [8, 6, 16, 12]}]
    js = root / "annotations" / "instances_val2017.json"
    js.parent.mkdir(parents=True)
    js.write_text(json.dumps({"images": images, "annotations": anns,
                              "categories": [{"id": 3, "name": "kite"}, {"id": 7, "name": "truck"}]}))
    f = make_report(js, FAST).figures
    s = f["splits"]["instances_val2017.json"]
    assert f["names"] == ["kite", "truck"] and s["format"] == "coco"
    assert s["classes"]["instances"] == [1, 2] and s["images"] == 3 and s["left_out"] == 1
    assert [Path(p["file"]).name for g in s["problems"]["left out"].values() for p in g] == ["gone.jpg"]
    assert f["duplicates"]["images_read"] == 3 and f["duplicates"]["groups"] == []


def test_a_split_that_cannot_be_read_is_named_and_fails_empty_split(tmp_path, capsys):
    yaml = sample_copy(tmp_path)
    yaml.write_text(yaml.read_text().replace("val: images/val", "val: images/nothere"))
    out = tmp_path / "r"
    assert cli_main(["report", str(yaml), "--out", str(out), "--no-pictures", "--fail-on", "empty-split"]) == 1
    text = capsys.readouterr()
    assert "val: cannot read" in text.out and "nothere does not exist" in text.out
    assert "failed on: empty-split" in text.err
    f = json.loads(out.with_suffix(".json").read_text())
    assert f["findings"]["empty-split"] == 1 and f["splits"]["train"]["images"] == 16
    assert "nothere does not exist" in f["splits"]["val"]["error"]
    assert "cannot read" in out.with_suffix(".html").read_text()


def test_out_keeps_a_suffix_that_is_not_html_or_json(tmp_path, capsys):
    yaml = sample_copy(tmp_path)
    quick = ["--no-pictures", "--no-duplicates"]
    for out in ("run.v1", "run.v2", "named.html", "folder/"):
        (tmp_path / "folder").mkdir(exist_ok=True)
        assert cli_main(["report", str(yaml), "--out", str(tmp_path / out), *quick]) == 0
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".html", ".json"))
    assert written == ["named.html", "named.json", "run.v1.html", "run.v1.json", "run.v2.html", "run.v2.json"]
    assert sorted(p.name for p in (tmp_path / "folder").iterdir()) == ["dataset_report.html", "dataset_report.json"]
    assert f"wrote {tmp_path / 'run.v2.html'} and {tmp_path / 'run.v2.json'}" in capsys.readouterr().out


def test_the_dataset_is_never_written_to_and_the_caches_are_named(tmp_path, capsys, user_cache_dir):
    yaml = sample_copy(tmp_path)
    before = tree_digest(tmp_path / "ds")
    out = tmp_path / "r"
    assert cli_main(["report", str(yaml), "--out", str(out), "--workers", "1"]) == 0  # pictures too: a loader runs
    text = capsys.readouterr().out
    assert tree_digest(tmp_path / "ds") == before
    made = sorted(user_cache_dir.glob("*.yolo_data.cache"))
    assert [p.name.split("-")[0] for p in made] == ["train", "val"]
    # counted in words: the sample's train split has one background, val none
    assert f"train: 16 images, 44 objects, 1 background, 0 left out, 0 warnings; label cache built in {made[0]}" in text
    assert f"val: 8 images, 23 objects, 0 backgrounds, 0 left out, 0 warnings; label cache built in {made[1]}" in text
    assert json.loads(out.with_suffix(".json").read_text())["splits"]["train"]["cache_file"] == str(made[0])
    # the next report reads them; a loader finds them where it looks when there is none beside the labels
    assert cli_main(["report", str(yaml), "--out", str(out), "--no-pictures"]) == 0
    assert f"label cache read from {made[0]}" in capsys.readouterr().out
    loaded = load_split(tmp_path / "ds" / "images" / "val", names=["circle", "rectangle", "triangle"])
    assert loaded.cache_file == made[1] and not loaded.built
    # --cache-dir: there instead
    mine = tmp_path / "caches"
    assert cli_main(["report", str(yaml), "--out", str(out), "--no-pictures", "--cache-dir", str(mine)]) == 0
    assert f"label cache built in {mine / made[0].name}" in capsys.readouterr().out
    assert tree_digest(tmp_path / "ds") == before  # the loader above found the report's cache: nothing written


def test_flat_frames_are_not_leakage_but_byte_copies_are(tmp_path):
    """Black, white and gray frames (video fades, overexposure) have hashes that describe nothing:
    they are listed as flat, and grouped only with byte-identical copies."""
    yaml = sample_copy(tmp_path)
    im, lb = tmp_path / "ds" / "images", tmp_path / "ds" / "labels"
    frames = {("train", "black.jpg"): 0, ("train", "white.jpg"): 255, ("val", "gray.png"): 128,
              ("val", "black_small.png"): 0, ("val", "white_q50.jpg"): 255}
    for (split, name), level in frames.items():
        cv2.imwrite(str(im / split / name), np.full((240, 320, 3), level, np.uint8),
                    [cv2.IMWRITE_JPEG_QUALITY, 50 if "q50" in name else 95])
    shutil.copyfile(im / "train" / "black.jpg", im / "val" / "black_copy.jpg")
    (lb / "val" / "black_copy.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    rep = make_report(yaml, FAST)
    f = rep.figures
    groups = f["duplicates"]["groups"]
    assert [sorted(Path(m["file"]).name for m in g["members"]) for g in groups] == [["black.jpg", "black_copy.jpg"]]
    assert groups[0]["kind"] == "identical" and groups[0]["across"] and not groups[0]["labels_agree"]
    assert f["findings"]["leakage"] == 1 and f["findings"]["duplicates"] == 0
    flat = {(m["split"], Path(m["file"]).name) for m in f["duplicates"]["flat"]}
    assert flat == set(frames) | {("val", "black_copy.jpg")}
    page = write(rep, tmp_path / "r").html_file.read_text()
    assert "6 flat pictures (one colour" in page and "black_small.png (0 objects)" in page
    assert "black_copy.jpg</code> (1 object)" in page and "train_000.jpg" not in page.split("flat pictures")[1]


def test_an_unreadable_split_fails_every_fail_on_check(tmp_path, capsys):
    yaml = sample_copy(tmp_path)
    yaml.write_text(yaml.read_text().replace("val: images/val", "val: images/nothere"))
    out = tmp_path / "r"
    for fail_on in ("corrupt,leakage", "tiny-boxes"):
        assert cli_main(["report", str(yaml), "--out", str(out), "--no-pictures", "--fail-on", fail_on]) == 1
        err = capsys.readouterr().err
        why = "(split val cannot be read, so nothing in it was checked: "
        assert f"failed on: {fail_on.replace(',', ', ')} {why}" in err
        assert "nothere does not exist" in err
    assert cli_main(["report", str(yaml), "--out", str(out), "--no-pictures"]) == 0  # no check asked for
    rep = make_report(yaml, FAST)
    assert rep.failed(["leakage"]) == ["leakage"] and rep.failed([]) == []
    assert list(rep.unreadable) == ["val"]
