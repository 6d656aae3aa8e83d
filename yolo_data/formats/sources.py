"""Where the files are: a path, a .txt list or a folder -> sorted image files; where their labels and
the split's cache file are.  (A dataset yaml is read by :mod:`~yolo_data.formats.datayaml`.)  Only reading
happens here.

File names are kept exactly as the filesystem gives them: a name that is not UTF-8 (Latin-1 bytes from
an old share) is a ``str`` with lone surrogates (Python's ``os.fsdecode``), which ``os.fsencode`` turns
back into the same bytes.
"""
from __future__ import annotations

import codecs
import hashlib
import numbers
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from ..storage import Storage, StorageOptions, backend_for, is_url, join_url, parent_url, scheme_of
from .problems import Problem

LOGGER = logging.getLogger("yolo_data")

# Suffixes YOLOv5 accepts as images (lower case, no dot).
IMG_FORMATS = ("bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm")
# Cache file names: the suffix adds 16 bytes, a shared cache folder's hash 17, the temporary
# '.<host>.<pid>.<random>.yolo_data.tmp' up to 97 and a disk image cache
# '-images-<size>-linear-rect-reduced.imgcache' 42 (a 5-digit size); names longer than this keep a
# prefix and a hash, so every one stays under 255 bytes.
MAX_CACHE_STEM = 100
# Our label cache's suffix.  YOLOv5 and Ultralytics both write '<labels folder>.cache' (a pickle) beside
# the labels; a name of our own means switching loaders never makes either rescan the other's split.
LABEL_CACHE_SUFFIX = ".yolo_data.cache"

CACHE_DIR_ENV = "YOLO_DATA_CACHE_DIR"
# Under the user's cache folder: the label and image caches of datasets in buckets, by bucket and key
# (s3://; another scheme's under 'remote-<scheme>'), and the object cache's 'objects'.
REMOTE_CACHE_FOLDER = "remote"

PathLike = Union[str, os.PathLike]


def user_cache_dir() -> Path:
    """The per-user cache folder: $YOLO_DATA_CACHE_DIR, else $XDG_CACHE_HOME/yolo_data, else
    ~/.cache/yolo_data.  Read at call time."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "yolo_data"


def storage_for(source) -> Storage:
    """The Storage a dataset reads through: the dataset holds it, and nothing process-wide changes.

    Args:
        source: the dataset's settings.SourceSettings: its ``endpoint_url``, and its object cache of
            ``object_cache_gb`` in ``cache_dir``, else in the per-user cache folder (``remote/objects``).

    Returns:
        A Storage whose backends are made, on first use, with those options.
    """
    folder = Path(source.cache_dir) if source.cache_dir else user_cache_dir() / REMOTE_CACHE_FOLDER
    return Storage(StorageOptions(endpoint_url=source.endpoint_url,
                                  object_cache_bytes=int(source.object_cache_gb * 2**30),
                                  object_dir=str(folder / "objects")))


def walk_files(top: str) -> List[str]:
    """Files under ``top``, following symlinks to folders (as YOLOv5 does) but entering each real
    folder once: a link back to a folder on the way here (``loop -> .``, which os.walk otherwise follows
    40 levels deep, or without end with two such links) is skipped with one warning naming it, and so is
    a second way into a folder already listed.  Within a folder, real subfolders come before links."""
    files: List[str] = []
    st = os.stat(top)
    seen = {(st.st_dev, st.st_ino): top}  # each real folder -> the path it is listed under
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        # Hidden names are skipped as glob('**/*.*') skips them in YOLOv5 (macOS '._x.jpg' files).
        subs = [os.path.join(dirpath, d) for d in sorted(dirnames) if not d.startswith(".")]
        keep = []
        for sub in sorted(subs, key=os.path.islink):  # stable: real folders first, each group sorted
            try:
                st = os.stat(sub)
            except OSError:  # vanished since, or a dangling link: nothing to list
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen[key] = sub
                keep.append(os.path.basename(sub))
            elif os.path.join(os.path.realpath(dirpath), "").startswith(os.path.join(os.path.realpath(sub), "")):
                LOGGER.warning(f"{sub}: symlink loop (leads back to {seen[key]}); not followed")
            else:
                LOGGER.warning(f"{sub}: the same folder as {seen[key]}, which is listed; not listed twice")
        dirnames[:] = keep
        prefix = os.path.join(dirpath, "")  # what os.path.join(dirpath, f) puts before f, made once
        files.extend(prefix + f for f in filenames if f[:1] != ".")
    return files


def _read_lines(txt: Union[Path, str]) -> List[str]:
    """Lines of a .txt list (a file, or an object in a bucket), stripped.  UTF-8 (a BOM is dropped); a
    line that is not UTF-8 (a list saved in cp1252 or Latin-1) is decoded as the filesystem decodes
    names, so its bytes name the same file on disk."""
    if is_url(txt):
        raw = backend_for(txt).read(txt)
    else:
        with open(txt, "rb") as f:
            raw = f.read()
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    # Lines end at \n, \r\n or \r only: str.splitlines would also split a name at \x85 or \u2028.
    try:
        text = raw.decode("utf-8")
        return [x.strip() for x in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    except UnicodeDecodeError:
        pass
    enc, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    out = []
    for line in raw.splitlines():
        try:
            out.append(line.decode("utf-8").strip())
        except UnicodeDecodeError:
            out.append(line.decode(enc, errors).strip())
    return out


def nul_problem(file: str, where: str) -> Problem:
    """The problem of a listed name holding a NUL byte: no file can have such a name (the operating
    system refuses it in every call, and Python raises ValueError), so the entry is left out."""
    return Problem(file, f"{where} contains a NUL byte; left out", dropped=True)


def read_list(txt: Union[Path, str]) -> Tuple[List[str], List[Problem]]:
    """The entries of a .txt list (lines stripped, empty lines skipped; see ``_read_lines``) and a
    problem naming the list and the line for each line holding a NUL byte, which is left out."""
    entries, problems = [], []
    for lineno, line in enumerate(_read_lines(txt), 1):
        if "\0" in line:
            problems.append(nul_problem(str(txt), f"line {lineno}"))
        elif line:
            entries.append(line)
    return entries, problems


@dataclass
class ImageListing:
    """What a path names: ``files``, the image files sorted as strings, and ``problems`` with the
    entries of .txt lists that were left out."""
    files: List[str]
    problems: List[Problem] = field(default_factory=list)


def list_images(path: Union[PathLike, Sequence[PathLike]]) -> ImageListing:
    """Image files named by ``path``, as YOLOv5 finds them, sorted as strings.

    ``path`` is a folder (searched recursively, each real folder once), a .txt file with one image path
    a line (``./x`` is relative to the .txt's folder, other relative entries to the working directory,
    as in YOLOv5), a single image file, or a list of these.  Files whose suffix is not an image format
    are skipped; a list's line holding a NUL byte is a problem (see ``read_list``).  Names are as the
    filesystem gives them (``os.fsdecode``), UTF-8 or not.

    A URL entry (``s3://``, any registered scheme) is the same in its storage: a folder is every object
    under it (one listing, which the S3 backend remembers for the fingerprint), a .txt object's relative
    lines are relative to its folder.
    """
    files: List[str] = []
    problems: List[Problem] = []
    for p in path if isinstance(path, (list, tuple)) else [path]:
        if is_url(p):
            found, bad = _list_remote(p)
            files.extend(found)
            problems.extend(bad)
            continue
        p = Path(p)
        if p.is_dir():
            files.extend(walk_files(str(p)))
        elif p.is_file() and p.suffix.lower() == ".txt":
            parent = str(p.parent) + os.sep
            entries, bad = read_list(p)
            files.extend(x.replace("./", parent, 1) if x.startswith("./") else x for x in entries)
            problems.extend(bad)
        elif p.is_file():
            files.append(str(p))
        else:
            raise FileNotFoundError(f"{p} does not exist (expected an image folder, a .txt list or a dataset yaml)")
    formats = frozenset(IMG_FORMATS)
    return ImageListing(sorted(f for f in files if f.rpartition(".")[2].lower() in formats), problems)


def _list_remote(url: str) -> Tuple[List[str], List[Problem]]:
    """list_images of one URL entry: a .txt list, an image object, or a folder (every object under it;
    an image name that is neither is a folder that does not exist, so FileNotFoundError)."""
    suffix = url.rpartition("/")[2].rpartition(".")[2].lower() if "." in url.rpartition("/")[2] else ""
    if suffix == "txt":
        folder = parent_url(url)
        entries, bad = read_list(url)
        # a list in a bucket has no working directory: every relative line is taken from its folder
        return [join_url(folder, x) for x in entries], bad
    backend = backend_for(url)
    if suffix in IMG_FORMATS and backend.exists(url):
        return [url], []
    found = backend.list(url)
    if not found:
        raise FileNotFoundError(f"{url} does not exist or is empty (expected an image folder, a .txt list "
                                "or a dataset yaml)")
    # hidden names are skipped as walk_files skips them (macOS '._x.jpg' files)
    start = len(scheme_of(url)) + 3  # after '<scheme>://'
    return [o.url for o in found if "/." not in o.url[start:]], []


def split_images(entries: Sequence[PathLike]) -> ImageListing:
    """``list_images(entries)`` of a split, which must hold images (FileNotFoundError naming it)."""
    listing = list_images(list(entries))
    if not listing.files:
        raise FileNotFoundError(f"no images found in {entries[0] if len(entries) == 1 else list(entries)}")
    return listing


def list_image_files(path: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    """The image files of ``list_images(path)``, without its problems."""
    return list_images(path).files


def img2label_path(im_file: str) -> str:
    """The label file YOLOv5 reads for an image: last ``/images/`` -> ``/labels/``, suffix -> ``.txt``."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return sb.join(im_file.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt"


def _digest(text: str, n: int = 12) -> str:
    return hashlib.sha256(os.fsencode(text)).hexdigest()[:n]


def _bounded_stem(stem: str, limit: int = MAX_CACHE_STEM) -> str:
    """``stem`` when it is at most ``limit`` bytes on disk, else its first characters and a hash of all
    of it, so a cache file beside a very long folder name still fits the filesystem's 255 bytes."""
    if len(os.fsencode(stem)) <= limit:
        return stem
    cut = stem[:limit]
    while len(os.fsencode(cut)) > limit - 13:
        cut = cut[:-1]
    return f"{cut}-{_digest(stem)}"


def default_cache_file(path: Union[PathLike, Sequence[PathLike]], first_label_file: Optional[str]) -> Path:
    """Where the label cache of ``path`` goes by default: beside a .txt list, else beside the labels
    folder, as in YOLOv5, but under a name of our own (LABEL_CACHE_SUFFIX).

    ``labels/train2017/`` -> ``labels/train2017.yolo_data.cache`` (YOLOv5's ``labels/train2017.cache``
    is never read, written or removed).  A split of several entries gets a hash of all of them in its
    name (``labels/A-<hash>.yolo_data.cache``), so it never shares a file with a split of its first
    entry alone.  Names longer than MAX_CACHE_STEM bytes are shortened (see ``_bounded_stem``).
    """
    entries = list(path) if isinstance(path, (list, tuple)) else [path]
    if is_url(entries[0]):
        return _remote_cache_file(entries, first_label_file)
    p = Path(entries[0])
    if p.is_file():  # YOLOv5's stem rule (a dotted folder name loses its last suffix), our suffix
        f = p.with_suffix(".cache")
    elif first_label_file is None:
        f = (p.parent / p.name).with_suffix(".cache")
    else:
        f = Path(first_label_file).parent.with_suffix(".cache")
    stem = f.stem
    if len(entries) > 1:
        stem += "-" + _digest("\0".join(os.path.abspath(os.fspath(e)) for e in entries))
    return f.with_name(_bounded_stem(stem) + LABEL_CACHE_SUFFIX)


def fraction_cache_file(path: Union[PathLike, Sequence[PathLike]], first_label_file: Optional[str],
                        fraction: Union[float, int]) -> Path:
    """Where the label cache of the first images of ``path`` (the ``fraction`` setting: a float ratio or
    an int count) goes by default: where the whole split's goes, the fraction in its name
    (``labels/train2017.fraction-0.25.yolo_data.cache``, ``labels/train2017.first-100.yolo_data.cache``),
    so two fractions never share a file and none lands among the images (a part of a split is a list
    of image files, whose own default is beside the first of them)."""
    whole = default_cache_file(path, first_label_file)
    part = f"first-{fraction}" if isinstance(fraction, int) else f"fraction-{float(fraction)!r}"
    return whole.with_name(f"{cache_stem(whole)}.{part}{LABEL_CACHE_SUFFIX}")


def _remote_cache_file(entries: Sequence[str], first_label_file: Optional[str]) -> Path:
    """default_cache_file of a split in a bucket: the name the same rule gives, but in the user's cache
    folder (``<cache>/remote/<bucket>/labels/train2017.yolo_data.cache``; another scheme's under
    ``remote-<scheme>/<place>/``), never in the bucket: a cache is written into a bucket only when
    asked (``yolo-data-cache --publish``)."""
    first = entries[0].rstrip("/")
    stem, dot, suffix = first.rpartition("/")[2].rpartition(".")
    if dot and suffix.lower() in ("txt", "json", *IMG_FORMATS):  # a list, an annotation file, an image
        base = first[:-len(suffix) - 1]
    elif first_label_file is None:
        base = first
    else:
        base = parent_url(first_label_file)
    scheme, _, rest = base.partition("://")
    bucket, _, key = rest.partition("/")
    if scheme == "s3" and not bucket:
        raise ValueError(f"{base}: no bucket name after s3://")
    folder, _, stem = key.rpartition("/")
    if len(entries) > 1:
        stem += "-" + _digest("\0".join(entries))
    root = user_cache_dir() / _remote_folder(scheme.lower())
    return root / bucket / folder / (_bounded_stem(stem) + LABEL_CACHE_SUFFIX)


def _remote_folder(scheme: str) -> str:
    """The folder of the user's cache that holds the caches of ``scheme``'s datasets: 'remote' for s3
    (a bucket's name has no '-'  at its start, nor does a scheme), 'remote-<scheme>' for the others."""
    return REMOTE_CACHE_FOLDER if scheme == "s3" else f"{REMOTE_CACHE_FOLDER}-{scheme}"


def remote_cache_url(cache_file: Path) -> Optional[str]:
    """The URL where ``yolo-data-cache --publish`` puts the cache file of a split in a bucket (or another
    storage: beside its labels), or None for a cache file of a local split."""
    try:
        top, *rel = Path(cache_file).relative_to(user_cache_dir()).parts
    except ValueError:
        return None
    if top == REMOTE_CACHE_FOLDER:
        scheme = "s3"
    elif top.startswith(REMOTE_CACHE_FOLDER + "-"):
        scheme = top[len(REMOTE_CACHE_FOLDER) + 1:]
    else:
        return None
    return f"{scheme}://" + "/".join(rel) if rel else None


def cache_stem(cache_file: PathLike) -> str:
    """The split's part of a cache file's name, which names derived from it start with:
    ``train2017`` for ``labels/train2017.yolo_data.cache``, ``train-images-64`` for ``train-images-64.imgcache``."""
    name = Path(cache_file).name
    return name[:-len(LABEL_CACHE_SUFFIX)] if name.endswith(LABEL_CACHE_SUFFIX) else Path(name).stem


def checked_fraction(value) -> Union[float, int]:
    """``value`` as a fraction setting: a float ratio in (0, 1], or an int count >= 2 (1 is 1.0, the
    whole split; NumPy numbers too).  Raises ValueError naming the field and the value for 0, a
    negative, a ratio above 1, NaN, inf, True/False (a bool is an int to Python) or a non-number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"settings: fraction must be a float ratio in (0, 1] or an int number of images "
                         f">= 1, got {value!r}")
    if isinstance(value, numbers.Integral):
        if value < 1:
            raise ValueError(f"settings: fraction as a number of images must be >= 1, got {value!r}")
        return int(value) if value > 1 else 1.0  # 1 is all of it, as Ultralytics reads fraction=1
    if not (0.0 < float(value) <= 1.0):  # NaN fails this comparison too
        raise ValueError(f"settings: fraction as a ratio must be in (0, 1] (an int for a number of images), "
                         f"got {value!r}")
    return float(value)


def fraction_count(n: int, fraction: Union[float, int]) -> int:
    """How many of a split's ``n`` images ``fraction`` keeps (a float ratio, or an int count; at least 1,
    at most n)."""
    k = fraction if isinstance(fraction, int) and not isinstance(fraction, bool) else max(1, round(n * float(fraction)))
    return max(1, min(n, int(k)))
