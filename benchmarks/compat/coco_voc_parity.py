"""Are the boxes yolo_data reads from Pascal VOC and COCO JSON the ones the peers' tools give?

Run in the benchmark environment (pycocotools and ultralytics installed; BENCHMARKS.md, Setup), with the
datasets in ``--root``, $YOLO_DATA_BENCH_DATA or ../shared/datasets beside the checkout:

    python benchmarks/compat/coco_voc_parity.py [--root DATASETS]

Ultralytics' settings go to a temporary folder (YOLO_CONFIG_DIR), offline (YOLO_OFFLINE=1).

1. VOC: ``DATASETS/bccd_voc`` read in place (ImageSets lists, yaml names) against ``DATASETS/bccd``, its
   YOLO conversion (YOLOv5's VOC rule, 6 decimals), box by box.
2. COCO: a COCO export of the same photos (benchmarks/generators/coco_from_voc.py, Roboflow-style quirks) read by
   yolo_data against pycocotools' ``COCO`` (non-crowd annotations, boxes normalised by the image's size)
   and against the label files Ultralytics' ``convert_coco`` writes (``cls91to80=False``; written with
   ``%g``, 6 significant digits).

Everything is copied to a temporary folder first; the datasets folder is never written.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from coco_from_voc import CATEGORIES, write_coco  # noqa: E402
from yolo_data import LoadImagesAndLabels  # noqa: E402

NAMES = ["WBC", "RBC", "Platelets"]


def rows_by_file(files, labels):
    """{file name: (n, 5) float64 rows sorted}."""
    out = {}
    for f, l in zip(files, labels):
        l = np.asarray(l, dtype=np.float64).reshape(-1, 5)
        out[os.path.basename(f)] = l[np.lexsort(l.T[::-1])]
    return out


def compare(ours, theirs, atol):
    """(images equal, images differing [names], boxes ours, boxes theirs, max abs difference on equal shapes)."""
    same, differ, worst = 0, [], 0.0
    for k in sorted(set(ours) | set(theirs)):
        a, b = ours.get(k, np.zeros((0, 5))), theirs.get(k, np.zeros((0, 5)))
        if a.shape == b.shape and (not len(a) or np.allclose(a, b, atol=atol, rtol=0)):
            same += 1
            worst = max(worst, float(np.abs(a - b).max()) if len(a) else 0.0)
        else:
            differ.append(k)
    return same, differ, sum(len(v) for v in ours.values()), sum(len(v) for v in theirs.values()), worst


def report(title, result):
    same, differ, n_ours, n_theirs, worst = result
    print(f"  {title}: {same} images equal, {len(differ)} differ {differ[:6]}; boxes {n_ours} (yolo_data) vs "
          f"{n_theirs}; largest difference on equal images {worst:.2g}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=None,
                    help="folder holding bccd_voc and bccd (default $YOLO_DATA_BENCH_DATA or ../shared/datasets)")
    args = ap.parse_args()
    common.require("coco_voc_parity.py", "pycocotools", "ultralytics")
    src_voc, src_yolo = common.dataset("bccd_voc", args.root), common.dataset("bccd", args.root)
    tmp = Path(tempfile.mkdtemp(prefix="coco_voc_parity_"))
    common.isolate_environment(tmp, "coco_voc_parity")  # Ultralytics' settings in tmp, offline
    try:
        voc, yolo = tmp / "bccd_voc", tmp / "bccd"
        shutil.copytree(src_voc, voc)
        shutil.copytree(src_yolo, yolo)
        print(f"1. Pascal VOC read in place vs its YOLO conversion ({src_yolo})")
        yaml = tmp / "voc.yaml"
        yaml.write_text(f"path: {voc}\ntrain: ImageSets/Main/train.txt\nval: [ImageSets/Main/val.txt, "
                        f"ImageSets/Main/test.txt]\nnames: {NAMES}\n")
        for split, folder in (("train", "train2017"), ("val", "val2017")):
            t0 = time.perf_counter()
            ds = LoadImagesAndLabels(str(yaml), 320, split=split)
            dt = time.perf_counter() - t0
            ref = LoadImagesAndLabels(str(yolo / "images" / folder), 320)
            theirs = rows_by_file(ref.im_files, ref.labels)
            ours = rows_by_file(ds.im_files, ds.labels)
            unlisted = sorted(set(theirs) - set(ours))  # photos no ImageSets list names: the conversion put them in val
            theirs = {k: v for k, v in theirs.items() if k in ours}
            report(f"{split} ({len(ds)} images, scanned in {dt:.2f} s; {len(unlisted)} of the conversion's "
                   f"{folder} images are in no ImageSets list)", compare(ours, theirs, 1e-6))
            for p in ds.split_labels.problems:
                print(f"    {p}")

        print("2. COCO JSON (an export of all 364 photos with Roboflow-style quirks)")
        ids = sorted(p.stem for p in (voc / "Annotations").glob("*.xml"))
        json_file = write_coco(voc, tmp / "export", ids)
        t0 = time.perf_counter()
        ds = LoadImagesAndLabels(str(json_file), 320)
        dt = time.perf_counter() - t0
        print(f"  yolo_data: {len(ds)} images, {ds.split_labels.counts['boxes']} boxes, names {ds.names}, read and "
              f"scanned in {dt:.2f} s")
        for p in ds.split_labels.problems:
            print(f"    {p}")
        ours = rows_by_file(ds.im_files, ds.labels)

        from pycocotools.coco import COCO
        t0 = time.perf_counter()
        api = COCO(str(json_file))
        dt = time.perf_counter() - t0
        by_name = {c["name"]: c["id"] for c in api.loadCats(api.getCatIds())}
        cls_of = {by_name[n]: k for k, n in enumerate(ds.names)}
        theirs = {}
        for img in api.loadImgs(api.getImgIds()):
            rows = []
            for a in api.loadAnns(api.getAnnIds(imgIds=[img["id"]], iscrowd=False)):
                x, y, w, h = a["bbox"]
                if w > 0 and h > 0 and a["category_id"] in cls_of:
                    rows.append([cls_of[a["category_id"]], (x + w / 2) / img["width"], (y + h / 2) / img["height"],
                                 w / img["width"], h / img["height"]])
            theirs[img["file_name"]] = rows
        theirs = rows_by_file(list(theirs), list(theirs.values()))
        report(f"vs pycocotools (COCO() loaded in {dt:.2f} s)", compare(ours, theirs, 1e-6))

        # Ultralytics' convert_coco stops at an annotation of an image that is not in 'images'
        # (the export's orphan): show that, then convert a copy without it.
        from ultralytics.data.converter import convert_coco
        for orphan in (True, False):
            src = tmp / f"uc_in_{orphan}"
            src.mkdir()
            data = json.loads(json_file.read_text())
            if not orphan:
                names = {i["id"] for i in data["images"]}
                data["annotations"] = [a for a in data["annotations"] if a["image_id"] in names]
            (src / "bccd.json").write_text(json.dumps(data))
            out = tmp / f"uc_out_{orphan}"
            try:
                t0 = time.perf_counter()
                convert_coco(str(src), str(out), use_segments=False, cls91to80=False)
                dt = time.perf_counter() - t0
            except Exception as e:
                print(f"  Ultralytics convert_coco on the export as it is: {type(e).__name__}: {e}")
                continue
            name_of = {c["id"] - 1: c["name"] for c in CATEGORIES}  # convert_coco writes category_id - 1
            theirs = {}
            for f in (out / "labels" / "bccd" / "cells").glob("*.txt"):
                rows = np.loadtxt(f, ndmin=2).reshape(-1, 5)
                rows[:, 0] = [ds.names.index(name_of[int(c)]) for c in rows[:, 0]]
                theirs[f.stem + ".jpg"] = rows
            theirs = rows_by_file(list(theirs), list(theirs.values()))
            report(f"vs Ultralytics convert_coco (without the orphan annotation; converted in {dt:.2f} s; "
                   "images without annotations get no file)", compare(ours, theirs, 5e-6))
            big = sorted(k for k, r in theirs.items() if (r[:, 1:3] + r[:, 3:5] / 2 > 1 + 1e-6).any())
            print(f"    rows past the image edge in convert_coco's files: {big} (yolo_data clips them, with a warning)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n" + common.footer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
