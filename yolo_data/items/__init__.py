"""From an index entry to a finished item: the index, image caches, the task, the mappers, and the
assembly of a dataset's parts.

Modules, in the order data flows through them:

    index       filters, rect order and shapes, built once from the split's store
    imagecache  decoded images once per node, in RAM or on disk
    task        what a label row holds and what each item carries for the split's task
    mapping     the evaluation and the training mapper; a caller's own mapper in their place
    parts       a dataset's parts from a path and a Settings: labels, index, images, mapper
"""
from .imagecache import ImageCacheSpec, disk_candidates, normalise_mode, open_or_build, shm_dir
from .index import SplitIndex, build_index
from .mapping import DrawKey, EvalMapper, IndexItem, ItemMapper, TrainMapper, make_mapper
from .parts import DatasetParts, assemble
from .task import LabelTask, polygons_of, resolve_task

__all__ = ["SplitIndex", "build_index", "ImageCacheSpec", "disk_candidates", "normalise_mode", "open_or_build",
           "shm_dir", "LabelTask", "polygons_of", "resolve_task", "DrawKey", "EvalMapper", "IndexItem", "ItemMapper",
           "TrainMapper", "make_mapper", "DatasetParts", "assemble"]
