"""Datasets of 1, 4 and 10 channels through the Ultralytics plug-in, against Ultralytics' own loader.

    python benchmarks/compat/ultralytics_channels.py [--compare 1 4 10] [--train 1 4 10] [--limit 16]

The datasets are copies of the first ``--limit`` images of each split of coco128, written into a
temporary folder by benchmarks/generators/make_channels.py: grayscale JPEGs (``channels: 1``) and
N-page TIFFs, one band a page (``channels: N``), each yaml given an absolute ``path``.

(a) Validation inputs (``augment=False``): Ultralytics' own dataset and loader (``build_yolo_dataset``
    on the data dict its ``check_det_dataset`` makes of the yaml, which carries ``channels``) and the
    plug-in's loader (``loader_settings`` with that dict, as the trainer builds it), image by image:
    pixels (C bands), classes, boxes, ori_shape, ratio_pad.
(b) ``YOLO("yolo11n.yaml").train(data=..., trainer=YoloDataTrainer, epochs=1)`` from scratch on each copy:
    with mosaics: the model's first convolution's ``in_channels``, the channels of every training batch, the epoch's
    losses and its validation by YoloDataValidator, then ``model.val(validator=YoloDataValidator)`` on
    the weights (a standalone validator's loader).

Ultralytics' settings go to a temporary folder, offline; no weights are downloaded.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

sys.path.insert(0, str(common.GENERATORS))
from make_channels import channel_copies  # noqa: E402
from ultralytics_plugin import compare_inputs  # noqa: E402  (beside this script)


def band_copies(source: Path, tmp: Path, channels, limit: int) -> dict:
    """{C: yaml} of copies of ``source`` with C channels (make_channels), their yamls with an absolute
    ``path`` (Ultralytics resolves a relative one against its datasets folder, not the yaml's)."""
    import yaml
    out, made = {}, channel_copies(source, tmp, channels, limit)
    for c in channels:
        src = made[c]
        doc = yaml.safe_load(src.read_text())
        doc["path"] = str(src.parent)
        out[c] = src.parent / "abs.yaml"
        out[c].write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def train_one_epoch(data: Path, channels: int, tmp: Path, a) -> str:
    """One epoch of yolo11n.yaml from scratch with YoloDataTrainer, then model.val with YoloDataValidator;
    what the model and the batches had, as lines."""
    from ultralytics import YOLO
    from yolo_data.integrations.ultralytics import YoloDataTrainer, YoloDataValidator

    class Recording(YoloDataTrainer):
        """YoloDataTrainer that notes the shape of every training batch it is handed."""
        shapes = []

        def preprocess_batch(self, batch):
            Recording.shapes.append((tuple(batch["img"].shape), str(batch["img"].dtype)))
            return super().preprocess_batch(batch)

    name = f"c{channels}"
    with common.library_output(a.verbose):
        model = YOLO("yolo11n.yaml")
        model.train(data=str(data), trainer=Recording, epochs=1, close_mosaic=0, imgsz=a.imgsz, batch=a.batch,
                    workers=a.workers, device="cpu", plots=False, amp=False, seed=0, project=str(tmp / "runs"),
                    name=name, exist_ok=True, verbose=False)
    first = model.trainer.model.model[0].conv
    with open(tmp / "runs" / name / "results.csv") as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    seen = sorted({s[0][1] for s in Recording.shapes})
    dtypes = sorted({s[1] for s in Recording.shapes})
    lines = [f"[{channels} channels] model's first conv in_channels {first.in_channels}: "
             f"{first.in_channels == channels}",
             f"[{channels} channels] {len(Recording.shapes)} train batches of {'/'.join(map(str, seen))} channels "
             f"{'/'.join(dtypes)}, e.g. {Recording.shapes[0][0]}: {seen == [channels]}",
             f"[{channels} channels] epoch {len(rows)} finished: box/cls/dfl loss {float(last['train/box_loss']):.4f}/"
             f"{float(last['train/cls_loss']):.4f}/{float(last['train/dfl_loss']):.4f}, val mAP50 "
             f"{float(last['metrics/mAP50(B)']):.4f}"]
    with common.library_output(a.verbose):
        m = YOLO(str(tmp / "runs" / name / "weights" / "last.pt")).val(
            data=str(data), validator=YoloDataValidator, imgsz=a.imgsz, batch=a.batch, device="cpu", plots=False,
            verbose=False, project=str(tmp / "runs"), name=f"{name}-val", exist_ok=True)
    lines.append(f"[{channels} channels] model.val with YoloDataValidator: mAP50 "
                 f"{float(m.results_dict['metrics/mAP50(B)']):.4f}, completed True")
    return "\n".join("  " + ln for ln in lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compare", type=int, nargs="+", default=[1, 4, 10], help="channels whose inputs are compared")
    p.add_argument("--train", type=int, nargs="*", default=[1, 4, 10], help="channels trained for an epoch")
    p.add_argument("--source", type=Path, default=None, help="a YOLO dataset (default: coco128 of the datasets folder)")
    p.add_argument("--limit", type=int, default=16, help="the first N images of each split")
    p.add_argument("--imgsz", type=int, default=160, help="of the comparison")
    p.add_argument("--train-imgsz", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    common.require("ultralytics_channels.py", "ultralytics")
    tmp = Path(tempfile.mkdtemp(prefix="ultra_channels_"))
    common.isolate_environment(tmp, "ultralytics_channels")
    os.chdir(tmp)  # Ultralytics writes its runs and look-ups relative to the working folder
    t0 = time.perf_counter()
    source = a.source or common.dataset("coco128")
    wanted = sorted(set(a.compare) | set(a.train), reverse=True)
    copies = band_copies(source, tmp, wanted, a.limit)
    with common.library_output(a.verbose):  # its log handler keeps the stream it finds at import
        import ultralytics
    print(f"ultralytics {ultralytics.__version__}; copies of the first {a.limit} images of each split of "
          f"{source.name} with {', '.join(map(str, sorted(wanted)))} channels (make_channels.py)")

    print(f"\n(a) validation inputs, Ultralytics' loader and the plug-in's (imgsz {a.imgsz}, rect, batch {a.batch})")
    verdicts = {}
    for c in a.compare:
        line = compare_inputs(copies[c], a.imgsz, a.batch)
        verdicts[c] = "pixels differ in 0, classes in 0, ori_shape in 0, ratio_pad in 0" in line
        print(f"  [{c} channels] {line}")
    if a.compare:
        print(f"  validation inputs identical for {', '.join(map(str, a.compare))} channels: {all(verdicts.values())}")

    print(f"\n(b) yolo11n.yaml from scratch, 1 epoch with YoloDataTrainer (imgsz {a.train_imgsz}, batch {a.batch}, "
          f"workers {a.workers}, CPU)")
    a.imgsz = a.train_imgsz
    for c in a.train:
        print(train_one_epoch(copies[c], c, tmp, a))
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    print("\n" + common.footer())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
