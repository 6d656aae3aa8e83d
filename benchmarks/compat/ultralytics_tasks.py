"""Ultralytics' detect, segment, pose and OBB trainers and validators on yolo_data, in the benchmark environment.

    python benchmarks/compat/ultralytics_tasks.py [--tasks detect segment pose obb] [--imgsz 160] [--epochs 40]
                                                  [--batch 16] [--val-images N] [--single-cls]

For each task, on a temporary copy of its dataset (detect: bccd; segment: coco128-seg; pose: tiger-pose,
kpt_shape [12, 2]; obb: pen-obb; from $YOLO_DATA_BENCH_DATA or ../shared/datasets):

(a) the validation inputs of Ultralytics' own dataset and of yolo_data's plug-in, image by image
    (matched by file): pixels, classes, boxes (obb: xywhr), keypoints, masks, ori_shape, ratio_pad;
(b) trains ``yolo11n[-<task>].yaml`` from scratch (no weights are downloaded) with ``YoloDataTrainer``
    on the validation split itself (a model that has seen its images makes detections worth comparing
    after minutes on a CPU; the point is the validators, not the model), then validates its last.pt
    with Ultralytics' own validator and with ``YoloDataValidator`` (same weights, split and settings)
    and prints both metrics and whether they are identical.  ``--val-images N`` keeps only the first N
    validation images (by name) for (b): a shorter training; (a) always covers the whole split.

Ultralytics is AGPL-3.0 and installed only in the benchmark environment; this script imports it.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from ultralytics_plugin import copy_dataset  # noqa: E402

# Float rounding only: Ultralytics finds an oriented box from its resampled outline, the plug-in from the
# 4 corners (the same rectangle); pixels, classes, masks and keypoints must be equal
INPUT_TOLERANCE = 1e-6
MODELS = {"detect": "yolo11n.yaml", "segment": "yolo11n-seg.yaml", "pose": "yolo11n-pose.yaml",
          "obb": "yolo11n-obb.yaml"}
DATASETS = {"detect": "bccd", "segment": "coco128-seg", "pose": "tiger-pose", "obb": "pen-obb"}
METRICS = {"detect": ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)"),
           "segment": ("metrics/precision(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)", "metrics/precision(M)",
                       "metrics/recall(M)", "metrics/mAP50(M)", "metrics/mAP50-95(M)"),
           "pose": ("metrics/precision(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)", "metrics/precision(P)",
                    "metrics/recall(P)", "metrics/mAP50(P)", "metrics/mAP50-95(P)"),
           "obb": ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)")}


def compare_inputs(task: str, data: Path, a) -> str:
    import numpy as np
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset
    from ultralytics.utils.ops import xyxyxyxy2xywhr
    from yolo_data.integrations.ultralytics_args import loader_settings
    from yolo_data.integrations.ultralytics_loader import create_loader
    with common.library_output(a.verbose):
        cfg = get_cfg(overrides={"imgsz": a.imgsz, "rect": True, "batch": a.batch, "task": task})
        spec = check_det_dataset(str(data))
        theirs = build_dataloader(build_yolo_dataset(cfg, spec["val"], a.batch, spec, mode="val", stride=32),
                                  a.batch, 0, shuffle=False)
        ours = create_loader(spec["val"], loader_settings(cfg, "val", a.batch, 32, workers=0, data=spec),
                             to_xywhr=xyxyxyxy2xywhr if task == "obb" else None)

    def items(loader):
        out = {}
        for b in loader:
            for i, f in enumerate(b["im_file"]):
                k = b["batch_idx"] == i
                kp = b["keypoints"][k].numpy() if "keypoints" in b else np.zeros(0)
                masks = np.zeros(0)
                if "masks" in b:  # overlap masks: one per image
                    masks = b["masks"][i].numpy() if len(b["masks"]) == len(b["im_file"]) and cfg.overlap_mask \
                        else b["masks"][k].numpy()
                out[f] = (b["img"][i].numpy(), b["cls"][k].numpy(), b["bboxes"][k].numpy(), kp,
                          tuple(b["ori_shape"][i]), b["ratio_pad"][i], masks.astype(np.int64))
        return out

    t, o = items(theirs), items(ours)
    ours.close()
    if set(t) != set(o):
        return f"different files: {len(set(t) - set(o))} only Ultralytics', {len(set(o) - set(t))} only ours", False
    px = sum(not np.array_equal(t[f][0], o[f][0]) for f in t)
    cls = sum(not np.array_equal(t[f][1], o[f][1]) for f in t)
    box = max(float(np.abs(t[f][2] - o[f][2]).max(initial=0)) for f in t)
    kpt = max(float(np.abs(t[f][3] - o[f][3]).max(initial=0)) for f in t)
    shp = sum(t[f][4] != o[f][4] for f in t)
    msk = sum(not np.array_equal(t[f][6], o[f][6]) for f in t)
    rp = sum(not (np.allclose(t[f][5][0], o[f][5][0], rtol=0, atol=1e-12) and tuple(t[f][5][1]) == tuple(o[f][5][1]))
             for f in t)
    same = not (px or cls or msk or shp or rp) and box <= INPUT_TOLERANCE and kpt <= INPUT_TOLERANCE
    return (f"{len(t)} images, {sum(len(v[1]) for v in t.values())} objects: pixels differ in {px}, classes in {cls}, "
            f"masks in {msk}, ori_shape in {shp}, ratio_pad in {rp}; largest difference: boxes {box:.2e}, keypoints {kpt:.2e} "
            "(normalised)"), same


def first_images(data: Path, n: int) -> int:
    """Delete all but the first ``n`` images (by name) of the copy's validation split and their label
    files; returns how many are left."""
    import yaml
    spec = yaml.safe_load(data.read_text())
    images = Path(spec["path"]) / spec["val"]
    files = sorted(f for f in images.iterdir() if f.is_file())
    labels = images.parents[1] / "labels" / images.name
    for f in files[n:]:
        f.unlink()
        (labels / f.with_suffix(".txt").name).unlink(missing_ok=True)
    for cache in labels.parent.glob("*.cache"):
        cache.unlink()
    return min(n, len(files))


def train(task: str, data: Path, tmp: Path, a) -> Path:
    import yaml
    from ultralytics import YOLO
    from yolo_data.integrations.ultralytics import YoloDataTrainer
    spec = yaml.safe_load(data.read_text())
    spec["train"] = spec["val"]
    data = data.with_name("train-on-val.yaml")
    data.write_text(yaml.safe_dump(spec))
    with common.library_output(a.verbose):
        YOLO(MODELS[task]).train(data=str(data), trainer=YoloDataTrainer, epochs=a.epochs, imgsz=a.imgsz,
                                 batch=a.batch, workers=2, device="cpu", plots=False, amp=False, val=False, seed=0,
                                 project=str(tmp / "runs"), name=task, exist_ok=True, verbose=False,
                                 single_cls=a.single_cls)
    return tmp / "runs" / task / "weights" / "last.pt"


def validate(task: str, weights: Path, data: Path, validator, a) -> dict:
    from ultralytics import YOLO
    with common.library_output(a.verbose):
        m = YOLO(str(weights)).val(data=str(data), validator=validator, imgsz=a.imgsz, batch=a.batch, rect=True,
                                   device="cpu", plots=False, verbose=False, project=str(weights.parents[2]),
                                   name="val", exist_ok=True, conf=0.001, single_cls=a.single_cls)
    return {k: float(m.results_dict[k]) for k in METRICS[task]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    p.add_argument("--imgsz", type=int, default=160)
    p.add_argument("--epochs", type=int, default=40, help="0: compare the validation inputs only")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--val-images", type=int, default=0,
                   help="train on and validate only the first N validation images (0: all)")
    p.add_argument("--single-cls", action="store_true", help="train and validate as one class (learnt sooner)")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    config = tempfile.TemporaryDirectory()
    common.isolate_environment(Path(config.name), "ultralytics_tasks")
    from ultralytics import __version__
    from ultralytics.models.yolo.detect import DetectionValidator
    from ultralytics.models.yolo.obb import OBBValidator
    from ultralytics.models.yolo.pose import PoseValidator
    from ultralytics.models.yolo.segment import SegmentationValidator
    from yolo_data.integrations.ultralytics import YoloDataValidator
    own = {"detect": DetectionValidator, "segment": SegmentationValidator, "pose": PoseValidator, "obb": OBBValidator}
    print(f"Ultralytics {__version__}, imgsz {a.imgsz}, batch {a.batch}")
    identical = "validation inputs" + (" and metrics" if a.epochs else "")
    same_everywhere = True
    for task in a.tasks:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            data = copy_dataset(common.data_root() / DATASETS[task], tmp)
            text, same_inputs = compare_inputs(task, data, a)
            print(f"\n[{task}] {DATASETS[task]}: validation inputs: {text}")
            same_everywhere &= same_inputs
            if not a.epochs:
                continue
            if a.val_images:
                print(f"[{task}] trained on and validated with the first {first_images(data, a.val_images)} images")
            t = time.perf_counter()
            weights = train(task, data, tmp, a)
            print(f"[{task}] trained {a.epochs} epochs with YoloDataTrainer in {time.perf_counter() - t:.0f} s")
            theirs = validate(task, weights, data, own[task], a)
            ours = validate(task, weights, data, YoloDataValidator, a)
            same = theirs == ours
            same_everywhere &= same
            for k in METRICS[task]:
                print(f"[{task}]   {k:24s} Ultralytics {theirs[k]:.6f}  yolo_data {ours[k]:.6f}")
            print(f"[{task}] metrics identical: {same}")
    print(f"\n{identical} identical for {', '.join(a.tasks)}: {same_everywhere}")
    sys.exit(0 if same_everywhere else 1)


if __name__ == "__main__":
    main()
