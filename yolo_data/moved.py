"""The flat import paths of yolo_data 0.3 (``yolo_data.cache``, ``yolo_data.remote``, ...), which still
import, with a ``DeprecationWarning`` naming the new path, until 0.5.

Each old name is the same module object as the new one (``yolo_data.remote is yolo_data.storage.remote``),
so code that patches or reads module attributes through an old name keeps working.  Old names that are now
folders (``yolo_data.geometry``, ``yolo_data.sampling``, ``yolo_data.images``, ``yolo_data.labels``,
``yolo_data.report``) import the folder, whose ``__init__`` re-exports the public names the old module had.

:func:`install` puts one finder on ``sys.meta_path`` when ``yolo_data`` is imported; it answers for the
names in :data:`MOVED` only and for nothing else.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "yolo_data.albument": "yolo_data.augment.albument",
    "yolo_data.augstate": "yolo_data.augment.augstate",
    "yolo_data.balance": "yolo_data.sampling.balance",
    "yolo_data.batchmemory": "yolo_data.loading.batchmemory",
    "yolo_data.boxes": "yolo_data.geometry.boxes",
    "yolo_data.cache": "yolo_data.labels.cache",
    "yolo_data.coco": "yolo_data.formats.coco",
    "yolo_data.collate": "yolo_data.loading.collate",
    "yolo_data.container": "yolo_data.storage.container",
    "yolo_data.datastats": "yolo_data.report.datastats",
    "yolo_data.datayaml": "yolo_data.formats.datayaml",
    "yolo_data.decode": "yolo_data.images.decode",
    "yolo_data.dedupe": "yolo_data.report.dedupe",
    "yolo_data.failures": "yolo_data.images.failures",
    "yolo_data.hyp": "yolo_data.augment.hyp",
    "yolo_data.imagecache": "yolo_data.items.imagecache",
    "yolo_data.index": "yolo_data.items.index",
    "yolo_data.keyspace": "yolo_data.storage.keyspace",
    "yolo_data.labelfile": "yolo_data.formats.labelfile",
    "yolo_data.labelformat": "yolo_data.formats.base",
    "yolo_data.labelme": "yolo_data.formats.labelme",
    "yolo_data.loader": "yolo_data.loading.loader",
    "yolo_data.mapping": "yolo_data.items.mapping",
    "yolo_data.masks": "yolo_data.geometry.masks",
    "yolo_data.mosaic": "yolo_data.augment.mosaic",
    "yolo_data.objectcache": "yolo_data.storage.objectcache",
    "yolo_data.perspective": "yolo_data.augment.perspective",
    "yolo_data.photometric": "yolo_data.augment.photometric",
    "yolo_data.pipeline": "yolo_data.augment.pipeline",
    "yolo_data.plots": "yolo_data.report.plots",
    "yolo_data.problems": "yolo_data.formats.problems",
    "yolo_data.remote": "yolo_data.storage.remote",
    "yolo_data.remotefile": "yolo_data.storage.remotefile",
    "yolo_data.reporthtml": "yolo_data.report.html",
    "yolo_data.room": "yolo_data.runtime.room",
    "yolo_data.run": "yolo_data.sampling.runstate",
    "yolo_data.s3client": "yolo_data.storage.s3client",
    "yolo_data.s3list": "yolo_data.storage.s3list",
    "yolo_data.sample": "yolo_data.augment.sample",
    "yolo_data.scan": "yolo_data.labels.scan",
    "yolo_data.segment": "yolo_data.integrations.yolov5_segment",
    "yolo_data.sources": "yolo_data.formats.sources",
    "yolo_data.split": "yolo_data.labels.split",
    "yolo_data.store": "yolo_data.labels.store",
    "yolo_data.summary": "yolo_data.labels.summary",
    "yolo_data.task": "yolo_data.items.task",
    "yolo_data.tensors": "yolo_data.loading.tensors",
    "yolo_data.torch_private": "yolo_data.runtime.torch_private",
    "yolo_data.torch_utils": "yolo_data.integrations.torch_utils",
    "yolo_data.trust": "yolo_data.storage.trust",
    "yolo_data.voc": "yolo_data.formats.voc",
    "yolo_data.weights": "yolo_data.sampling.weights",
    "yolo_data.workerheap": "yolo_data.runtime.workerheap",
    "yolo_data.workers": "yolo_data.runtime.workers",
    "yolo_data.yolotxt": "yolo_data.formats.yolotxt",
    "yolo_data.yolov5": "yolo_data.integrations.yolov5",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new path (the same object, not a copy)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.new}; the old path goes away in yolo_data 0.5",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        pass  # the module at the new path has run already


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old flat paths of :data:`MOVED`, and nothing else."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(new)) if new else None


def install() -> None:
    """Put one :class:`MovedFinder` on ``sys.meta_path`` (once, however often it is called)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
