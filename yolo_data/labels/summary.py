"""What a run says by default, as YOLOv5 does: one line per split (images, boxes, backgrounds, corrupt,
warnings, which cache and how long), the first problems the labels have, and the device line.

Everything goes through the ``yolo_data`` logger, so a program that configures logging decides where it
goes and what is shown.  When nothing is configured (neither the root logger nor ``yolo_data`` has a
handler, where Python would show WARNING and above only), :func:`console` gives ``yolo_data`` one
stderr handler at INFO with the bare message, as YOLOv5 and Ultralytics set up their own named
loggers; it steps aside as soon as the program configures logging itself.  Only the ranks that print
(LOCAL_RANK 0, or unset) say anything here.
"""
from __future__ import annotations

import logging
import os
import shlex
import sys
from typing import List, Tuple

from ..distributed import get_local_rank

LOGGER = logging.getLogger("yolo_data")
SHOW_PROBLEMS = 5  # problems listed on every run; `yolo-data-cache DATA` lists all of them


class _Console(logging.StreamHandler):
    """stderr as it is when a record is written (so a redirected or captured sys.stderr is used), and
    nothing at all once the program has configured logging (its handlers then show our records)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))
        self.setLevel(logging.INFO)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ sets it; the property always follows sys.stderr
        pass

    def filter(self, record) -> bool:
        return not _configured_by_user() and super().filter(record)


_level_set = False  # whether console() set the yolo_data logger's level (and so may take it back)


def _configured_by_user() -> bool:
    return bool(logging.getLogger().handlers) or any(not isinstance(h, _Console) for h in LOGGER.handlers)


def console() -> None:
    """Make the ``yolo_data`` logger's INFO messages visible on stderr when logging is unconfigured;
    undo that once the program has configured logging (root or ``yolo_data`` handlers of its own).
    Called before each message a user should see by default; cheap and idempotent."""
    global _level_set
    ours = [h for h in LOGGER.handlers if isinstance(h, _Console)]
    if _configured_by_user():
        for h in ours:
            LOGGER.removeHandler(h)
        if _level_set and LOGGER.level == logging.INFO:
            LOGGER.setLevel(logging.NOTSET)
        _level_set = False
        return
    if not ours:
        LOGGER.addHandler(_Console())
    if LOGGER.level == logging.NOTSET:  # an effective level of WARNING (the root's) would drop INFO
        LOGGER.setLevel(logging.INFO)
        _level_set = True


def printing_rank() -> bool:
    """True where a run prints: LOCAL_RANK 0, or no LOCAL_RANK (a single process)."""
    return get_local_rank(-1) in (-1, 0)


def progress_bar(desc: str, enabled: bool):
    """A progress callback (done, total) drawing a tqdm bar named ``desc`` (None when not ``enabled``,
    e.g. stderr is not a terminal), closed when done reaches total."""
    if not enabled:
        return None
    from tqdm import tqdm
    bar = None

    def update(done, total):
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, unit="img", leave=False)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
    return update


def _seconds(s: float) -> str:
    return f"{s:.3f} s" if s < 1 else f"{s:.2f} s" if s < 10 else f"{s:.1f} s"


def plural(count: int, word: str) -> str:
    """``count`` and ``word``, in the plural unless ``count`` is 1: '1 box', '2 boxes', '0 images'."""
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}{'es' if word.endswith('x') else 's'}"


def _data_arg(data) -> str:
    """``data`` as the argument of ``yolo-data-cache`` (a list of folders has no such form)."""
    if isinstance(data, (str, os.PathLike)):
        return shlex.quote(os.fspath(data))
    return "DATA"


def split_summary(split, prefix: str = "", data=None, show: int = SHOW_PROBLEMS) -> Tuple[str, List[str]]:
    """(summary line, problem lines) for a :class:`~yolo_data.labels.split.SplitLabels`.

    ``train: 126 images, 929 boxes, 2 backgrounds, 0 corrupt, 0 warnings from labels/x.yolo_data.cache
    (read in 0.004 s)`` or ``... 0 warnings (scanned in 1.23 s, cached in labels/x.yolo_data.cache)``;
    ``..., 0 corrupt, 2 of other bands, ...`` when images whose bands do not fit the dataset's
    channels were left out (labels.split.fit_channels).
    The problem lines (none when there are none) give their number, the first ``show`` of them and the
    command that lists them all (``data``: what the dataset was made from).
    """
    c = split.counts
    other = f"{c['other_bands']:,} of other bands, " if c.get("other_bands") else ""
    line = (f"{prefix}{plural(len(split.store), 'image')}, {plural(c.get('boxes', 0), 'box')}, "
            f"{plural(c.get('backgrounds', 0), 'background')}, {c.get('corrupt', 0):,} corrupt, {other}"
            f"{plural(c.get('warnings', 0), 'warning')}")
    if not split.built:
        line += f" from {split.cache_file} (read in {_seconds(split.seconds)})"
    elif split.cache_file is not None:
        line += f" (scanned in {_seconds(split.seconds)}, cached in {split.cache_file})"
    elif not split.on_disk:
        line += f" (scanned in {_seconds(split.seconds)}; kept in memory: the source has no fingerprint)"
    else:
        line += f" (scanned in {_seconds(split.seconds)}; the label cache could not be written)"
    problems = split.problems
    if not problems:
        return line, []
    left_out = sum(p.dropped for p in problems)
    first = problems[:show]
    lines = [f"{prefix}{plural(len(problems), 'problem')} in the labels "
             f"({plural(left_out, 'image')} left out, {plural(len(problems) - left_out, 'warning')})"
             + (f", the first {len(first)}:" if len(first) < len(problems) else ":")]
    lines += [f"  {p}" for p in first]
    if split.kind != "memory":  # (the command reads files: an in-memory source is in this process only)
        lines.append(f"  the full list: yolo-data-cache {_data_arg(data)}")
    else:
        lines.append("  the full list: the dataset's split_labels.problems")
    return line, lines


def log_split_summary(split, prefix: str = "", data=None) -> None:
    """Log :func:`split_summary` (the line at INFO, the problems at WARNING) on the printing rank."""
    if not printing_rank():
        return
    console()
    line, problems = split_summary(split, prefix, data)
    LOGGER.info(line)
    if problems:
        LOGGER.warning("\n".join(problems))
