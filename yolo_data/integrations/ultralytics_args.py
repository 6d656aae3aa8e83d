"""Ultralytics' training arguments -> yolo_data's Settings.

Pure: never imports ultralytics.  ``cfg`` is anything with Ultralytics' argument names as attributes
(its ``IterableSimpleNamespace``, a ``types.SimpleNamespace``) or a dict of them; a missing key takes
Ultralytics' default (listed in ``DEFAULTS``), so tests need no Ultralytics.

Every key of Ultralytics' data and augmentation arguments is listed in ``MAPPING`` with what yolo_data
does with it; the README's 'Training with Ultralytics' prints the same table.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Tuple, Union

from ..balance import threshold_of
from ..datayaml import load_dataset_yaml
from ..hyp import AugmentConfig
from ..settings import Settings, fraction_count  # noqa: F401 (fraction_count: where it was imported from)

LOGGER = logging.getLogger("yolo_data")

# Ultralytics 8.4's defaults (ultralytics/cfg/default.yaml) for the keys read here.
DEFAULTS: Dict[str, Any] = {
    "mosaic": 1.0, "mixup": 0.0, "cutmix": 0.0, "copy_paste": 0.0, "copy_paste_mode": "flip",
    "degrees": 0.0, "translate": 0.1, "scale": 0.5, "shear": 0.0, "perspective": 0.0,
    "hsv_h": 0.015, "hsv_s": 0.7, "hsv_v": 0.4, "flipud": 0.0, "fliplr": 0.5, "bgr": 0.0,
    "close_mosaic": 10, "cache": False, "rect": False, "fraction": 1.0, "single_cls": False,
    "workers": 8, "seed": 0, "multi_scale": 0.0, "imgsz": 640, "task": "detect", "mask_ratio": 4,
    "overlap_mask": True,
}

# key -> what yolo_data does with it ("" entries of NO_EQUIVALENT are warned about when not default)
MAPPING: Dict[str, str] = {
    "mosaic": "AugmentConfig.mosaic: probability of a 2x2 mosaic (YOLOv5's, partners from the item's partner group)",
    "mixup": "AugmentConfig.mixup: probability of mixing two mosaics (Beta(32, 32))",
    "cutmix": "AugmentConfig.cutmix: probability of pasting a rectangle of another mosaic that touches no "
              "box of this one (3 tries, side sqrt(1 - Beta(1, 1)) of the image's); its objects with 1% of "
              "their box inside (10% without polygons) kept, clipped to it",
    "copy_paste": "AugmentConfig.copy_paste with copy_paste_rule 'ultralytics': the share of the objects whose "
                  "copy covers < 30% of every box that are pasted, least overlapping first (polygons only)",
    "copy_paste_mode": "AugmentConfig.copy_paste_mode: 'flip' (mirrored own objects, every training image) or "
                       "'mixup' (another mosaic's objects, with probability copy_paste, in mosaics)",
    "degrees": "AugmentConfig.degrees", "translate": "AugmentConfig.translate", "scale": "AugmentConfig.scale",
    "shear": "AugmentConfig.shear", "perspective": "AugmentConfig.perspective",
    "hsv_h": "AugmentConfig.hsv_h", "hsv_s": "AugmentConfig.hsv_s", "hsv_v": "AugmentConfig.hsv_v",
    "flipud": "AugmentConfig.flipud", "fliplr": "AugmentConfig.fliplr",
    "close_mosaic": "dataset.close_mosaic(): mosaic, mixup and copy-paste off in the main process and in "
                    "persistent workers (a flag in shared memory), from that epoch's first batch",
    "cache": "cache_images: True/'ram' one RAM copy per node, 'disk' one file beside the label cache",
    "rect": "rect batches of the global batch (train: whole batches shuffled; val: always rect, pad 0.5)",
    "fraction": "the first round(n * fraction) images of the split in file order (an int >1: that many); "
                "a scalar applies to train, a list to [train, val, test], as in Ultralytics",
    "single_cls": "Settings single_cls: every class id becomes 0",
    "workers": "DataLoader workers, persistent, also on CPU (Ultralytics sets 0 on CPU; we keep the request)",
    "seed": "the seed of every item's generator and of the epoch's order (same batches for any worker count)",
    "task": "Settings task: how label rows are read and what the batch carries (detect, segment, pose, obb)",
    "mask_ratio": "Settings mask_ratio: segment masks at 1/mask_ratio of the image's height and width",
    "overlap_mask": "Settings overlap_mask: one mask per image holding each pixel's instance (smaller on top)",
}
NO_EQUIVALENT: Dict[str, str] = {
    "bgr": "images are always RGB; a BGR probability is ignored (warned when > 0)",
    "mosaic9": "(yolo_data's own hyp key, not Ultralytics'): 0",
}
# Not data settings, passed on by Ultralytics itself: multi_scale (preprocess_batch, unchanged), imgsz, batch.
# yolo_data's own training arguments, which Ultralytics does not know (its get_cfg refuses unknown keys):
# the trainer takes them out of the overrides before Ultralytics sees them.
OWN_ARGS: Dict[str, str] = {
    "class_balance": "Settings class_balance of the train loader: images of rare classes repeated by LVIS's "
                     "repeat factors (a threshold in (0, 1], True for 0.1); the val loader never",
    "endpoint_url": "the S3-compatible server of an s3:// dataset (http://host:port; default: "
                    "$AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)",
}


def remote_dataset(yaml: str, single_cls: bool = False) -> Dict[str, Any]:
    """The data dict Ultralytics' trainer works from (as its ``check_det_dataset`` makes one) for a
    dataset yaml in a bucket, which Ultralytics itself cannot read: its splits stay s3:// URLs, for
    yolo_data's datasets to read; class names as a dict; 3 channels; ``kpt_shape`` and ``flip_idx``
    where the yaml gives them."""
    spec = load_dataset_yaml(yaml)
    names = {0: "item"} if single_cls else dict(enumerate(spec.names))
    data: Dict[str, Any] = {"yaml_file": yaml, "path": str(spec.root), "names": names, "nc": len(names),
                            "channels": 3}
    for split, entries in spec.splits.items():
        data[split] = entries[0] if len(entries) == 1 else list(entries)
    if spec.kpt_shape:
        data["kpt_shape"] = list(spec.kpt_shape)
    if spec.flip_idx:
        data["flip_idx"] = list(spec.flip_idx)
    return data


def take_own_args(overrides: Optional[Dict[str, Any]]) -> Tuple[Optional[Dict[str, Any]], Dict[str, Any]]:
    """(Ultralytics' overrides without yolo_data's own keys, those keys' values): a new dict, the
    caller's is left as it was.  A bad ``class_balance`` is a ValueError here, before any training."""
    if not overrides:
        return overrides, {}
    rest = {k: v for k, v in overrides.items() if k not in OWN_ARGS}
    own = {k: overrides[k] for k in OWN_ARGS if k in overrides}
    if "class_balance" in own:
        threshold_of(own["class_balance"])
    return rest, own


def _get(cfg: Union[Dict[str, Any], Any], key: str):
    if isinstance(cfg, dict):
        value = cfg.get(key, DEFAULTS[key])
    else:
        value = getattr(cfg, key, DEFAULTS[key])
    return DEFAULTS[key] if value is None and key != "cache" else value


def augment_config(cfg) -> AugmentConfig:
    """The AugmentConfig of Ultralytics arguments ``cfg``; warns once per call about keys it ignores.
    Copy-paste follows Ultralytics' rule (``copy_paste_rule='ultralytics'``: copy_paste is the share of
    candidates pasted)."""
    if float(_get(cfg, "bgr")) != 0.0:
        LOGGER.warning(f"Ultralytics bgr={_get(cfg, 'bgr')}: {NO_EQUIVALENT['bgr']}")
    keys = ("mosaic", "mixup", "cutmix", "copy_paste", "degrees", "translate", "scale", "shear", "perspective",
            "hsv_h", "hsv_s", "hsv_v", "flipud", "fliplr")
    return AugmentConfig(**{k: float(_get(cfg, k)) for k in keys}, copy_paste_mode=str(_get(cfg, "copy_paste_mode")),
                         copy_paste_rule="ultralytics", mosaic9=0.0, albumentations=False)


def cache_mode(value) -> Union[bool, str]:
    """Ultralytics' ``cache`` (True/'ram'/'disk'/False/None, or the strings 'True'/'False' of a CLI)
    -> yolo_data's ``cache_images`` (False, 'ram' or 'disk')."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("ram", "true"):
            return "ram"
        if v == "disk":
            return "disk"
        if v in ("", "false", "none"):
            return False
        raise ValueError(f"cache={value!r}: use True/'ram', 'disk' or False")
    return "ram" if value is True else False


def split_fraction(fraction, split: str) -> Union[float, int]:
    """The part of ``split`` to use: a float ratio (1.0: all) or an int count.  A scalar applies to the
    train split only, a list gives [train, val, test] (missing entries: all); 0 and 1 are ratios."""
    if isinstance(fraction, (list, tuple)):
        k = ("train", "val", "test").index(split) if split in ("train", "val", "test") else len(fraction)
        fraction = fraction[k] if k < len(fraction) else 1.0
    elif split != "train":
        fraction = 1.0
    if isinstance(fraction, bool) or fraction in (0, 1):
        fraction = float(fraction)
    if fraction <= 0:
        raise ValueError(f"fraction {fraction} leaves no {split} images")
    return fraction


def loader_settings(cfg, mode: str, batch_size: int, stride: int, workers=None, rect=None, data=None,
                    class_balance: Union[bool, float, None] = False) -> Settings:
    """yolo_data Settings for ``mode`` 'train' (the training preset) or 'val' (the evaluation preset)
    from Ultralytics arguments ``cfg``.

    ``workers``: overrides cfg.workers (Ultralytics' trainer zeroes it on CPU before we see it).
    ``rect``: for 'val', None means always rect (Ultralytics' trainer); the standalone validator passes
    cfg.rect (``model.val()`` sets it True).  Images are first resized as Ultralytics' ``load_image``
    does, for training and evaluation: linearly, no side above imgsz (``capped_resize``).  Under DDP
    each evaluating rank takes whole batches, each image once.  ``data``: Ultralytics' dataset dict
    (the trainer's ``data``), whose ``kpt_shape`` and ``flip_idx`` a pose split needs (Ultralytics
    hands the loader a split's folder, not the yaml).  ``class_balance``: the train loader's (see
    OWN_ARGS); ignored for 'val', where every image counts once."""
    if mode not in ("train", "val"):
        raise ValueError(f"mode must be 'train' or 'val', not {mode!r}")
    train = mode == "train"
    imgsz = _get(cfg, "imgsz")
    if isinstance(imgsz, (list, tuple)):
        imgsz = max(imgsz)  # Ultralytics letterboxes to a square of the longest side too
    preset = Settings.training if train else Settings.evaluation
    return preset(
        img_size=int(imgsz), batch_size=int(batch_size), stride=int(stride), seed=int(_get(cfg, "seed")),
        rect=bool(_get(cfg, "rect")) if train else (True if rect is None else bool(rect)),
        pad=0.0 if train else 0.5, cache=cache_mode(_get(cfg, "cache")), single_cls=bool(_get(cfg, "single_cls")),
        workers=int(_get(cfg, "workers") if workers is None else workers),
        fraction=split_fraction(_get(cfg, "fraction"), mode), hyp=augment_config(cfg) if train else AugmentConfig(),
        linear_resize=True, capped_resize=True, each_image_once=True, task=str(_get(cfg, "task")),
        mask_ratio=int(_get(cfg, "mask_ratio")), overlap_mask=bool(_get(cfg, "overlap_mask")), mask_rule="ultralytics",
        kpt_shape=(data or {}).get("kpt_shape"), flip_idx=(data or {}).get("flip_idx"),
        class_balance=class_balance if train else False)
