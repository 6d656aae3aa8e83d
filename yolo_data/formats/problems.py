"""What the label formats report: a named :class:`Problem` with one file, and :class:`LabelError`, which
a label reader raises for an image that must be left out.

Its own module because the listing in :mod:`~yolo_data.formats.sources` reports problems too, and every label
format (:mod:`~yolo_data.formats`) imports sources.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Problem:
    """Something wrong with one file.  ``dropped``: the pair was left out of the dataset."""
    file: str
    reason: str
    dropped: bool

    def __str__(self) -> str:
        return f"{'left out' if self.dropped else 'warning'}: {self.file}: {self.reason}"


class LabelError(Exception):
    """An image's labels (or the image itself) cannot be trusted: the scan leaves the image out and
    reports a dropped :class:`Problem` with this message, naming the file the reader describes.  Raised
    by label readers (formats.base.LabelReader) and the image checks; never escapes a scan."""
