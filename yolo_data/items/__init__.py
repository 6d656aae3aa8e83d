"""From an index entry to a finished item: the index, image caches, the task, the mappers.

Modules, in the order data flows through them:

    index       filters, rect order and shapes, built once from the split's store
    imagecache  decoded images once per node, in RAM or on disk
    task        what a label row holds and what each item carries for the split's task
    mapping     the evaluation and the training mapper
"""
from .index import SplitIndex, build_index
from .imagecache import ImageCacheSpec, disk_candidates, normalise_mode, open_or_build, shm_dir
from .task import LabelTask, polygons_of, resolve_task
from .mapping import DrawKey, EvalMapper, TrainMapper, make_mapper

__all__ = ["SplitIndex", "build_index", "ImageCacheSpec", "disk_candidates", "normalise_mode", "open_or_build",
           "shm_dir", "LabelTask", "polygons_of", "resolve_task", "DrawKey", "EvalMapper", "TrainMapper",
           "make_mapper"]
