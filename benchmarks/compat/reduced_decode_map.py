"""What the reduced JPEG decode does to mAP in evaluation, in the benchmark environment.

    python benchmarks/compat/reduced_decode_map.py [--data DIR] [--epochs 25] [--imgsz 160] [--val-imgsz 160 320]

Evaluation keeps YOLOv5's pixels by default (full decode); ``reduced_decode=True`` decodes a JPEG at
1/2, 1/4 or 1/8 scale where it shrinks that much.  This trains yolo11n.yaml from scratch with
``YoloDataTrainer`` on a copy of a YOLO-format dataset (default bccd: 640x480 JPEGs, so at imgsz 320 the
decode is at 1/2 and at 160 at 1/4), then validates the same weights with ``YoloDataValidator`` twice per
``--val-imgsz``, full and reduced decode, and compares the metrics and the validation inputs pixel by
pixel.  Ultralytics (AGPL-3.0) is imported here and in yolo_data.integrations only.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from ultralytics_plugin import METRICS, copy_dataset, train, validate  # noqa: E402


def forced_reduced_decode(on: bool):
    """Every loader the plug-in builds from here on decodes with ``reduced_decode=on`` (the plug-in does
    not expose the option; the validator builds its loader inside Ultralytics): the plug-in's
    ``create_loader`` calls ``build_loader`` through its module, where this puts a wrapper."""
    from yolo_data.integrations import ultralytics_loader
    build = getattr(ultralytics_loader, "unforced_build_loader", ultralytics_loader.build_loader)
    ultralytics_loader.unforced_build_loader = build

    @functools.wraps(build)
    def forced(path, settings, *args, **kwargs):
        return build(path, settings.replace(reduced_decode=on), *args, **kwargs)
    ultralytics_loader.build_loader = forced


def input_difference(data: Path, imgsz: int, batch: int) -> str:
    """Validation inputs of the plug-in's loader, full vs reduced decode: pixels (levels of 255)."""
    import numpy as np
    from ultralytics.cfg import get_cfg
    from ultralytics.data.utils import check_det_dataset
    from yolo_data.integrations.ultralytics_args import loader_settings
    from yolo_data.integrations.ultralytics_loader import create_loader
    cfg = get_cfg(overrides={"imgsz": imgsz, "rect": True, "batch": batch})
    spec = check_det_dataset(str(data))
    images = {}
    for on in (False, True):
        forced_reduced_decode(on)
        loader = create_loader(spec["val"], loader_settings(cfg, "val", batch, 32, workers=0))
        images[on] = {f: b["img"][i].numpy().astype(np.int16) for b in loader for i, f in enumerate(b["im_file"])}
        loader.close()
    diff = np.concatenate([np.abs(images[True][f] - images[False][f]).ravel() for f in images[False]])
    return (f"{len(images[False])} images: mean |difference| {diff.mean():.2f}, 99th percentile {np.percentile(diff, 99):.0f}, "
            f"largest {diff.max()} levels of 255; {100 * np.mean(diff > 0):.1f}% of values differ")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None,
                   help="YOLO-format dataset folder with its yaml (default: bccd in the datasets folder)")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--imgsz", type=int, default=160, help="training image size")
    p.add_argument("--val-imgsz", type=int, nargs="+", default=[160, 320])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--close-mosaic", type=int, default=1)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    common.require("reduced_decode_map.py", "ultralytics")
    src = a.data or common.data_root(None) / "bccd"
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        common.isolate_environment(tmp, "reduced_decode_map")
        os.chdir(tmp)  # Ultralytics writes look-ups and runs relative to the working folder
        data = copy_dataset(src, tmp)
        run = train(data, tmp, 2, a, a.epochs, "train", val=False)
        common.log(f"trained {a.epochs} epochs in {run['seconds']:.1f} s")
        from yolo_data.integrations.ultralytics import YoloDataValidator
        print(f"yolo11n.yaml from scratch, {a.epochs} epochs at imgsz {a.imgsz} on {src.name} "
              f"({run['seconds']:.0f} s); its weights validated with YoloDataValidator, rect, conf 0.001, iou 0.7\n")
        print("| val imgsz | decode | " + " | ".join(m.split("/")[1] for m in METRICS) + " | seconds |")
        print("|---:|---|" + "---:|" * (len(METRICS) + 1))
        notes = []
        for imgsz in a.val_imgsz:
            a.imgsz = imgsz
            for on in (False, True):
                forced_reduced_decode(on)
                metrics, seconds = validate(run["weights"], data, YoloDataValidator, a)
                print(f"| {imgsz} | {'reduced' if on else 'full'} | "
                      + " | ".join(f"{metrics[m]:.6f}" for m in METRICS) + f" | {seconds:.1f} |")
            notes.append(f"inputs at {imgsz}: " + input_difference(data, imgsz, a.batch))
        print()
        for n in notes:
            print(n)
    print("\n" + common.footer())


if __name__ == "__main__":
    main()
