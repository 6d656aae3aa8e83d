"""YOLOv5's ``create_dataloader``: its signature and return value, as an adapter over build.py."""
from __future__ import annotations

from ..build import build_loader
from ..settings import Settings, as_settings


def create_dataloader(path, imgsz, batch_size, stride, single_cls=False, hyp=None, augment=False, cache=False,
                      pad=0.0, rect=False, rank=-1, workers=8, image_weights=False, quad=False, prefix="",
                      shuffle=False, seed=0, *, settings: Settings = None, **fields):
    """``(loader, dataset)`` as YOLOv5 7.0's ``create_dataloader`` returns them.

    YOLOv5's arguments mean what they mean there (``batch_size``: per rank; ``rank``: the local rank
    under DDP, -1 otherwise); ``settings`` (a :class:`~yolo_data.settings.Settings`) gives everything
    they do not cover, and any of its fields may also be given by name (``split='val'``,
    ``cache_dir=...``, ``partner_group=4``); YOLOv5's arguments win over both.  ``augment`` picks the
    training or evaluation preset of every decision not given (settings.py).  ``class_balance=0.1``
    (a threshold in (0, 1], True for 0.1): the training loader repeats images of rare classes by
    LVIS's repeat factors (balance.py); each epoch then has floor(sum of the factors) draws, so
    ``len(loader)`` grows.  Refused with ``image_weights`` and for evaluation (``augment=False``).

    ``path``: image folder, .txt list, list of these, or a dataset yaml (``split`` picks 'train'/'val'/
    'test'; default 'train' when ``augment`` else 'val'); also a COCO .json or a Pascal VOC folder or
    ImageSets list, read in place.  ``cache``: False, True/'ram' (one copy per node, in a file without a
    name in ``ram_dir``, default $YOLO_DATA_SHM_DIR or /dev/shm) or 'disk'.

    Batches are cut from one global order per epoch (sampling/sampler.py): for a fixed ``seed`` and global batch
    (``batch_size`` x world size), step k holds the same images, targets and paths on any number of
    ranks and workers, and ``loader.state_dict()`` / ``load_state_dict()`` resume mid-epoch on any of
    them.  Workers persist across epochs and start when the loader is built (``early_start=False``: at
    the first ``iter``).  Assembly, worker count, /dev/shm room and the ranks' agreement: build.py.

    Args:
        path: image folder, .txt list, list of these, dataset yaml, COCO .json or Pascal VOC folder/list.
        imgsz: the long side images are resized to, and the letterbox size.
        batch_size: per rank.
        stride: the model's largest stride (rect shapes are multiples of it).
        single_cls: every class becomes class 0.
        hyp: YOLOv5's hyp dict or yaml path (default: hyp.scratch-low's).
        augment: training augmentation, and the training preset of every decision not given.
        cache: False, True or 'ram' (one copy per node), or 'disk'.
        pad: rect shapes widened by ``pad * stride``.
        rect: rectangular batches.
        rank: the local rank under DDP, -1 otherwise.
        workers: at most this many DataLoader workers (fewer where CPUs or /dev/shm say so).
        image_weights: the training script weights the draws (``dataset.indices`` each epoch).
        quad: YOLOv5's collate_fn4 (4 items make one image of twice the size).
        prefix: put before every line logged.
        shuffle: a new order every epoch.
        seed: keys every random choice (with the epoch and the item).
        settings: a Settings for everything the arguments above do not cover (they win over it).
        **fields: Settings fields by name (``split='val'``, ``cache_dir=...``, ``class_balance=0.1``).

    Returns:
        ``(loader, dataset)``: a YoloDataLoader, batches ``(imgs, targets, paths, shapes)`` with imgs
        uint8 (B, 3, H, W) RGB and targets float32 (N, 6) [image index, class, x, y, w, h] normalised;
        and its YoloDataset (``loader.dataset``).
    """
    settings = as_settings(settings, **fields).replace(
        img_size=imgsz, batch_size=batch_size, stride=stride, single_cls=single_cls, hyp=hyp, augment=augment,
        cache=cache, pad=pad, rect=rect, workers=workers, image_weights=image_weights, quad=quad, shuffle=shuffle,
        seed=seed)
    loader = build_loader(path, settings, rank, prefix)
    return loader, loader.dataset
