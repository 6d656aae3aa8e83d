"""The object cache (objectcache.py) in a folder other users can write: its file names follow from the
bucket's listing, so another user can put a file there first; only files and folders that are the
user's own and writable by nobody else are served.  Against the S3 server of test_remote."""
import logging
import os
import stat
from pathlib import Path

import cv2
import numpy as np
import pytest

import s3server
from procs import as_nobody, shared_folder
from s3server import batches, s3, same, store  # noqa: F401 (fixtures)
from yolo_data import create_dataloader
from yolo_data.storage import objectcache

pytest.importorskip("minio")
s3_server = s3server.s3_server  # the fixture, in this module's namespace
KW = dict(augment=False, workers=0, split="train")


def cached_files(folder: Path) -> dict:
    """{path relative to the object folder: bytes} of the cached objects."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def lookalike(data: bytes) -> bytes:
    """Other pixels (one flat colour) in a JPEG of the same size in pixels and in bytes."""
    h, w = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
    ok, enc = cv2.imencode(".jpg", np.full((h, w, 3), (0, 0, 255), np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 50])
    assert ok and len(enc) < len(data)
    return enc.tobytes() + b"\0" * (len(data) - len(enc))  # decoders stop at the end marker


def _plant(root: str, files: dict) -> str:
    """As another user: the cache's folders (not writable by others, so a folder check alone passes)
    and a look-alike at every name the cache will read."""
    os.mkdir(root, 0o755)
    for rel, data in files.items():
        p = Path(root) / rel
        p.parent.mkdir(mode=0o755, exist_ok=True)
        p.write_bytes(data)
        os.chmod(p, 0o644)
    return "planted"


def test_pictures_another_user_planted_in_a_shared_cache_dir_are_not_trained_on(s3, caplog):  # noqa: F811
    _, local = s3
    with shared_folder() as (base, shared):
        own = base / "own"  # the names, as anyone reading the listing can compute them
        loader, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, object_cache_gb=1.0, cache_dir=own, **KW)
        batches(loader)
        names = cached_files(own / "objects")
        assert len(names) == 16
        planted = {rel: lookalike(data) for rel, data in names.items()}
        assert as_nobody(_plant, str(shared / "objects"), planted) == "planted"
        assert (shared / "objects").stat().st_uid != os.geteuid()
        with caplog.at_level(logging.WARNING, logger="yolo_data"):
            loader, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, object_cache_gb=1.0, cache_dir=shared,
                                          **{**KW, "workers": 2})  # the workers read what the main process checked
            served = batches(loader, 2)
        want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **KW)
        same(served, batches(want, 2), str(local))  # the bucket's pixels, both epochs
        warned = [r.getMessage() for r in caplog.records if "object cache" in r.getMessage()]
        assert warned == [f"object cache {shared / 'objects'}: owned by another user (uid 65534), so not trusted; "
                          "not used, objects are fetched from the bucket"], warned
        assert cached_files(shared / "objects") == planted  # nothing of ours written into their folder


def test_a_cached_file_others_can_write_is_fetched_again_and_replaced(s3, user_cache_dir, caplog):  # noqa: F811
    _, local = s3
    folder = user_cache_dir / "remote" / "objects"
    loader, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, object_cache_gb=1.0, **KW)
    first = batches(loader)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in folder.iterdir())
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert len(files) == 16 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    bucket = {p: p.read_bytes() for p in files}
    loose, group = files[0], files[1]  # the user's own, writable by every user / by the group
    for p, mode in ((loose, 0o666), (group, 0o620)):
        p.write_bytes(lookalike(bucket[p]))
        os.chmod(p, mode)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        second = batches(loader)
        third = batches(loader)
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **KW)
    same(first + second + third, batches(want, 3), str(local))
    warned = [r.getMessage() for r in caplog.records if "object cache" in r.getMessage()]
    then = "removed, the object is fetched from the bucket again"
    assert sorted(warned) == sorted([f"object cache {loose}: writable by every user, so not trusted; {then}",
                                     f"object cache {group}: writable by its group, so not trusted; {then}"]), warned
    for p in (loose, group):  # written anew: the bucket's bytes, the user's only
        assert p.read_bytes() == bucket[p] and stat.S_IMODE(p.stat().st_mode) == 0o600


def test_folders_links_and_fifos_the_cache_did_not_make_are_not_used(tmp_path, caplog):
    root = tmp_path / "objects"
    cache = objectcache.ObjectCache(root, 10_000)
    paths = {}
    for name in ("a", "b"):
        before = set(root.rglob("*"))
        cache.put(f"s3://b/{name}.jpg", 5, 1, name.encode() * 5)
        (paths[name],) = [p for p in set(root.rglob("*")) - before if p.is_file()]
    a, b = paths["a"], paths["b"]
    assert cache.get("s3://b/a.jpg", 5, 1) == b"aaaaa"
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        os.chmod(a.parent, 0o770)  # a folder the group can write: not used, nothing in it removed
        assert cache.get("s3://b/a.jpg", 5, 1) is None and a.exists()
        cache.put("s3://b/a.jpg", 5, 1, b"xxxxx")
        assert a.read_bytes() == b"aaaaa"
        os.chmod(a.parent, 0o700)
        secret = tmp_path / "secret"
        secret.write_bytes(b"12345")
        a.unlink()
        a.symlink_to(secret)  # a link is not followed, and removed
        assert cache.get("s3://b/a.jpg", 5, 1) is None and not a.is_symlink() and secret.read_bytes() == b"12345"
        b.unlink()
        os.mkfifo(b, 0o600)  # a FIFO does not block the read, and is removed
        assert cache.get("s3://b/b.jpg", 5, 1) is None and not b.exists()
        cache.put("s3://b/b.jpg", 5, 1, b"ccccc")
        assert cache.get("s3://b/b.jpg", 5, 1) == b"ccccc"
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [f"object cache {a.parent}: a folder other users can write to, so not trusted; not used, "
                      "objects are fetched from the bucket",
                      f"object cache {a}: a symbolic link, not followed; removed, the object is fetched from the "
                      "bucket again",
                      f"object cache {b}: not a regular file; removed, the object is fetched from the bucket again"]


def test_an_object_folder_that_is_a_link_is_not_used(tmp_path, caplog):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "objects").symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        assert not objectcache.prepare(tmp_path / "objects")
        cache = objectcache.ObjectCache(tmp_path / "objects", 10_000)
        cache.put("s3://b/a.jpg", 5, 1, b"aaaaa")
        assert cache.get("s3://b/a.jpg", 5, 1) is None and not list(elsewhere.iterdir())
    assert [r.getMessage() for r in caplog.records] == [
        f"object cache {tmp_path / 'objects'}: not a folder (or a link to one), so not trusted; not used, objects are "
        "fetched from the bucket"]
