"""The protocol every label format follows, and what a format hands the scan for one split.

A label format is one module (yolotxt.py, coco.py, voc.py, labelme.py) with one :class:`LabelFormat`
object, registered in :mod:`~yolo_data.formats`.  It answers five questions:

    claims(entry)          is this split entry (a path) mine?
    open(entries, opts)    the split's images, beside each what its reader reads, the files and
                           settings the label cache's fingerprint covers, the class names, the
                           problems found while listing                        -> SplitSource
    warm_start(entries)    the fingerprint's settings and the cache file, found without listing
                           the split (None: the split is listed on every start) -> WarmStart
    annotation_file_of     image file -> its annotation file (``dataset.label_files``)
    reader (in SplitSource) read one image's labels in a scan worker          -> LabelReader

and reports what is wrong with one image as a :class:`~yolo_data.formats.problems.LabelError` (the image is
left out) or a warning, both named problems.  The label cache (cache.py) and the split (split.py, loadorscan.py)
handle every format alike through these.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from .problems import LabelError, Problem

__all__ = ["LabelFormat", "LabelReader", "LabelError", "SourceOptions", "SplitSource", "WarmStart", "Problem"]


class LabelReader(Protocol):
    """Reads one image's labels in a scan worker (picklable: it travels with each chunk of pairs).

    ``read(label, shape)``: ``label`` is what the format lists beside the image (a label file's path,
    or the annotations a COCO JSON gives for it); ``shape`` the image's (h, w) in pixels, EXIF
    orientation applied (verify.image_size).  Returns (labels (n, 5) float32 [class, x, y, w, h]
    normalised to the image, segments: None or one (k, 2) float32 normalised polygon per row (an empty
    (0, 2) array for a plain box), status 'ok' / 'missing' / 'empty', warnings: list of str, and for
    pose a fifth: keypoints (n, K, 3) float32 [x, y, visibility], x and y normalised).  Raises
    :class:`LabelError` when the image must be left out.  ``describe(label)``: the file named in
    messages about ``label``.  Optional, ``known_shape(label)``: the image's (h, w) as the annotations
    state it, or None; where it gives one the scan does not read the image (an NDJSON's images at
    https URLs: one request each), and its bands stay unknown until training decodes it.
    """

    def read(self, label, shape: Tuple[int, int]): ...

    def describe(self, label) -> str: ...


@dataclass(frozen=True)
class SourceOptions:
    """Settings of a split's labels that are not files (the fingerprint covers them through each
    format's ``settings``).  ``names``: the dataset yaml's class names (index = class id), or None;
    ``keep_difficult``: keep VOC objects marked difficult; ``nc``: the number of classes when only
    that is known (YOLO); ``task`` and ``kpt_shape``: what a row holds (task.LabelTask: 'detect',
    'segment', 'pose' with (K, 2 or 3) keypoints, or 'obb'; a kpt_shape beside 'detect' or 'segment':
    the dataset's rows of 5 + K x 2 (or 3) numbers are pose rows, read for their boxes)."""
    names: Optional[Sequence[str]] = None
    keep_difficult: bool = False
    nc: Optional[int] = None
    task: str = "detect"
    kpt_shape: Optional[Tuple[int, int]] = None

    def task_settings(self) -> Dict[str, Any]:
        """What the fingerprint covers of the task ({} for detection of boxes and polygons; a pose
        dataset read for detect or segment has its kpt_shape covered: its rows are read for their boxes)."""
        if self.task == "detect" and not self.kpt_shape:
            return {}
        return {"task": self.task, **({"kpt_shape": list(self.kpt_shape)} if self.kpt_shape else {})}


@dataclass
class SplitSource:
    """One split's inputs to the scan, as its format lists them.

    ``labels[i]``: what ``reader`` reads for ``im_files[i]``.  ``label_files``: files the fingerprint
    stats pair by pair with the images (None: the images only; a format with one file for the whole
    split puts that file's stat in ``settings``).  ``settings``: JSON-serialisable, covered by the
    fingerprint and stored in the cache.  ``names``: the class names, or None until :meth:`find_names`
    (then ``discover`` reads them from the annotations and makes the reader: only when the split is
    scanned, not when it is cached).  ``kept_on_disk``: False for a split whose inputs have no
    fingerprint that outlives the process (an in-memory source without one): no label cache is looked
    for or written, and no disk image cache is made.  ``keeps_listing``: the cache stores ``im_files``, so a warm start
    (LabelFormat.warm_start) can check the fingerprint without listing the split.  ``nc``: class ids must
    be below it (None: unknown).  ``problems``: found while listing (dropped ones count as listed images
    left out).
    """
    kind: str
    im_files: List[str]
    labels: Sequence[Any]
    label_files: Optional[List[str]]
    reader: Optional[LabelReader]
    names: Optional[List[str]]
    settings: Dict[str, Any]
    default_cache: Path
    label_file_of: Callable[[str], str]
    problems: List[Problem] = field(default_factory=list)
    nc: Optional[int] = None
    keeps_listing: bool = False
    discover: Optional[Callable[[], Tuple[List[str], LabelReader]]] = None
    kept_on_disk: bool = True

    def find_names(self) -> List[str]:
        """The class names, read from the annotations (``discover``) when nothing gave them."""
        if self.names is None:
            self.names, self.reader = self.discover()
        return self.names


@dataclass(frozen=True)
class WarmStart:
    """A split's fingerprint settings, default cache file and image -> annotation file, made without
    listing it: a cache whose settings equal these has the split's listing, whose fingerprint is then
    checked as usual."""
    settings: Dict[str, Any]
    default_cache: Path
    label_file_of: Callable[[str], str]


class LabelFormat(Protocol):
    """One label format (see the module's docstring).  ``name``: its name in caches and messages.
    ``cuts_by_files``: its split entries are image folders or lists, so a ``fraction`` of a split is
    the list of its first image files.  ``tasks``: the tasks its annotations can be read for
    (settings.TASKS).  A format may subclass this for the default ``warm_start``."""
    name: str
    cuts_by_files: bool
    tasks: Tuple[str, ...] = ("detect",)

    def claims(self, entry: Path) -> bool: ...

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource: ...

    def warm_start(self, entries: List[Any], options: SourceOptions) -> Optional[WarmStart]:
        """None: the split is listed on every start (its folders or lists are the listing)."""
        return None

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]: ...
