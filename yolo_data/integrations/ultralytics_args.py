"""Ultralytics' training arguments -> yolo_data's Settings.

Pure: never imports ultralytics.  ``cfg`` is anything with Ultralytics' argument names as attributes
(its ``IterableSimpleNamespace``, a ``types.SimpleNamespace``) or a dict of them; a missing key takes
Ultralytics' default (listed in ``DEFAULTS``), so tests need no Ultralytics.

Every key of Ultralytics' arguments (its ``cfg/default.yaml``, and the custom ``augmentations``) is in
one group, so none is dropped without a word: ``MAPPING`` (what yolo_data does with it),
``NO_EQUIVALENT`` (ignored, with one warning naming it when set), ``REFUSED`` (a one-line error before
training) or ``NOT_DATA`` (not read by a data pipeline: Ultralytics uses it as it always does).
docs/ultralytics.md prints the same tables; a test checks them against the installed default.yaml.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple, Union

from ..augment.hyp import AugmentConfig
from ..formats.datayaml import load_dataset_yaml
from ..formats.memory import SCHEME as MEMORY_SCHEME, entry_of
from ..formats.ndjson import export_dataset
from ..labels.summary import printing_rank
from ..sampling.balance import threshold_of
from ..settings import checked_classes, Settings
from ..formats.sources import fraction_count  # noqa: F401 (where it was imported from)
from ..storage import Storage, StorageOptions, backend_for, scheme_of, using

LOGGER = logging.getLogger("yolo_data")

# Ultralytics 8.4's defaults (ultralytics/cfg/default.yaml) for the keys read here.
DEFAULTS: Dict[str, Any] = {
    "mosaic": 1.0, "mixup": 0.0, "cutmix": 0.0, "copy_paste": 0.0, "copy_paste_mode": "flip",
    "degrees": 0.0, "translate": 0.1, "scale": 0.5, "shear": 0.0, "perspective": 0.0,
    "hsv_h": 0.015, "hsv_s": 0.7, "hsv_v": 0.4, "flipud": 0.0, "fliplr": 0.5, "bgr": 0.0,
    "close_mosaic": 10, "cache": False, "rect": False, "fraction": 1.0, "single_cls": False,
    "workers": 8, "seed": 0, "multi_scale": 0.0, "imgsz": 640, "task": "detect", "mask_ratio": 4,
    "overlap_mask": True, "classes": None, "split": "val",
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
    "classes": "Settings classes: label rows of other classes dropped, images left without rows kept as "
               "backgrounds, train and val (as Ultralytics); with remap_classes the ids become 0..k-1 and the "
               "model is made with the kept names; a string (YOLOE's text prompts) is refused",
    "data": "the dataset yaml (local, or s3:// read by yolo_data); its channels (1, 3, 4, 10, ...: the bands of "
            "every image, 3 without the key) are the bands both loaders read and the model's input channels",
    "imgsz": "Settings img_size (a list: its largest side, as Ultralytics letterboxes to a square)",
    "batch": "the per-rank batch Ultralytics' trainer hands the loader (after its AutoBatch, which builds our "
             "dataset to count objects)",
    "split": "the split a standalone validator reads (Ultralytics picks its path), and the entry of a "
             "fraction list that applies to it",
    "multi_scale": "Ultralytics' own preprocess_batch resizes our batches, unchanged",
}
NO_EQUIVALENT: Dict[str, str] = {
    "bgr": "images are always RGB; a BGR probability is ignored",
    "mosaic9": "(yolo_data's own hyp key, not Ultralytics'): 0",
}
# refused whenever given, with a one-line error before any training
REFUSED: Dict[str, str] = {
    "augmentations": "a list of Albumentations transforms (Ultralytics' custom key): yolo_data's loader does not "
                     "apply them",
}
# Ultralytics' keys that no data pipeline reads, by what reads them (they keep their Ultralytics meaning)
_NOT_DATA_GROUPS = {
    "the run": "mode model epochs time patience save save_period device project name exist_ok pretrained cls_remap "
               "optimizer verbose deterministic cos_lr resume amp profile freeze compile channels_last val cfg",
    "the loss and the optimiser (cls_pw counts the loader's labels, after classes)":
        "lr0 lrf momentum weight_decay warmup_epochs warmup_momentum warmup_bias_lr distill_model dis box cls cls_pw "
        "dfl pose kobj rle angle dlog dgrad dlam nbs dropout",
    "validation's NMS, metrics and plots": "save_json conf iou max_det quantize dnn plots nms visualize augment "
                                           "agnostic_nms",
    "prediction, tracking, display and export": "source vid_stride stream_buffer retina_masks embed show save_frames "
                                                "save_txt save_conf save_crop show_labels show_conf show_boxes "
                                                "line_width format optimize dynamic simplify opset workspace tracker",
    "classification only (Ultralytics' detection pipelines ignore it too)": "auto_augment erasing",
}
NOT_DATA: Dict[str, str] = {key: what for what, keys in _NOT_DATA_GROUPS.items() for key in keys.split()}
# yolo_data's own training arguments, which Ultralytics does not know (its get_cfg refuses unknown keys):
# the trainer takes them out of the overrides before Ultralytics sees them.
OWN_ARGS: Dict[str, str] = {
    "class_balance": "Settings class_balance of the train loader: images of rare classes repeated by LVIS's "
                     "repeat factors (a threshold in (0, 1], True for 0.1); the val loader never",
    "endpoint_url": "the S3-compatible server of an s3:// dataset (http://host:port; default: "
                    "$AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)",
    "remap_classes": "with classes: class ids become 0..k-1 in the order of classes, and the model is made with "
                     "k classes named as the kept ones (train and val loaders alike)",
}


def remote_dataset(yaml: str, single_cls: bool = False, endpoint_url: Optional[str] = None) -> Dict[str, Any]:
    """The data dict Ultralytics' trainer works from (as its ``check_det_dataset`` makes one) for a
    dataset yaml in a bucket (at ``endpoint_url``, else the default endpoint), which Ultralytics itself
    cannot read: its splits stay s3:// URLs, for yolo_data's datasets to read; class names as a dict; the
    yaml's ``channels`` (3 without the key); ``kpt_shape`` and ``flip_idx`` where the yaml gives them."""
    if scheme_of(yaml) == MEMORY_SCHEME:
        return _memory_dataset(yaml, single_cls)
    with using(Storage(StorageOptions(endpoint_url=endpoint_url))):
        spec = load_dataset_yaml(yaml)
    names = {0: "item"} if single_cls else dict(enumerate(spec.names))
    data: Dict[str, Any] = {"yaml_file": yaml, "path": str(spec.root), "names": names, "nc": len(names),
                            "channels": spec.channels or 3}
    for split, entries in spec.splits.items():
        data[split] = entries[0] if len(entries) == 1 else list(entries)
    if spec.kpt_shape:
        data["kpt_shape"] = list(spec.kpt_shape)
    if spec.flip_idx:
        data["flip_idx"] = list(spec.flip_idx)
    return data


def memory_data(train, val=None, channels: int = 3) -> str:
    """Ultralytics' ``data=`` for in-memory sources (formats.memory.ItemSource): a string, as Ultralytics
    keeps ``data`` in its saved arguments and checkpoints, naming the sources of this process.

    Args:
        train: the train split's source.
        val: the val split's source (default: ``train``).
        channels: the bands of the images (the model's input channels and what both loaders read).

    Returns:
        ``memory://<train id>?val=<val id>&channels=<c>``, for ``YOLO(...).train(data=..., trainer=YoloDataTrainer)``
        in this process (Ultralytics' own DDP starts fresh processes, which do not hold the sources).
    """
    t, v = entry_of(train, hold=True), entry_of(train if val is None else val, hold=True)
    if not (isinstance(t, str) and isinstance(v, str) and t.startswith(MEMORY_SCHEME) and v.startswith(MEMORY_SCHEME)):
        raise TypeError("memory_data(train, val): in-memory sources (yolo_data.ItemSource), not paths")
    return f"{t}?val={v.rpartition('/')[2]}&channels={int(channels)}"


def _memory_dataset(url: str, single_cls: bool) -> Dict[str, Any]:
    """The data dict of a ``memory_data`` string: its splits the sources' URLs, the train source's names."""
    from urllib.parse import parse_qs
    train, _, query = url.partition("?")
    q = parse_qs(query)
    val = f"{MEMORY_SCHEME}://{q['val'][0]}" if "val" in q else train
    names = {0: "item"} if single_cls else dict(enumerate(str(n) for n in backend_for(train).source(train).names))
    return {"yaml_file": url, "path": "", "names": names, "nc": len(names), "train": train, "val": val,
            "channels": int(q.get("channels", ["3"])[0])}
def ndjson_data(export: str, single_cls: bool = False, endpoint_url: Optional[str] = None) -> Dict[str, Any]:
    """The data dict Ultralytics' trainer works from for an NDJSON export (formats/ndjson.py), which
    Ultralytics would convert by downloading every image: each split the records name becomes
    ``<file>#<split>``, read in place by yolo_data's loaders; class names as a dict; the first line's
    ``channels`` (3 without the key), ``kpt_shape`` and ``flip_idx``."""
    with using(Storage(StorageOptions(endpoint_url=endpoint_url))):
        spec = export_dataset(export)
    if not spec.splits:
        raise ValueError(f"{export}: no image records")
    names = {0: "item"} if single_cls else dict(enumerate(spec.names))
    data: Dict[str, Any] = {"yaml_file": str(export), "path": str(spec.root), "names": names, "nc": len(names),
                            "channels": spec.channels or 3}
    data.update((split, entries[0]) for split, entries in spec.splits.items())
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
    if not isinstance(own.get("remap_classes", False), bool):
        raise ValueError(f"remap_classes must be True or False, got {own['remap_classes']!r}")
    return rest, own


def _cfg_value(cfg, key: str, default=None):
    return cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)


def data_channels(data: Optional[Dict[str, Any]]) -> Optional[int]:
    """The bands of the images of Ultralytics' dataset dict ``data`` (its ``channels``, which
    Ultralytics' ``check_det_dataset`` takes from the data yaml, 3 without the key), the number both
    loaders read and the model is built for; None without ``data`` or the key (the loader then reads
    the yaml it is given, else 3 bands).  A ``channels`` that is not a whole number >= 1 is a ValueError
    naming the yaml: no image has such bands, and the model could not be built for it."""
    c = (data or {}).get("channels")
    if c is None:
        return None
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise ValueError(f"{data.get('yaml_file', 'the data yaml')}: channels: {c!r}: the bands of every image "
                         "(1 for grayscale, 3 for colour, N for N-band images) must be a whole number >= 1")
    return c


def check_arguments(cfg, data: Optional[Dict[str, Any]] = None) -> None:
    """Refuse, with a one-line ValueError naming the key, what yolo_data cannot do for Ultralytics'
    arguments ``cfg`` (REFUSED; ``classes`` that are not class ids; a ``scale`` (min, max) pair that is
    not 1 -/+ a gain) and, with ``data`` (the trainer's dataset dict), a ``channels`` that no image can
    have (``data_channels``)."""
    if _cfg_value(cfg, "augmentations"):
        raise ValueError(f"augmentations=...: {REFUSED['augmentations']}; remove the argument (or train with "
                         "Ultralytics' own loader)")
    data_channels(data)
    checked_classes(_cfg_value(cfg, "classes"))
    _scale_gain(_get(cfg, "scale"))


def ignored_arguments(cfg) -> List[str]:
    """One warning per key of ``cfg`` that is set and ignored (NO_EQUIVALENT), each naming it."""
    out = []
    if float(_get(cfg, "bgr")) != 0.0:
        out.append(f"Ultralytics bgr={_get(cfg, 'bgr')}: {NO_EQUIVALENT['bgr']}")
    return out


def warn_ignored(cfg) -> None:
    """Log ``ignored_arguments(cfg)`` on the printing rank (the plug-in's trainer does it once a run)."""
    if printing_rank():
        for message in ignored_arguments(cfg):
            LOGGER.warning(message)


def _scale_gain(scale) -> float:
    """Ultralytics' ``scale``: a gain s (factors 1 - s .. 1 + s), or a (min, max) pair of factors, which
    yolo_data's random perspective takes only as 1 -/+ a gain."""
    if isinstance(scale, (list, tuple)):
        if len(scale) == 2 and abs((1 - float(scale[0])) - (float(scale[1]) - 1)) < 1e-9:
            return float(scale[1]) - 1
        raise ValueError(f"scale={tuple(scale)!r}: yolo_data's random perspective draws factors 1 - s .. 1 + s; "
                         "give a gain s, or a pair (1 - s, 1 + s)")
    return float(scale)


def class_subset(data: Dict[str, Any], classes, remap: bool = False, single_cls: bool = False) -> Dict[str, Any]:
    """Ultralytics' dataset dict ``data`` as the model is to see it with ``classes`` and ``remap``
    (``remap_classes``): a new dict whose names are the kept ones in the order of ``classes`` (ids
    0..k-1) and nc k with ``remap``; else ``data`` itself.  A class id outside the dataset's names is a
    ValueError naming the yaml.  ``single_cls`` wins (Ultralytics has named the one class already)."""
    classes = checked_classes(classes)
    if remap and classes is None:
        raise ValueError("remap_classes=True needs classes=[...] (the class ids to keep, in their new order)")
    if classes is None:
        return data
    names = data["names"]
    names = names if isinstance(names, dict) else dict(enumerate(names))
    outside = [c for c in classes if c not in names]
    if outside and not single_cls:
        raise ValueError(f"classes={list(classes)}: {data.get('yaml_file', 'the dataset')} has {len(names)} classes "
                         f"(ids 0..{len(names) - 1}); {', '.join(map(str, outside))} is not one of them")
    if not remap or single_cls:
        return data
    kept = {k: names[c] for k, c in enumerate(classes)}
    return {**data, "names": kept, "nc": len(kept)}


def validation_classes(classes, remap: bool, data_nc: int, model_nc: Optional[int], single_cls: bool = False):
    """(classes, remap) a validator's loader uses: ``classes``, and where the model has fewer classes than
    the labels would (``data_nc`` after the remap; 1 with ``single_cls``), only the ids it can predict,
    as Ultralytics' own validator drops the others' labels."""
    classes = checked_classes(classes)
    label_nc = 1 if single_cls else len(classes) if remap and classes is not None else data_nc
    if not model_nc or model_nc >= label_nc:
        return classes, remap
    if remap:
        return classes[:model_nc], True
    kept = tuple(c for c in (classes if classes is not None else range(data_nc)) if c < model_nc)
    if not kept:
        raise ValueError(f"classes={list(classes)}: the model has {model_nc} classes (ids 0..{model_nc - 1}), so "
                         "no label is left to validate against (a model trained with remap_classes=True is "
                         "validated with the same classes and remap_classes=True)")
    return kept, False


def names_differ(model_names, data_names, classes, remap: bool) -> List[str]:
    """The ids whose name in the model differs from the name its labels have (``data_names`` after
    ``classes`` with ``remap``), as "id: 'model' / 'labels'" (at most 3): a model trained with
    ``remap_classes`` and validated without it, or with the classes in another order."""
    def as_dict(names):
        return dict(names) if isinstance(names, dict) else dict(enumerate(names or ()))
    model, data = as_dict(model_names), as_dict(data_names)
    classes = checked_classes(classes)
    labels = {k: data.get(c) for k, c in enumerate(classes)} if remap and classes is not None else data
    out = [f"{k}: {model[k]!r} / {labels[k]!r}" for k in sorted(model) if k in labels and model[k] != labels[k]]
    return out[:3]


def _get(cfg: Union[Dict[str, Any], Any], key: str):
    if isinstance(cfg, dict):
        value = cfg.get(key, DEFAULTS[key])
    else:
        value = getattr(cfg, key, DEFAULTS[key])
    return DEFAULTS[key] if value is None and key != "cache" else value


def augment_config(cfg) -> AugmentConfig:
    """The AugmentConfig of Ultralytics arguments ``cfg`` (keys it ignores: ``ignored_arguments``).
    Copy-paste follows Ultralytics' rule (``copy_paste_rule='ultralytics'``: copy_paste is the share of
    candidates pasted)."""
    keys = ("mosaic", "mixup", "cutmix", "copy_paste", "degrees", "translate", "shear", "perspective",
            "hsv_h", "hsv_s", "hsv_v", "flipud", "fliplr")
    return AugmentConfig(**{k: float(_get(cfg, k)) for k in keys}, scale=_scale_gain(_get(cfg, "scale")),
                         copy_paste_mode=str(_get(cfg, "copy_paste_mode")), copy_paste_rule="ultralytics",
                         mosaic9=0.0, albumentations=False)


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
                    class_balance: Union[bool, float, None] = False, remap_classes: bool = False,
                    warn: bool = True, endpoint_url: Optional[str] = None) -> Settings:
    """yolo_data Settings for ``mode`` 'train' (the training preset) or 'val' (the evaluation preset)
    from Ultralytics arguments ``cfg``.

    Images are first resized as Ultralytics' ``load_image`` does, for training and evaluation:
    linearly, no side above imgsz (``capped_resize``).  Under DDP each evaluating rank takes whole
    batches, each image once.  ``classes`` (cfg) and ``remap_classes`` (OWN_ARGS) apply to both loaders
    alike.  The fraction of 'val' is the entry of cfg.split, as Ultralytics takes it.

    Args:
        cfg: Ultralytics' arguments (its namespace, a ``types.SimpleNamespace`` or a dict); a missing
            key takes Ultralytics' default (DEFAULTS).
        mode: 'train' or 'val'.
        batch_size: per rank.
        stride: the model's largest stride.
        workers: overrides cfg.workers (Ultralytics' trainer zeroes it on CPU before we see it).
        rect: for 'val', None means always rect (Ultralytics' trainer); the standalone validator passes
            cfg.rect (``model.val()`` sets it True).  Ignored for 'train' (cfg.rect).
        data: Ultralytics' dataset dict (the trainer's ``data``), whose ``kpt_shape`` and ``flip_idx`` a
            pose split needs and whose ``channels`` are the bands every image is read with
            (``data_channels``): Ultralytics hands the loader a split's folder, not the yaml.
        class_balance: the train loader's (see OWN_ARGS); ignored for 'val', where every image counts once.
        remap_classes: with cfg.classes, class ids become 0..k-1 in the order of the classes (OWN_ARGS).
        warn: for 'train', log the keys that are ignored (the trainer logs them once itself).
        endpoint_url: the S3 endpoint of a dataset in a bucket, held by the dataset's own storage
            (OWN_ARGS); None: the AWS tools' way of finding it.

    Returns:
        The Settings a loader of that split is built with (``create_loader``).

    Raises:
        ValueError: ``mode`` is neither 'train' nor 'val', or an argument cannot be honoured
            (``check_arguments``, ``split_fraction``, ``cache_mode``).
    """
    if mode not in ("train", "val"):
        raise ValueError(f"mode must be 'train' or 'val', not {mode!r}")
    train = mode == "train"
    check_arguments(cfg)
    if train and warn:
        warn_ignored(cfg)
    imgsz = _get(cfg, "imgsz")
    if isinstance(imgsz, (list, tuple)):
        imgsz = max(imgsz)  # Ultralytics letterboxes to a square of the longest side too
    preset = Settings.training if train else Settings.evaluation
    return preset(
        img_size=int(imgsz), batch_size=int(batch_size), stride=int(stride), seed=int(_get(cfg, "seed")),
        rect=bool(_get(cfg, "rect")) if train else (True if rect is None else bool(rect)),
        pad=0.0 if train else 0.5, cache=cache_mode(_get(cfg, "cache")), single_cls=bool(_get(cfg, "single_cls")),
        workers=int(_get(cfg, "workers") if workers is None else workers),
        fraction=split_fraction(_get(cfg, "fraction"), mode if train else str(_get(cfg, "split"))),
        hyp=augment_config(cfg) if train else AugmentConfig(),
        classes=checked_classes(_get(cfg, "classes")), remap_classes=bool(remap_classes),
        linear_resize=True, capped_resize=True, each_image_once=True, task=str(_get(cfg, "task")),
        mask_ratio=int(_get(cfg, "mask_ratio")), overlap_mask=bool(_get(cfg, "overlap_mask")), mask_rule="ultralytics",
        kpt_shape=(data or {}).get("kpt_shape"), flip_idx=(data or {}).get("flip_idx"),
        class_balance=class_balance if train else False, endpoint_url=endpoint_url, channels=data_channels(data))
