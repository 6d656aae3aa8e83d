"""YOLOv5-seg's ``create_dataloader`` (``utils/segment/dataloaders.py``): its signature and its batches,
as an adapter over build.py.

A batch is ``(imgs, targets, paths, shapes, masks)``: imgs uint8 (B, 3, H, W) RGB; targets float32 (N, 6)
[image index, class, x, y, w, h] normalised; masks, per image concatenated along dim 0, with r the
mask ratio:

    overlap_mask=True:   (B, H // r, W // r), pixel = 1-based position of its instance among that
                         image's targets (which are ordered by mask area, descending), 0 for none;
                         uint8, int32 when an image has more than 255 instances
    overlap_mask=False:  (N, H // r, W // r) uint8 0/1, row i the mask of target row i

In YOLOv5's own ``segment/train.py`` and ``segment/val.py``, after YOLOv5's imports:

    from yolo_data.integrations.yolov5_segment import create_dataloader
"""
from __future__ import annotations

from ..build import build_loader
from ..dataset import YoloDataset
from ..loading.collate import collate_fn
from ..settings import Settings, as_settings


def collate_masks(batch):
    """YOLOv5-seg's collate: items (img, targets, path, shapes, {"masks": ...}) -> (imgs (B, 3, H, W),
    targets (N, 6) with column 0 the image's index, paths, shapes, masks joined along dim 0)."""
    imgs, targets, paths, shapes, extras = collate_fn(batch)
    return imgs, targets, paths, shapes, extras["masks"]


def create_dataloader(path, imgsz, batch_size, stride, single_cls=False, hyp=None, augment=False, cache=False,
                      pad=0.0, rect=False, rank=-1, workers=8, image_weights=False, quad=False, prefix="",
                      shuffle=False, mask_downsample_ratio=1, overlap_mask=False, seed=0, *,
                      settings: Settings = None, **fields):
    """``(loader, dataset)`` as YOLOv5 7.0's segment ``create_dataloader`` returns them, batches
    ``(imgs, targets, paths, shapes, masks)`` (module docstring).

    The arguments are those of :func:`yolo_data.integrations.yolov5.create_dataloader` plus
    ``mask_downsample_ratio`` (masks are 1/ratio of the image's height and width) and ``overlap_mask``
    (one mask per image); the task is 'segment'.  ``quad`` is refused: YOLOv5's collate_fn4 makes
    detection batches only.

    Args:
        path: image folder, .txt list, list of these, or dataset yaml, with polygon labels.
        imgsz: the long side images are resized to, and the letterbox size.
        batch_size: per rank.
        stride: the model's largest stride.
        single_cls: every class becomes class 0.
        hyp: YOLOv5's hyp dict or yaml path.
        augment: training augmentation, and the training preset of every decision not given.
        cache: False, True or 'ram', or 'disk'.
        pad: rect shapes widened by ``pad * stride``.
        rect: rectangular batches.
        rank: the local rank under DDP, -1 otherwise.
        workers: at most this many DataLoader workers.
        image_weights: the training script weights the draws.
        quad: must be False (ValueError otherwise).
        prefix: put before every line logged.
        shuffle: a new order every epoch.
        mask_downsample_ratio: masks are 1/ratio of the image's height and width.
        overlap_mask: one mask per image (pixel = 1-based instance position), else one 0/1 mask per target.
        seed: keys every random choice (with the epoch and the item).
        settings: a Settings for everything the arguments above do not cover (they win over it).
        **fields: Settings fields by name (``split='val'``, ``cache_dir=...``).

    Returns:
        ``(loader, dataset)``: batches ``(imgs, targets, paths, shapes, masks)`` (module docstring), and
        the YoloDataset.
    """
    if quad:
        raise ValueError("quad=True (YOLOv5's collate_fn4) makes detection batches only; segmentation needs "
                         "quad=False")
    settings = as_settings(settings, **fields).replace(
        img_size=imgsz, batch_size=batch_size, stride=stride, single_cls=single_cls, hyp=hyp, augment=augment,
        cache=cache, pad=pad, rect=rect, workers=workers, image_weights=image_weights, quad=quad, shuffle=shuffle,
        seed=seed, task="segment", mask_ratio=mask_downsample_ratio, overlap_mask=overlap_mask)
    loader = build_loader(path, settings, rank, prefix, collate=collate_masks)
    return loader, loader.dataset


class LoadImagesAndLabelsAndMasks(YoloDataset):
    """YOLOv5-seg's ``LoadImagesAndLabelsAndMasks(path, img_size, batch_size, augment, hyp, rect,
    image_weights, cache_images, single_cls, stride, pad, min_items, prefix, downsample_ratio, overlap)``
    over YoloDataset; items ``(img, targets, path, shapes, {"masks": masks})`` (``collate_fn`` makes the
    5-tuple batch); ``settings`` gives what the signature has no parameter for."""

    def __init__(self, path, img_size=640, batch_size=16, augment=False, hyp=None, rect=False, image_weights=False,
                 cache_images=False, single_cls=False, stride=32, pad=0, min_items=0, prefix="", downsample_ratio=1,
                 overlap=False, *, settings=None, **fields):
        """YOLOv5-seg's dataset of ``path``, with polygon labels.

        Args:
            path: image folder, .txt list, list of them, or dataset yaml, with polygon labels.
            img_size: the long side images are resized to, and the letterbox size.
            batch_size: the batch rect shapes are made of (YOLOv5's per-process batch).
            augment: training augmentation (the training preset of every decision not given).
            hyp: YOLOv5's hyp dict or yaml path.
            rect: rectangular batches (images of one batch letterboxed to one shape).
            image_weights: the training script weights the draws.
            cache_images: False, True or 'ram' (one copy per node), or 'disk'.
            single_cls: every class becomes class 0.
            stride: rect shapes are multiples of it.
            pad: rect shapes are widened by ``pad * stride``.
            min_items: images with fewer labels are left out.
            prefix: put before every line logged.
            downsample_ratio: masks are 1/ratio of the image's height and width.
            overlap: one mask per image (uint8 (H // r, W // r), pixel = 1-based position of its instance
                among the image's targets), else one 0/1 mask per target row.
            settings: a Settings for what the parameters above do not cover (they win over it).
            **fields: Settings fields by name (``split='val'``, ``cache_dir=...``).
        """
        super().__init__(path, as_settings(settings, **fields).replace(
            img_size=img_size, batch_size=batch_size, augment=augment, hyp=hyp, rect=rect,
            image_weights=image_weights, cache=cache_images, single_cls=single_cls, stride=stride, pad=pad,
            min_items=min_items, task="segment", mask_ratio=downsample_ratio, overlap_mask=overlap), prefix)
        self.downsample_ratio, self.overlap = downsample_ratio, overlap  # YOLOv5's attribute names

    collate_fn = staticmethod(collate_masks)
