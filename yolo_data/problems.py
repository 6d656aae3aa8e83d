"""A named problem with one file: the record every reader (lists, label files, XML, JSON) reports in.

Its own module because the listing in :mod:`~yolo_data.sources` reports problems too, and the label
readers import sources.
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
