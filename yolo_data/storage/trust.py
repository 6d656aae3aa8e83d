"""Whether a file or folder that a cache reads may be believed: who owns it and who may write to it.

A cache decides what training sees (which images, which labels, which pixels), and in a folder that
other users can write (``/tmp``, ``/dev/shm``, a team scratch folder) anyone can compute the names a
cache uses and put a file there first.  So before a byte is read, its owner and mode are checked here.
Each function returns why the file or folder is not trusted (a short phrase the caller puts into its
one warning, after the path), or None.  The stat results come from the descriptor about to be read
(``os.fstat``), so what was checked is what is read.

Two rules:

* :func:`file_problem` for the label cache, the image caches and the failure record: a regular file
  that not every user can write, owned by you, by root, or by the owner of its folder when that folder
  is not writable by every user (a read-only dataset whose caches its owner built).  In ``/dev/shm`` or
  ``/tmp`` that is only your own.
* ``own_only=True`` and :func:`folder_problem` for the object cache, whose files are copies of
  objects from a bucket and whose folders it makes itself (0700, files 0600): each folder below its
  root and each file must be yours and writable by nobody else, its group included.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _owner(uid: int) -> str:
    return f"owned by another user (uid {uid}), so not trusted"


def file_problem(path: Path, st: os.stat_result, own_only: bool = False) -> Optional[str]:
    """Why the file ``path`` (``st``: its stat) is not trusted, or None.  ``own_only``: only a file
    of yours that neither its group nor other users can write is trusted."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_mode & stat.S_IWOTH:
        return "writable by every user, so not trusted"
    if own_only:
        if st.st_uid != os.geteuid():
            return _owner(st.st_uid)
        if st.st_mode & stat.S_IWGRP:
            return "writable by its group, so not trusted"
        return None
    if st.st_uid == os.geteuid():
        return None
    try:
        folder = os.stat(Path(path).parent)
    except OSError as e:
        return f"cannot check its folder ({e.strerror})"
    if st.st_uid in (0, folder.st_uid) and not folder.st_mode & stat.S_IWOTH:
        return None
    return _owner(st.st_uid)


def folder_problem(st: os.stat_result) -> Optional[str]:
    """Why a folder (``st``: its stat, links not followed) cannot be trusted to hold only files you
    wrote, or None: it must be a folder, yours, and writable by nobody else."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid != os.geteuid():
        return _owner(st.st_uid)
    if st.st_mode & _OTHERS_WRITE:
        return "a folder other users can write to, so not trusted"
    return None
