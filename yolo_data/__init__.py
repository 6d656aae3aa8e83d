"""yolo_data: a YOLOv5-compatible detection dataloader with a safe label cache and DDP done right.

Data flow, one module each: sources (files) -> labels (verify a pair) -> scan (in parallel) ->
store (flat arrays) -> cache (label cache, in the container format) -> split (load or build) ->
index (filters, rect order; once) -> images (cache or file) -> mapping (an item: evaluation or training,
through geometry, mosaic, perspective, photometric, pipeline, tensors) -> dataset (YOLOv5's names) ->
sampling (the epoch's global order, per rank) -> collate -> loader.
"""
from .dataset import LoadImagesAndLabels, YoloDataset
from .distributed import RanksDisagreeError, ZeroFirstError, torch_distributed_zero_first, wait_for_the_master
from .problems import LabelError
from .settings import Settings
from .yolov5 import create_dataloader
from .torch_utils import init_torch_seeds, select_device, smart_DDP, time_synchronized
from . import segment  # noqa: F401  (yolo_data.segment: YOLOv5-seg's create_dataloader)

__version__ = "0.3.0"

__all__ = [
    "create_dataloader", "torch_distributed_zero_first", "wait_for_the_master", "select_device",
    "time_synchronized", "init_torch_seeds", "smart_DDP", "YoloDataset", "LoadImagesAndLabels",
    "ZeroFirstError", "RanksDisagreeError", "Settings", "LabelError",
]
