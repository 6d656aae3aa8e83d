"""Images at signed http URLs (storage/http.py), as an NDJSON export lists them: a real S3 server
(SeaweedFS, tests/s3server.py) serves the bundled sample as presigned URLs behind the fault proxy
(tests/faultproxy.py).  The batches equal those of a local copy, the scan fetches no image whose size
the export states, failures are retried, the object cache serves a second epoch, and no signature
appears in a message or in a file under the cache folders."""
import io
import json
import logging
import pickle
import re
import threading
from pathlib import Path

import pytest
import torch
from PIL import Image

import faultproxy
import s3server
from yolo_data import create_dataloader
from yolo_data.storage import HttpBackend, public_url
from yolo_data.storage.http import HttpOptions

minio = pytest.importorskip("minio")

s3_server, store, s3 = s3server.s3_server, s3server.store, s3server.s3
fault_proxy = faultproxy.fault_proxy
NAMES = ["circle", "rectangle", "triangle"]
IMAGES = r"^/data/sample/images/"


def signed_export(tmp_path: Path, local: Path, proxy, server, sized: bool = True) -> Path:
    """An export of the sample whose images are presigned GET URLs of s3://data/sample through the
    proxy (the signature covers the proxy's host, which it passes on unchanged)."""
    srv_client = minio.Minio(proxy.netloc, server.access_key, server.secret_key, secure=False, region="us-east-1")
    lines = [json.dumps({"type": "dataset", "task": "detect", "class_names": dict(enumerate(NAMES))})]
    for split in ("train", "val"):
        for im in sorted((local / "sample" / "images" / split).iterdir()):
            label = local / "sample" / "labels" / split / (im.stem + ".txt")
            rows = [[int(w) if i == 0 else float(w) for i, w in enumerate(line.split())]
                    for line in (label.read_text().splitlines() if label.exists() else []) if line.split()]
            rec = {"type": "image", "file": im.name, "split": split, "annotations": {"boxes": rows},
                   "url": srv_client.presigned_get_object("data", f"sample/images/{split}/{im.name}")}
            if sized:
                rec["width"], rec["height"] = Image.open(im).size
            lines.append(json.dumps(rec))
    out = tmp_path / "export.ndjson"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.fixture
def signed(s3, s3_server, fault_proxy, tmp_path):
    _, local = s3
    export = signed_export(tmp_path, local, fault_proxy, s3_server)
    secrets = set(re.findall(r"X-Amz-(?:Signature|Credential)=([^&\"]+)", export.read_text()))
    assert secrets
    return export, local, fault_proxy, secrets


def image_gets(proxy) -> int:
    return sum(n for (method, path), n in proxy.counts.items() if method == "GET" and re.match(IMAGES, path))


def same(got, want, local: Path, proxy):
    assert len(got) == len(want) > 0
    for (a, ta, pa), (b, tb, pb) in zip(got, want):
        assert torch.equal(a, b) and torch.equal(ta, tb)
        assert [p.replace(f"http://{proxy.netloc}/data/", f"{local}/") for p in pa] == pb


def batches(loader, epochs=1):
    return [(imgs.clone(), targets.clone(), list(paths)) for _ in range(epochs) for imgs, targets, paths, *_ in loader]


def no_secret_in(text: str, secrets) -> None:
    for s in secrets:
        assert s not in text


def files_hold_no_secret(folder: Path, secrets) -> int:
    n = 0
    for f in folder.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            for s in secrets:
                assert s.encode() not in data, f"{f} holds a signature"
            n += 1
    return n


@pytest.mark.parametrize("workers", [0, 2])
def test_signed_urls_give_the_batches_of_a_local_copy_and_no_signature_is_kept(signed, workers, caplog, capfd,
                                                                             user_cache_dir, tmp_path):
    export, local, proxy, secrets = signed
    caplog.set_level(logging.DEBUG, logger="yolo_data")
    for augment in (False, True):
        kw = dict(augment=augment, shuffle=augment, seed=3, workers=workers, rect=not augment)
        proxy.reset_counts()
        got, dataset = create_dataloader(str(export), 64, 4, 32, cache_dir=str(tmp_path / "caches"), **kw)
        if workers == 0:  # (2 workers start fetching the first batches at once)
            assert image_gets(proxy) == 0  # the export states every size: the scan fetches no image
        want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
        same(batches(got, 2), batches(want, 2), local, proxy)
        assert image_gets(proxy) == 2 * len(dataset)  # one request per image and epoch (no object cache)
        assert all(f.startswith(f"http://{proxy.netloc}/data/sample/images/") and "?" not in f
                   for f in dataset.im_files)
    out, err = capfd.readouterr()
    no_secret_in(caplog.text + out + err, secrets)
    assert files_hold_no_secret(tmp_path / "caches", secrets) >= 2  # the two label caches, among others
    files_hold_no_secret(user_cache_dir, secrets)


def test_failed_requests_are_retried_and_the_object_cache_serves_the_second_epoch(signed, tmp_path):
    export, local, proxy, secrets = signed
    kw = dict(augment=True, shuffle=True, seed=3, workers=2)
    proxy.faults.error(times=2, method="GET", path=IMAGES, status=503, code=None)
    proxy.faults.cut(times=1, method="GET", path=IMAGES, after_bytes=100)
    proxy.faults.reset(times=1, method="GET", path=IMAGES)
    got, dataset = create_dataloader(str(export), 64, 4, 32, object_cache_gb=0.01,
                                     cache_dir=str(tmp_path / "caches"), **kw)
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    first = batches(got)
    assert sum(proxy.faults_served.values()) == 4
    before = image_gets(proxy)
    second = batches(got)
    assert image_gets(proxy) == before  # the second epoch reads every image from the object cache
    same(first + second, batches(want, 2), local, proxy)
    assert files_hold_no_secret(tmp_path / "caches" / "objects", secrets) >= len(dataset)


def test_a_batch_the_object_cache_holds_is_read_without_a_request_or_a_thread(signed, tmp_path, monkeypatch):
    """Every epoch after the first: each worker's batch (and the next, read ahead) comes from the object
    cache, local files, read in the calling thread; a thread pool per batch only cost CPU."""
    export, _, proxy, _ = signed
    urls = [json.loads(line)["url"] for line in export.read_text().splitlines() if '"url"' in line]
    backend = HttpBackend(HttpOptions(object_cache_bytes=1 << 24, object_dir=str(tmp_path / "objects")))
    names = backend.admit(urls)
    first = backend.read_many(names[1:])
    assert len(first) >= 2 and all(isinstance(b, bytes) for b in first)
    assert image_gets(proxy) == len(urls) - 1
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), start(self))[1])
    assert backend.read_many(names[1:]) == first
    assert started == [] and image_gets(proxy) == len(urls) - 1
    assert backend.counts()["cached"] == len(urls) - 1
    # a batch the cache holds in part: only the others are asked for, each answer in its place
    unknown = names[0].replace("/images/", "/nowhere/")
    got = backend.read_many([names[2], names[0], unknown, names[1]])
    assert got[0] == first[1] and got[3] == first[0] and isinstance(got[1], bytes)
    assert isinstance(got[2], PermissionError)  # not admitted: refused without a request
    assert image_gets(proxy) == len(urls)


def test_an_export_without_sizes_is_scanned_from_the_images_themselves(s3, s3_server, fault_proxy, tmp_path):
    _, local = s3
    export = signed_export(tmp_path, local, fault_proxy, s3_server, sized=False)
    got, dataset = create_dataloader(str(export), 64, 4, 32, workers=0)
    assert image_gets(fault_proxy) >= len(dataset)  # each image's header read by the scan
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, workers=0)
    same(batches(got), batches(want), local, fault_proxy)


def test_a_refused_signature_is_a_permission_error_naming_the_public_url(signed):
    export, _, proxy, secrets = signed
    url = json.loads(export.read_text().splitlines()[1])["url"]
    wrong = re.sub(r"X-Amz-Signature=[0-9a-f]+", "X-Amz-Signature=" + "0" * 64, url)
    backend = HttpBackend()
    name, = backend.admit([wrong])
    assert name == public_url(url) and "?" not in name
    with pytest.raises(PermissionError) as e:
        backend.read(name)
    assert name in str(e.value) and "X-Amz" not in str(e.value)
    no_secret_in(str(e.value), secrets)
    copy = pickle.loads(pickle.dumps(backend))  # a spawned DataLoader worker's: the admitted URLs travel
    assert copy.admit([]) == [] and copy.stat(name).tag == backend.stat(name).tag and copy.counts() == {}
    proxy.faults.error(times=None, method="GET", path=IMAGES, status=503, code=None)
    backend = HttpBackend(backend.options.__class__(attempts=2, backoff_s=0.0))
    name, = backend.admit([url])
    with pytest.raises(OSError, match="after 2 tries") as e:
        backend.read(name)
    no_secret_in(str(e.value), secrets)
    assert backend.counts()["failed"] == 1 and backend.counts()["retries"] == 1


def _rank_worker(rank, world, port, export, out_dir):
    import os
    import torch.distributed as dist
    from procs import init

    os.environ["LOCAL_RANK"] = str(rank)  # what torchrun would set; one node
    init(rank, world, port)
    try:
        loader, dataset = create_dataloader(export, 64, 2, 32, rank=rank, workers=0)
        paths = [p for _, _, batch_paths, _ in loader for p in batch_paths]
        Path(out_dir, f"{rank}.json").write_text(json.dumps({"built": dataset.split_labels.built, "paths": paths}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_a_rank_that_reads_no_labels_fetches_the_images_the_export_lists(signed, tmp_path):
    """Rank 1 maps the label cache rank 0 wrote and never lists the split: it reads the export for its
    URLs all the same, and fetches its share of the images."""
    from procs import run

    export, _, proxy, _ = signed
    out = tmp_path / "out"
    out.mkdir()
    proxy.reset_counts()
    run(_rank_worker, 2, str(export), str(out))
    res = [json.loads((out / f"{r}.json").read_text()) for r in range(2)]
    assert [r["built"] for r in res] == [True, False]
    seen = [p for r in res for p in r["paths"]]
    assert len(seen) == len(set(seen)) == 8 and image_gets(proxy) == 8  # disjoint shares, each fetched once


def test_an_export_in_a_bucket_names_its_images_beside_it(s3, user_cache_dir):
    """An export in a bucket whose records name files under its first line's ``path`` (Ultralytics'
    export of a local dataset, uploaded): the images are the bucket's objects, the label cache is in
    the user's cache folder, and the batches are the local copy's."""
    client, local = s3
    lines = [json.dumps({"type": "dataset", "task": "detect", "class_names": NAMES, "path": "sample"})]
    for im in sorted((local / "sample" / "images" / "val").iterdir()):
        label = local / "sample" / "labels" / "val" / (im.stem + ".txt")
        rows = [[int(w) if i == 0 else float(w) for i, w in enumerate(line.split())]
                for line in (label.read_text().splitlines() if label.exists() else []) if line.split()]
        lines.append(json.dumps({"type": "image", "file": im.name, "split": "val", "annotations": {"boxes": rows}}))
    data = ("\n".join(lines) + "\n").encode()
    client.put_object("data", "export.ndjson", io.BytesIO(data), len(data))
    try:
        got, dataset = create_dataloader("s3://data/export.ndjson", 64, 4, 32, workers=0)
        want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, workers=0)
        assert dataset.im_files[0] == "s3://data/sample/images/val/val_000.jpg"
        assert Path(dataset.split_labels.cache_file) == user_cache_dir / "remote" / "data" / "export.val.yolo_data.cache"
        for (a, ta, pa), (b, tb, pb) in zip(batches(got), batches(want)):
            assert torch.equal(a, b) and torch.equal(ta, tb)
            assert [p.replace("s3://data/", f"{local}/") for p in pa] == pb
    finally:
        client.remove_object("data", "export.ndjson")
