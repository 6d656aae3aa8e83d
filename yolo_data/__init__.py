"""yolo_data: a YOLOv5-compatible detection dataloader with a safe label cache and DDP done right.

The folders follow the data, from bytes to labels to items to batches to loaders (``docs/layout.md`` is
the map, one table per folder):

    geometry      box math, letterbox shapes, masks
    runtime       private torch calls, free space and locks, DataLoader worker set-up
    distributed   ranks, rank 0 first, the job-wide hand-off, rank agreement
    storage       buckets, the object cache, the file container of every cache
    formats       label formats (a registry), the dataset yaml, a split's files
    images        decode and resize; images that failed to decode
    labels        verify, scan, flat store, label cache, a split loaded once per job
    sampling      the epoch's order per rank, seeds, class balance, what a run shares
    augment       mosaic, perspective, colour and their order, with explicit generators
    loading       the batch tensor, collate, the loader
    items         the index, image caches, the task, the mappers
    report        the dataset report
    integrations  YOLOv5's functions and the Ultralytics plug-in

On top: ``settings`` (one ``Settings``), ``dataset`` (``YoloDataset``), ``build`` (the one place a
loader is assembled) and ``cli``.
"""
from . import moved
from .dataset import LoadImagesAndLabels, YoloDataset
from .distributed import RanksDisagreeError, ZeroFirstError, torch_distributed_zero_first, wait_for_the_master
from .formats.memory import ItemSource, MemorySource
from .formats.problems import LabelError
from .integrations import yolov5_segment as segment  # noqa: F401  (YOLOv5-seg's create_dataloader)
from .integrations.torch_utils import init_torch_seeds, select_device, smart_DDP, time_synchronized
from .integrations.yolov5 import create_dataloader
from .settings import Settings
from .version import __version__

moved.install()  # the flat paths of 0.3 (yolo_data.cache, ...) still import, with a DeprecationWarning

__all__ = [
    "create_dataloader", "torch_distributed_zero_first", "wait_for_the_master", "select_device",
    "time_synchronized", "init_torch_seeds", "smart_DDP", "YoloDataset", "LoadImagesAndLabels",
    "ZeroFirstError", "RanksDisagreeError", "Settings", "LabelError", "ItemSource", "MemorySource", "__version__",
]
