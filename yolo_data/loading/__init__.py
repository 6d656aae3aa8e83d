"""From items to batches: the batch tensor, its shared memory, collate and the loader.

Modules, in the order data flows through them:

    tensors      a finished item into its slot of the batch tensor; YOLOv5's target rows
    batchmemory  workers reuse their batches' shared memory
    collate      YOLOv5's collate_fn and its quad variant
    loader       `YoloDataLoader`: early start, `state_dict`
"""
from .collate import QuadCollate, collate_fn, one_batch
from .loader import YoloDataLoader
from .tensors import BatchImages, Scratch, shared_fd, targets_of, write_letterboxed, write_rgb

__all__ = ["BatchImages", "Scratch", "shared_fd", "targets_of", "write_letterboxed", "write_rgb", "QuadCollate",
           "collate_fn", "one_batch", "YoloDataLoader"]
