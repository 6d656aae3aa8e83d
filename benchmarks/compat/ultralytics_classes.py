"""Ultralytics' ``classes`` in the plug-in, against Ultralytics' own dataset, and the remap end to end.

    python benchmarks/compat/ultralytics_classes.py [--classes 0 2] [--imgsz 64]     # in the benchmark environment

(a) The val split of coco128 (boxes) and of coco128-seg (polygons), each read by Ultralytics' own
    ``YOLODataset`` (``build_yolo_dataset`` with ``cfg.classes``) and by the plug-in's loader with the
    same arguments: per image the same rows (classes, boxes, polygons), the same images (those left
    without rows kept as backgrounds), then the same classes and boxes in both validation loaders'
    batches.  With ``remap_classes`` our ids are the positions of Ultralytics' ids in ``classes``.
(b) yolo11n.yaml trained from scratch for 1 epoch at a tiny imgsz on a quarter of a coco128 copy with
    ``YoloDataTrainer``, ``classes`` and ``remap_classes=True``: the model's nc and names, the class ids
    both loaders hand out, the names saved in the weights, ``model.val`` with the validator, and a DDP
    rank's trainer rebuilt as Ultralytics' launch does; a trainer without the remap keeps the dataset's
    80 classes.

Ultralytics' settings go to a temporary folder, offline.  Data: coco128 and coco128-seg in
$YOLO_DATA_BENCH_DATA (default ../shared/datasets), copied into a temporary folder.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from ultralytics_plugin import copy_dataset  # noqa: E402


def same_rows(data: Path, task: str, classes, remap: bool, imgsz: int, batch: int = 8) -> str:
    """Ultralytics' YOLODataset(classes=...) and the plug-in's loader on ``data``'s val split: the number of
    images that differ in rows (classes, boxes, polygons) and in batch contents, as one line."""
    import numpy as np
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset
    from yolo_data.integrations.ultralytics_args import loader_settings
    from yolo_data.integrations.ultralytics_loader import create_loader
    with common.library_output(False):
        cfg = get_cfg(overrides={"imgsz": imgsz, "rect": True, "batch": batch, "classes": list(classes),
                                 "task": task})
        spec = check_det_dataset(str(data))
        theirs_ds = build_yolo_dataset(cfg, spec["val"], batch, spec, mode="val", stride=32)
        ours = create_loader(spec["val"], loader_settings(cfg, "val", batch, 32, workers=0, remap_classes=remap))
    new_id = {c: (k if remap else c) for k, c in enumerate(classes)}

    theirs = {lb["im_file"]: lb for lb in theirs_ds.labels}
    mine = {lb["im_file"]: lb for lb in ours.dataset.labels}
    rows = cls = polys = 0
    for f, t in theirs.items():
        o = mine.get(f)
        if o is None:
            continue
        want = np.array([new_id[int(c)] for c in t["cls"][:, 0]], np.float32)
        cls += not np.array_equal(o["cls"][:, 0], want)
        rows += len(o["bboxes"]) != len(t["bboxes"]) or not np.allclose(o["bboxes"], t["bboxes"], rtol=0, atol=1e-6)
        if task == "segment":
            pairs = zip(o["segments"], t["segments"])
            polys += len(o["segments"]) != len(t["segments"]) or not all(
                a.shape == b.shape and np.allclose(a, b, rtol=0, atol=1e-6) for a, b in pairs)
    kept = sum(len(t["cls"]) for t in theirs.values())
    empty = sum(not len(t["cls"]) for t in theirs.values())

    def items(loader, to_ours):
        out = {}
        for b in loader:
            for i, f in enumerate(b["im_file"]):
                k = b["batch_idx"] == i
                out[f] = (np.array([to_ours(int(c)) for c in b["cls"][k, 0]], np.float32), b["bboxes"][k].numpy())
        return out

    with common.library_output(False):
        tb = items(build_dataloader(theirs_ds, batch, 0, shuffle=False), lambda c: new_id[c])
    ob = items(ours, lambda c: c)
    ours.close()
    batch_diff = sum(not (np.array_equal(tb[f][0], ob[f][0]) and tb[f][1].shape == ob[f][1].shape
                          and np.allclose(tb[f][1], ob[f][1], rtol=0, atol=1e-5)) for f in tb if f in ob)
    files = "same images" if set(theirs) == set(mine) == set(tb) == set(ob) else \
        f"images differ ({len(set(theirs) ^ set(mine))} in labels, {len(set(tb) ^ set(ob))} in batches)"
    return (f"{data.parent.name} {task} classes={list(classes)} remap={remap}: {len(theirs)} images, {kept} rows kept, "
            f"{empty} without rows; {files}; rows differ in {rows}, classes in {cls}, polygons in {polys}, "
            f"batches in {batch_diff}")


def train_with_remap(data: Path, tmp: Path, classes, imgsz: int) -> list:
    """Lines saying what the model, the loaders and the weights hold after a short run with the remap."""
    import numpy as np
    from ultralytics import YOLO
    from ultralytics.utils import DEFAULT_CFG_DICT, LOGGER
    from ultralytics.utils.torch_utils import unwrap_model
    from yolo_data.integrations.ultralytics import YoloDataTrainer, YoloDataValidator
    names = {}
    with common.library_output(False):
        full = YoloDataTrainer(overrides=dict(model="yolo11n.yaml", data=str(data), classes=list(classes),
                                              project=str(tmp / "runs"), name="plain", exist_ok=True))
        names = dict(full.data["names"])
        model = YOLO("yolo11n.yaml")
        model.train(data=str(data), trainer=YoloDataTrainer, classes=list(classes), remap_classes=True, epochs=1,
                    imgsz=imgsz, batch=8, fraction=0.25, workers=0, device="cpu", plots=False, amp=False, seed=0,
                    project=str(tmp / "runs"), name="remap", exist_ok=True, verbose=False)
    trainer = model.trainer
    want = {k: names[c] for k, c in enumerate(classes)}
    net = unwrap_model(trainer.model)
    ids = {m: sorted({int(c) for lb in loader.dataset.labels for c in lb["cls"][:, 0]})
           for m, loader in (("train", trainer.train_loader), ("val", trainer.test_loader))}
    best = YOLO(str(trainer.best))
    with common.library_output(False):
        metrics = best.val(data=str(data), validator=YoloDataValidator, classes=list(classes), remap_classes=True,
                           imgsz=imgsz, batch=8, device="cpu", plots=False, verbose=False,
                           project=str(tmp / "runs"), name="val", exist_ok=True)
    finite = bool(np.isfinite(metrics.box.map50))
    said = []  # the same weights validated without the remap: the validator names the mismatch
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    loggers = [logging.getLogger("yolo_data"), LOGGER]  # the plug-in's messages go through Ultralytics' logger
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with common.library_output(False):
            best.val(data=str(data), validator=YoloDataValidator, classes=list(classes), imgsz=imgsz, batch=8,
                     device="cpu", plots=False, verbose=False, project=str(tmp / "runs"), name="val", exist_ok=True)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    named = [m for m in said if "class names are not its labels'" in m]
    # a DDP rank's trainer, rebuilt as Ultralytics' launch rebuilds it: its class, its args as overrides
    # (Ultralytics' keys only) and the callbacks, which carry remap_classes
    cfg = dict(DEFAULT_CFG_DICT, save_dir="")
    with common.library_output(False):
        rank = type(trainer)(cfg=cfg, overrides=dict(vars(trainer.args)), _callbacks=trainer.callbacks)
    return [f"without remap_classes the model is made for {full.data['nc']} classes: {full.data['nc'] == len(names)}",
            f"trained 1 epoch with classes={list(classes)} remap_classes=True: completed "
            f"{Path(trainer.last).exists()}",
            f"model nc {net.nc}, names {dict(net.names)}: {net.nc == len(classes) and dict(net.names) == want}",
            f"loaders' class ids train {ids['train']} val {ids['val']}: "
            f"{set(ids['train']) <= set(want) and set(ids['val']) == set(want)}",
            f"weights' names {dict(best.names)}: {dict(best.names) == want}",
            f"model.val with YoloDataValidator and the remap: {len(metrics.names)} classes, mAP50 "
            f"{metrics.box.map50:.4f}: {len(metrics.names) == len(classes) and finite}",
            f"a DDP rank's trainer has the kept names: {dict(rank.data['names']) == want}",
            f"validated without remap_classes, the validator says: {named[0] if named else None}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--classes", type=int, nargs="+", default=[2, 0], help="class ids to keep (coco: 0 person, 2 car)")
    ap.add_argument("--imgsz", type=int, default=64)
    a = ap.parse_args()
    common.require("ultralytics_classes.py", "ultralytics")
    tmp = Path(tempfile.mkdtemp(prefix="ultra_classes_"))
    common.isolate_environment(tmp, "ultralytics_classes")
    try:
        coco = copy_dataset(common.dataset("coco128"), tmp)
        seg = copy_dataset(common.dataset("coco128-seg"), tmp)
        lines = [same_rows(coco, "detect", a.classes, remap, a.imgsz) for remap in (False, True)]
        lines.append(same_rows(seg, "segment", a.classes, True, a.imgsz))
        for line in lines:
            print(line)
        same = all("same images; rows differ in 0, classes in 0, polygons in 0, batches in 0" in ln for ln in lines)
        print(f"classes gives Ultralytics' rows: {same}")
        for line in train_with_remap(coco, tmp, a.classes, a.imgsz):
            print(line)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n" + common.footer())


if __name__ == "__main__":
    main()
