"""Storage as a plug-in chosen by URL scheme (yolo_data.storage): a backend defined here, registered
for ``mem://`` and touching no package module, serves a dataset end to end with the batches of a local
copy; backends survive pickling into spawned workers; unknown schemes are named; two datasets at two
S3 endpoints in one process each read through their own and change nothing process-wide."""
import hashlib
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import s3server
from s3server import batches
from yolo_data import create_dataloader
from yolo_data.labels.split import load_split
from yolo_data.storage import (Backend, ObjectInfo, S3Backend, S3Options, Storage, StorageOptions, backend_for,
                               register, text_tag, unregister, using)

SAMPLE = Path(__file__).resolve().parents[2] / "data"
s3_server, store, s3 = s3server.s3_server, s3server.store, s3server.s3  # the fixtures


class MemoryBackend(Backend):
    """Objects held in a dict {URL: bytes}, as a user would write a backend for a place of their own:
    ``read``, ``stat`` and ``list``, nothing else.  Counts its reads (whole or ranged) per process."""

    concurrency = 4

    def __init__(self, objects):
        self.objects, self.reads = objects, 0

    def read(self, url, start=0, length=0, cached=False):
        if url not in self.objects:
            raise FileNotFoundError(2, "no such object", url)
        self.reads += 1
        data = self.objects[url]
        return data[start:start + length] if length > 0 else data[start:]

    def stat(self, url):
        data = self.objects.get(url)
        return None if data is None else ObjectInfo(url, len(data), text_tag(hashlib.sha1(data).hexdigest()))

    def list(self, url, recursive=True):
        head = url.rstrip("/") + "/"
        return [self.stat(u) for u in sorted(self.objects)
                if u.startswith(head) and (recursive or "/" not in u[len(head):])]


@pytest.fixture
def mem(tmp_path):
    """The bundled sample as mem://bucket/sample.yaml + mem://bucket/sample/..., its local copy, and the
    backends Storages make for mem:// (registered for the test only)."""
    local = tmp_path / "local"
    shutil.copytree(SAMPLE / "sample", local / "sample", ignore=shutil.ignore_patterns("*.cache"))
    shutil.copy(SAMPLE / "sample.yaml", local / "sample.yaml")
    objects = {f"mem://bucket/{p.relative_to(local).as_posix()}": p.read_bytes()
               for p in local.rglob("*") if p.is_file()}
    made = []

    def factory(options: StorageOptions) -> MemoryBackend:
        made.append(MemoryBackend(objects))
        return made[-1]

    register("mem", factory)
    try:
        yield local, made
    finally:
        unregister("mem")


def same(got, want, local_root: str, scheme_root: str):
    assert len(got) == len(want)
    for (a, ta, pa), (b, tb, pb) in zip(got, want):
        assert torch.equal(a, b) and torch.equal(ta, tb)
        assert [p.replace(scheme_root, local_root + "/") for p in pa] == pb


@pytest.mark.parametrize("workers", [0, 2])
def test_a_registered_backend_serves_the_batches_of_a_local_copy(mem, workers, user_cache_dir):
    local, made = mem
    for augment in (False, True):
        kw = dict(augment=augment, shuffle=augment, seed=3, workers=workers, rect=not augment)
        got, dataset = create_dataloader("mem://bucket/sample.yaml", 64, 4, 32, **kw)
        want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
        same(batches(got, 2), batches(want, 2), str(local), "mem://bucket/")
        assert dataset.storage.backend_for("mem://bucket/x") is made[-1]  # the dataset's own backend
    assert Path(dataset.split_labels.cache_file) == \
        user_cache_dir / "remote-mem" / "bucket" / "sample" / "labels" / "train.yolo_data.cache"


def test_a_registered_backend_reaches_spawned_workers_pickled_with_the_dataset(mem):
    local, made = mem
    loader, dataset = create_dataloader("mem://bucket/sample.yaml", 64, 4, 32, augment=True, shuffle=True, seed=6,
                                        workers=0, split="train")
    loader.sampler.set_epoch(1)
    reference = batches(loader)
    reads = made[-1].reads
    spawned = DataLoader(dataset, batch_size=4, sampler=loader.sampler, collate_fn=loader.collate_fn,
                         num_workers=1, multiprocessing_context="spawn", timeout=120)
    loader.sampler.set_epoch(1)
    got = [(i, t, list(p)) for i, t, p, _ in spawned]
    assert made[-1].reads == reads  # the worker read through its own copy of the backend
    assert len(got) == len(reference) == 4
    for (i1, t1, p1), (i2, t2, p2) in zip(reference, got):
        assert p1 == p2 and torch.equal(i1, i2) and torch.equal(t1, t2)


def test_a_warm_start_reads_no_object_of_a_registered_backend(mem):
    _, made = mem
    first = load_split("mem://bucket/sample/images/val")  # through the process's default Storage
    scanned = made[-1].reads
    assert first.built and len(first.store) == 8 and scanned >= 8 + 8  # each label, each image's header
    again = load_split("mem://bucket/sample/images/val")
    assert not again.built and len(made) == 1 and made[0].reads == scanned  # listings and stats only


def test_local_disk_is_a_backend_too_for_file_urls(mem):
    local, _ = mem
    url = f"file://{local}/sample.yaml"
    got, dataset = create_dataloader(url, 64, 4, 32, workers=0, rect=True)
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, workers=0, rect=True)
    same(batches(got), batches(want), str(local), f"file://{local}/")
    backend = backend_for(url)
    image = f"file://{local}/sample/images/val/val_000.jpg"
    data = (local / "sample" / "images" / "val" / "val_000.jpg").read_bytes()
    assert backend.read(image, 2, 3) == data[2:5] and backend.stat(image).size == len(data)
    assert backend.stat(f"file://{local}/nothing.jpg") is None and backend.stat(f"file://{local}/sample") is None
    assert [o.url for o in backend.list(f"file://{local}/sample/images", recursive=False)] == []
    assert len(backend.list(f"file://{local}/sample/images")) == 24


def test_a_scheme_nobody_registered_is_named():
    with pytest.raises(ValueError, match=r"gs://b/data.yaml: no storage backend reads gs:// URLs \(registered: "
                                         r"file://, http://, https://, memory://, parquet\+file://, parquet\+s3://, "
                                         r"s3://\)"):
        create_dataloader("gs://b/data.yaml", 64, 4, 32, workers=0)
    with pytest.raises(ValueError, match="starting with a letter"):
        register("9p", MemoryBackend)


def test_an_s3_backend_pickles_its_options_and_makes_its_client_anew():
    backend = S3Backend(S3Options(endpoint_url="http://127.0.0.1:9", attempts=2))
    backend.count("get")
    copy = pickle.loads(pickle.dumps(backend))
    assert copy.options == backend.options and copy.counts() == {} and backend.counts() == {"get": 1}
    storage = Storage(StorageOptions(endpoint_url="http://127.0.0.1:9"))
    with using(storage):
        assert backend_for("s3://b/k").options.endpoint_url == "http://127.0.0.1:9"
    assert backend_for("s3://b/k") is not storage.backend_for("s3://b/k")  # outside: the default's


def test_two_datasets_at_two_endpoints_each_read_through_their_own_and_change_nothing_process_wide(s3, store,
                                                                                                  tmp_path):
    from faultproxy import FaultProxy
    from yolo_data.storage import remote
    srv, _, local = store
    remote.configure(endpoint_url=None)  # (the fixture's endpoint) neither default may reach the server
    before, default = remote.options(), remote.backend()
    # (no early start: each loader's workers fetch only while it is iterated, so the proxy's counts tell them apart)
    kw = dict(augment=True, shuffle=True, seed=3, workers=2, split="train", early_start=False)
    with FaultProxy(srv.endpoint_url) as proxy:
        direct, a = create_dataloader("s3://data/sample.yaml", 64, 4, 32, endpoint_url=srv.endpoint_url, **kw)
        assert proxy.requests == 0
        proxied, b = create_dataloader("s3://data/sample.yaml", 64, 4, 32, endpoint_url=proxy.endpoint_url,
                                       cache_dir=str(tmp_path / "b"), **kw)  # (its own scan)
        assert proxy.requests > 16  # b's listings, labels and image headers
        assert remote.options() == before and remote.backend() is default and default.options.endpoint_url is None
        assert a.storage.backend_for("s3://data").options.endpoint_url == srv.endpoint_url
        assert b.storage.backend_for("s3://data").options.endpoint_url == proxy.endpoint_url
        proxy.reset_counts()
        got_a = batches(direct)
        assert proxy.requests == 0
        got_b = batches(proxied)
        assert proxy.requests == 16  # each train image once, by b's workers at b's endpoint
        proxy.reset_counts()  # a disk image cache is filled by threads, through the dataset's endpoint too
        create_dataloader("s3://data/sample.yaml", 64, 4, 32, endpoint_url=proxy.endpoint_url, cache="disk",
                          cache_dir=str(tmp_path / "b"), **{**kw, "workers": 0})
        assert sum(n for (method, path), n in proxy.counts.items() if method == "GET" and path.endswith(".jpg")) == 16
        assert remote.options() == before and remote.backend() is default
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    want = batches(want)
    same(got_a, want, str(local), "s3://data/")
    same(got_b, want, str(local), "s3://data/")
