"""yolo_data's dataset and loader as Ultralytics' trainer and validator use them: an adapter over the
composition root (build.py) with Ultralytics' dataset view, batch dicts and loader methods.

Pure: never imports ultralytics (the plug-in in ``ultralytics.py`` calls ``create_loader``).

    loader_settings (Settings from Ultralytics' arguments) -> build_loader with
    UltralyticsDataset (labels as dicts), DictCollate (batches as Ultralytics' dicts), UltralyticsLoader
    (reset/close, lazy passes)
"""
from __future__ import annotations

from typing import Callable, Optional

from ..build import build_loader
from ..dataset import YoloDataset
from ..loading.loader import YoloDataLoader
from ..runtime import torch_private
from ..sampling.sampler import ShardSampler  # noqa: F401 (callers import it from here too: sampling/sampler.py)
from ..settings import Settings
from .ultralytics_batch import DictCollate, LabelDicts


class UltralyticsDataset(YoloDataset):
    """A YoloDataset with what Ultralytics reads besides YOLOv5's names: ``labels`` as a list-like of
    dicts (``LabelDicts``) instead of YOLOv5's (n, 5) arrays.  YoloDataset itself has the rest:
    ``close_mosaic(hyp)`` (also in persistent workers), and evaluation resized linearly as
    Ultralytics' ``load_image`` does (loader_settings sets ``linear_resize``)."""

    @property
    def labels(self) -> LabelDicts:
        """Per image a dict (see LabelDicts), as Ultralytics' datasets hold them."""
        return LabelDicts(self.store)


class UltralyticsLoader(YoloDataLoader):
    """A YoloDataLoader with Ultralytics' ``reset()`` and ``close()``, whose passes start lazily.

    Ultralytics' trainer calls ``enumerate(loader)`` before it may close the mosaic, and again after
    (on rank 0 only): a pass starts at its first batch, as with Ultralytics' own loader, so that
    first, unused ``enumerate`` fetches nothing with the old settings.  ``reset()`` drops the pass the
    workers began at construction (the early start), which was made with the settings of then."""

    def __iter__(self):
        yield from super().__iter__()

    def reset(self) -> None:
        """Drop the pass the workers began at construction (``discard_early_pass``): Ultralytics calls
        this after closing the mosaic, so the next pass is made with the settings of then."""
        self.discard_early_pass()

    def close(self) -> None:
        """Shut the persistent workers down now (Ultralytics calls this at the end of training); a pass
        after it starts new ones."""
        self.reset()
        it = torch_private.take_iterator(self)
        if it is not None:
            torch_private.shutdown_workers(it)


def create_loader(path, settings: Settings, rank: int = -1, prefix: str = "", split: Optional[str] = None,
                  cache_dir=None, to_xywhr: Optional[Callable] = None) -> UltralyticsLoader:
    """The loader of one split for Ultralytics (its ``dataset`` is an UltralyticsDataset), built by
    ``build_loader`` with batches as Ultralytics' dicts (ultralytics_batch.DictCollate).

    Args:
        path: the split: image folder, .txt list, list of them, dataset yaml, or ``s3://`` URL.
        settings: from ``loader_settings``.
        rank: the local rank under DDP, -1 otherwise.
        prefix: put before every line logged.
        split: as the Settings field of that name (which split of a dataset yaml); None: ``settings``'.
        cache_dir: as the Settings field of that name (where label caches go); None: ``settings``'.
        to_xywhr: Ultralytics' conversion of oriented-box corners (task 'obb'; see
            ultralytics_batch.oriented_boxes): (N, 4, 2) pixel corners to [x, y, w, h, angle]; None
            for the other tasks.

    Returns:
        An UltralyticsLoader whose batches are Ultralytics' dicts (ultralytics_batch.to_batch_dict):
        ``img`` uint8 (B, C, H, W) (C = 3: RGB; other C, ``settings.images.channels``: the images' bands
        in file order, as Ultralytics' own loader gives them), ``batch_idx`` float32 (N,), ``cls``
        float32 (N, 1), ``bboxes`` float32 (N, 4) normalised xywh ((N, 5) xywhr for 'obb'), ``im_file``,
        ``ori_shape``, ``resized_shape``, ``ratio_pad`` (evaluation), and the task's ``keypoints`` or
        ``masks``.
    """
    settings = settings.replace(**{k: v for k, v in (("split", split), ("cache_dir", cache_dir)) if v is not None})
    return build_loader(path, settings, rank, prefix, dataset_class=UltralyticsDataset,
                        collate=DictCollate(evaluation=not settings.augment, to_xywhr=to_xywhr,
                                            overlap_mask=settings.targets.overlap_mask),
                        loader_class=UltralyticsLoader)
