"""Timers of ``yolo-data bench`` (report/bench.py): a progress bar on stderr, the images of a dataset
made with their read and decode timed apart, and OpenCV and torch held to one thread."""
from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager, contextmanager

import cv2
import torch

from ..images.decode import read_whole
from ..images.load import EncodedImage, LoadedImage, load_image
from ..storage import using


class Progress(AbstractContextManager):
    """A bar on stderr, redrawn in place on a terminal; elsewhere one line when the phase starts."""

    def __init__(self, label: str, total: int, unit: str = "img", enabled: bool = True):
        self.label, self.total, self.unit, self.done, self.drawn = label, max(total, 1), unit, 0, 0.0
        self.stream = sys.stderr
        self.live = enabled and self.stream.isatty()
        if enabled and not self.live:
            print(f"bench: {label} ({total} {unit})", file=self.stream, flush=True)
        self.update(0)

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.live and (now - self.drawn >= 0.1 or self.done >= self.total):
            filled = min(20, 20 * self.done // self.total)
            bar = "#" * filled + "." * (20 - filled)
            self.stream.write(f"\r{self.label} |{bar}| {self.done}/{self.total} {self.unit}")
            self.stream.flush()
            self.drawn = now

    def __exit__(self, *exc) -> None:
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()


class TimedImages:
    """An ImageSource's images made as it makes them, with the read and the decode timed apart: the
    bytes are read whole (or taken from its batch's fetch), then decoded and resized by load_image."""

    def __init__(self, source):
        self.source, self.read, self.decode, self.decodes = source, 0.0, 0.0, 0
        self.cache, self.in_bucket, self.channels = source.cache, source.in_bucket, source.channels

    def fetch(self, ids, ahead=()) -> None:
        t = time.perf_counter()
        self.source.fetch(ids, ahead)  # a bucket's batch at once, as the dataset asks it
        self.read += time.perf_counter() - t

    def forget(self) -> None:
        self.source.forget()

    def encoded(self, i: int):
        """As ImageSource.encoded (a loader with a device stage): a JPEG's bytes timed as its read;
        an image its worker decodes (another format) timed as a decode, its read included."""
        t = time.perf_counter()
        out = self.source.encoded(i)
        if isinstance(out, EncodedImage):
            self.read += time.perf_counter() - t
        elif isinstance(out, LoadedImage):
            self.decode, self.decodes = self.decode + time.perf_counter() - t, self.decodes + 1
        return out

    def __call__(self, i: int) -> LoadedImage:
        src = self.source
        if src.cache is not None and src.cache.ok[i]:
            return src(i)
        path, (h0, w0) = src.store.im_file(i), src.store.shapes_hw[i]
        t0 = time.perf_counter()
        data = src.fetched.get(i)
        if data is None:
            with using(src.storage):
                data = read_whole(path)[0]
        elif isinstance(data, OSError):  # its fetch failed: the source raises what it raises
            return src(i)
        t1 = time.perf_counter()
        image = load_image(path, src.img_size, src.linear, (int(h0), int(w0)), src.reduced, src.capped, data,
                           src.channels)
        self.read, self.decode = self.read + t1 - t0, self.decode + time.perf_counter() - t1
        self.decodes += 1
        return image


@contextmanager
def one_thread():
    """OpenCV and torch on one thread, as in a DataLoader worker; their thread counts put back after."""
    cv_threads, torch_threads = cv2.getNumThreads(), torch.get_num_threads()
    cv2.setNumThreads(0)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(cv_threads)
        torch.set_num_threads(torch_threads)
