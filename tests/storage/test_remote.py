"""Datasets in an S3 bucket (remote.py), against a real S3 server (SeaweedFS, tests/s3server.py): the
batches equal a local copy's, caches stay local, nothing is written into the bucket, and bad objects,
missing buckets and wrong credentials are named."""
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import s3server
from conftest import make_dataset, write_image
from yolo_data import create_dataloader
from yolo_data.storage import S3Backend, remote, s3list
from yolo_data.labels.split import load_split

minio = pytest.importorskip("minio")

SAMPLE = Path(__file__).resolve().parents[2] / "data"
s3_server = s3server.s3_server  # the fixtures, in this module's namespace
store, s3 = s3server.store, s3server.s3
batches, bucket_digest, same, upload = s3server.batches, s3server.bucket_digest, s3server.same, s3server.upload


@pytest.mark.parametrize("workers", [0, 2])
def test_training_and_evaluation_batches_equal_those_of_a_local_copy(s3, workers):
    client, local = s3
    before = bucket_digest(client, "data")
    for augment in (True, False):
        kw = dict(augment=augment, shuffle=augment, seed=3, workers=workers, rect=not augment)
        got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
        want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
        same(batches(got, 2), batches(want, 2), str(local))
    assert bucket_digest(client, "data") == before  # nothing written into the bucket


def test_the_device_stage_reads_a_buckets_jpegs_as_a_local_copys(s3):
    """The workers send the objects' bytes (fetched with their batch) for the device stage to decode:
    the batches equal those of a local copy with the device stage."""
    client, local = s3
    kw = dict(augment=True, shuffle=True, seed=3, workers=2, device="cpu")
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    assert got.device_stage is not None and got.dataset.images.in_bucket
    same(batches(got, 2), batches(want, 2), str(local))


def test_the_label_cache_is_kept_in_the_user_cache_folder_and_a_warm_start_reads_no_label(s3, user_cache_dir):
    _, dataset = create_dataloader("s3://data/sample.yaml", 64, 4, 32, workers=0)
    cache_file = Path(dataset.split_labels.cache_file)
    assert cache_file == user_cache_dir / "remote" / "data" / "sample" / "labels" / "val.yolo_data.cache"
    assert dataset.split_labels.built
    n = len(dataset)
    remote.forget()
    start = remote.counts()
    _, again = create_dataloader("s3://data/sample.yaml", 64, 4, 32, workers=0)
    used = {k: v - start.get(k, 0) for k, v in remote.counts().items()}
    assert not again.split_labels.built and len(again) == n
    # the yaml (its HEAD and GET) and the listings of the images' and the labels' folders, no label or image
    assert used.get("get", 0) == 1 and used.get("list", 0) == 2, used


def test_a_changed_label_object_is_noticed_and_rescanned(s3, store, tmp_path):
    client, _ = s3
    root = tmp_path / "ds"
    make_dataset(root, [(f"{i}.jpg", (40, 32), "0 0.5 0.5 0.2 0.2\n") for i in range(3)])
    upload(client, root, "data", "changing")
    first = load_split("s3://data/changing/images/train")
    assert first.built and first.counts["boxes"] == 3
    client.put_object("data", "changing/labels/train/1.txt", __import__("io").BytesIO(b"0 0.5 0.5 0.2 0.2\n1 0.2 0.2 0.1 0.1\n"), 36)
    remote.forget()
    second = load_split("s3://data/changing/images/train")
    assert second.built and second.counts["boxes"] == 4
    remote.forget()
    third = load_split("s3://data/changing/images/train")
    assert not third.built and third.counts["boxes"] == 4


def test_bad_objects_are_named_by_their_urls_and_left_out(s3, tmp_path):
    client, _ = s3
    root = tmp_path / "bad"
    make_dataset(root, [("good.jpg", (40, 32), "0 0.5 0.5 0.2 0.2\n"), ("nolabel.jpg", (40, 32), None),
                        ("badlabel.jpg", (40, 32), "7 0.5 0.5 0.2 0.2\n"), ("broken.jpg", (40, 32), "0 0.5 0.5 0.1 0.1\n"),
                        ("tilted.png", (30, 50), "1 0.5 0.5 0.2 0.2\n")])
    (root / "images" / "train" / "broken.jpg").write_bytes(b"not an image at all")
    upload(client, root, "data", "bad")
    split = load_split("s3://data/bad/images/train", names=["a", "b"])
    reasons = {p.file: p.reason for p in split.problems}
    assert "class 7 but the dataset has 2 names" in reasons["s3://data/bad/labels/train/badlabel.txt"]
    assert "not an image" in reasons["s3://data/bad/images/train/broken.jpg"]
    assert split.counts["missing"] == 1 and split.counts["corrupt"] == 2 and len(split.store) == 3
    assert split.store.im_file(0).startswith("s3://data/bad/images/train/")
    assert [tuple(s) for s in split.store.shapes_hw] == [(32, 40), (32, 40), (50, 30)]


def test_an_image_deleted_after_the_scan_is_replaced_with_a_warning_and_the_epoch_completes(s3, tmp_path, caplog):
    client, _ = s3
    root = tmp_path / "gone"
    make_dataset(root, [(f"{i}.jpg", (40, 32), "0 0.5 0.5 0.2 0.2\n") for i in range(6)])
    upload(client, root, "data", "gone")
    loader, _ = create_dataloader("s3://data/gone/data.yaml", 64, 3, 32, augment=True, workers=0, split="train")
    client.remove_object("data", "gone/images/train/2.jpg")
    got = batches(loader)
    assert sum(len(p) for _, _, p in got) == 6
    assert "s3://data/gone/images/train/2.jpg: image cannot be read (no such object" in caplog.text


def test_a_missing_bucket_yaml_or_folder_is_a_clear_error(s3):
    with pytest.raises(FileNotFoundError, match="s3://nobucket/data.yaml does not exist"):
        create_dataloader("s3://nobucket/data.yaml", 64, 4, 32, workers=0)
    with pytest.raises(FileNotFoundError, match="s3://data/nothing-here does not exist or is empty"):
        load_split("s3://data/nothing-here")


def test_wrong_credentials_are_refused_naming_the_url_and_never_the_secret(s3, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-1234")
    remote.configure()  # a new client, with the new credentials
    with pytest.raises(PermissionError) as e:
        load_split("s3://data/sample/images/val")
    assert "s3://data/sample/images/val" in str(e.value) and "access denied" in str(e.value)
    assert "not-the-secret-1234" not in str(e.value) and "yolo_data_test_secret" not in str(e.value)


def test_credentials_come_from_a_profile_of_the_shared_credentials_file(s3, store, monkeypatch, tmp_path):
    srv = store[0]
    creds = tmp_path / "credentials"
    creds.write_text(f"[other]\naws_access_key_id = {srv.access_key}\naws_secret_access_key = {srv.secret_key}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_PROFILE", "other")
    remote.configure()
    assert len(load_split("s3://data/sample/images/val").store) == 8
    monkeypatch.setenv("AWS_PROFILE", "missing")  # no credentials at all: anonymous, refused by this server
    remote.configure()
    remote.forget()
    with pytest.raises(PermissionError):
        load_split("s3://data/sample/images/val")


def test_an_endpoint_from_the_environment_or_the_settings(s3, store, monkeypatch):
    srv = store[0]
    remote.configure(endpoint_url=None)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", srv.endpoint_url)
    assert len(load_split("s3://data/sample/images/val").store) == 8
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    remote.configure(endpoint_url=None)
    remote.forget()
    _, dataset = create_dataloader("s3://data/sample.yaml", 64, 4, 32, workers=0, endpoint_url=srv.endpoint_url)
    assert len(dataset) == 8


def test_without_the_client_library_the_message_says_what_to_install(s3, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "minio", None)
    remote.configure()
    with pytest.raises(ImportError, match=r'pip install "yolo-data\[remote\]"'):
        load_split("s3://data/sample/images/val")


def test_urls_are_joined_and_split_as_keys():
    assert remote.split_url("s3://b/a/x.jpg") == ("b", "a/x.jpg")
    assert remote.join("s3://b/data", "../images/./x.jpg") == "s3://b/images/x.jpg"
    assert remote.join("s3://b/data", "s3://c/y.jpg") == "s3://c/y.jpg"
    assert remote.parent("s3://b/a/x.jpg") == "s3://b/a"
    with pytest.raises(ValueError, match="no bucket"):
        remote.split_url("s3:///x")


def as_node(rank, world, port, endpoint, creds, cache_root):
    """This process as local rank 0 of node ``rank`` (its own cache folder: nodes share no disk), the
    bucket's endpoint and credentials set the usual way, in the process group."""
    from procs import init
    os.environ.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", AWS_ACCESS_KEY_ID=creds[0], AWS_SECRET_ACCESS_KEY=creds[1],
                      YOLO_DATA_CACHE_DIR=f"{cache_root}/node{rank}")
    # forked from pytest, whose earlier tests may have started OpenMP's threads: a forked child's first
    # parallel region would wait for them forever (torchrun's ranks are fresh processes)
    torch.set_num_threads(1)
    init(rank, world, port)
    remote.configure(endpoint_url=endpoint)


def _node_worker(rank, world, port, endpoint, creds, local_yaml, out_dir, cache_root):
    """Rank ``rank`` as local rank 0 of its own node, with its own cache folder (nodes share no disk)."""
    import json
    as_node(rank, world, port, endpoint, creds, cache_root)
    try:
        import torch.distributed as dist
        start = remote.counts()
        kw = dict(augment=True, shuffle=True, seed=5, workers=2, split="train", rank=0)
        got, ds = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
        used = {k: v - start.get(k, 0) for k, v in remote.counts().items()}
        want, _ = create_dataloader(local_yaml, 64, 4, 32, **kw)
        a, b = batches(got, 2), batches(want, 2)
        equal = len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))
        cache = ds.split_labels.cache_file
        Path(out_dir, f"{rank}.json").write_text(json.dumps({
            "built": ds.split_labels.built, "cache": str(cache), "used": used, "mtime": os.stat(cache).st_mtime_ns,
            "equal": equal, "paths": [p for _, _, ps in a[:len(a) // 2] for p in ps]}))
        dist.barrier()
    finally:
        import torch.distributed as dist
        dist.destroy_process_group()


def test_two_nodes_scan_once_per_job_and_train_on_the_batches_of_a_local_copy(s3, store, tmp_path):
    local = store[2]
    r0, r1 = two_nodes(_node_worker, store, tmp_path, str(local / "sample.yaml"))
    assert r0["built"] and not r1["built"]
    assert r0["cache"].startswith(str(tmp_path / "caches" / "node0")) and Path(r0["cache"]).is_file()
    assert r1["cache"].startswith(str(tmp_path / "caches" / "node1")) and Path(r1["cache"]).is_file()
    # the yaml, the published cache it looked for (none), 15 label objects (one image is a background
    # without one), 16 image headers
    assert r0["used"]["list"] == 2 and r0["used"]["get"] == 1 + 1 + 15 + 16, r0["used"]
    assert r1["used"].get("list", 0) == 0 and r1["used"]["get"] == 1  # the yaml only: no listing, no label
    assert r0["equal"] and r1["equal"]
    assert sorted(r0["paths"] + r1["paths"]) == sorted(f"s3://data/sample/images/train/{p.name}" for p in
                                                      (local / "sample" / "images" / "train").iterdir())
    # the next job: rank 0 finds its cache fresh (listings only), rank 1 keeps its own copy, unchanged
    again0, again1 = two_nodes(_node_worker, store, tmp_path, str(local / "sample.yaml"))
    assert not again0["built"] and again0["used"]["get"] == 1 and again1["used"].get("list", 0) == 0
    assert again1["mtime"] == r1["mtime"] and again0["equal"] and again1["equal"]


def _failing_node_worker(rank, world, port, endpoint, creds, out_dir, cache_root):
    import json
    as_node(rank, world, port, endpoint, creds, cache_root)
    try:
        try:
            create_dataloader("s3://data/nothing-here/images", 64, 4, 32, workers=0, rank=0)
            error = None
        except Exception as e:  # noqa: BLE001 - what each rank raised is the result
            error = f"{type(e).__name__}: {e}"
        Path(out_dir, f"{rank}.json").write_text(json.dumps({"error": error}))
    finally:
        import torch.distributed as dist
        dist.destroy_process_group()


def two_nodes(worker, store, tmp_path, *args) -> list:
    """What each of two simulated nodes running ``worker(rank, world, port, endpoint, creds, *args,
    out_dir, cache_root)`` wrote to <out_dir>/<rank>.json."""
    import json
    from procs import run
    srv = store[0]
    run(worker, 2, srv.endpoint_url, (srv.access_key, srv.secret_key), *args, str(tmp_path),
        str(tmp_path / "caches"), timeout=120)
    return [json.loads((tmp_path / f"{k}.json").read_text()) for k in range(2)]


def test_when_rank_0s_scan_fails_the_other_nodes_stop_with_its_error(s3, store, tmp_path):
    r0, r1 = (r["error"] for r in two_nodes(_failing_node_worker, store, tmp_path))
    assert r0.startswith("FileNotFoundError") and "s3://data/nothing-here/images does not exist" in r0
    assert r1.startswith("ZeroFirstError: rank 0 failed, so rank 1 stops too: FileNotFoundError")


@pytest.fixture
def faulty(s3, store):
    """The bucket behind a fault-injecting proxy (tests/faultproxy.py), with short timeouts and waits."""
    from faultproxy import FaultProxy
    srv = store[0]
    with FaultProxy(srv.endpoint_url) as proxy:
        remote.configure(endpoint_url=proxy.endpoint_url, timeout_s=1.0, backoff_s=0.01, attempts=4)
        yield proxy


@pytest.mark.parametrize("fault", ["throttle", "error", "cut", "reset", "stall"])
def test_passing_faults_are_retried_and_the_batches_equal_a_local_copys(faulty, s3, fault):
    _, local = s3
    rule = {"throttle": lambda: faulty.faults.throttle(times=3, method="GET"),
            "error": lambda: faulty.faults.error(times=3, method="GET", status=503, code="ServiceUnavailable"),
            "cut": lambda: faulty.faults.cut(times=3, method="GET", path=r"\.jpg$", after_bytes=100),
            "reset": lambda: faulty.faults.reset(times=3, method="GET"),
            "stall": lambda: faulty.faults.stall(times=2, method="GET", path=r"\.jpg$", stall_s=5.0)}[fault]()
    kw = dict(augment=True, shuffle=True, seed=3, workers=0)
    start = remote.counts()
    got, dataset = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    b = batches(got)
    assert rule.served == rule.times  # every fault was met ...
    assert remote.counts()["retries"] - start.get("retries", 0) >= rule.times  # ... and retried
    assert dataset.split_labels.counts["corrupt"] == 0 and Path(dataset.split_labels.cache_file).is_file()
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(b, batches(want), str(local))


def test_an_image_that_keeps_failing_is_replaced_naming_it_and_the_epoch_completes(faulty, s3, caplog):
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, augment=True, workers=0, split="val")
    faulty.faults.error(times=None, method="GET", path=r"/val_003\.jpg$", status=500, code="InternalError")
    b = batches(got)
    assert sum(len(p) for _, _, p in b) == 8 and "s3://data/sample/images/val/val_003.jpg" not in \
        [p for _, _, ps in b for p in ps]
    assert "s3://data/sample/images/val/val_003.jpg: image cannot be read" in caplog.text
    assert "InternalError" in caplog.text and "after 4 tries" in caplog.text


def test_a_scan_that_met_failing_requests_leaves_those_images_out_and_writes_no_cache(faulty, s3, caplog):
    faulty.faults.error(times=None, method="GET", path=r"/labels/val/val_002\.txt$", status=500)
    split = load_split("s3://data/sample/images/val", names=["circle", "rectangle", "triangle"])
    assert len(split.store) == 7 and split.cache_file is None
    assert [(p.file, p.reason[:15]) for p in split.problems] == [("s3://data/sample/labels/val/val_002.txt",
                                                                  "cannot be read ")]
    assert "InternalError" in split.problems[0].reason and "after 4 tries" in split.problems[0].reason
    assert "the label cache is not written" in caplog.text
    faulty.faults.clear()
    again = load_split("s3://data/sample/images/val", names=["circle", "rectangle", "triangle"])
    assert len(again.store) == 8 and again.built and again.cache_file is not None


@pytest.mark.parametrize("mode", ["disk", "ram"])
def test_with_an_image_cache_the_second_epoch_fetches_nothing(faulty, s3, mode, user_cache_dir):
    _, local = s3
    kw = dict(augment=True, shuffle=True, seed=3, workers=2, cache=mode)
    got, dataset = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    first = batches(got)  # the cache was filled while the loader was built
    faulty.reset_counts()
    second = batches(got)
    assert faulty.requests == 0, faulty.counts
    if mode == "disk":
        assert list((user_cache_dir / "remote" / "data" / "sample").glob("**/*.imgcache"))
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(first + second, batches(want, 2), str(local))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_loader_gives_the_rest_of_the_epoch_as_from_a_local_copy(s3, workers):
    _, local = s3
    kw = dict(augment=True, shuffle=True, seed=4, workers=workers, split="train")
    loader, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    resumed, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    resumed.load_state_dict(state)
    ref, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(batches(resumed), batches(ref)[1:], str(local))


def test_yolo_data_cache_publishes_the_label_caches_and_a_new_machine_uses_them(s3, store, tmp_path, monkeypatch,
                                                                                 capsys):
    from yolo_data.cli import build_cache_main
    client, _ = s3
    root = tmp_path / "pub"
    make_dataset(root, [(f"{i}.jpg", (40, 32), f"{i % 2} 0.5 0.5 0.2 0.2\n") for i in range(5)])
    upload(client, root, "data", "pub")
    assert build_cache_main(["s3://data/pub/data.yaml", "--endpoint-url", store[0].endpoint_url, "--publish"]) == 0
    out = capsys.readouterr().out
    assert "train: published s3://data/pub/labels/train.yolo_data.cache" in out
    assert "pub/labels/train.yolo_data.cache" in [o.object_name for o in client.list_objects("data", "pub/labels/")]
    monkeypatch.setenv("YOLO_DATA_CACHE_DIR", str(tmp_path / "another-machine"))
    remote.forget()
    start = remote.counts()
    split = load_split("s3://data/pub/images/train", names=["a", "b", "c"])
    used = {k: v - start.get(k, 0) for k, v in remote.counts().items()}
    assert not split.built and len(split.store) == 5 and used["get"] == 1  # the published cache, no label
    assert split.cache_file == tmp_path / "another-machine" / "remote" / "data" / "pub" / "labels" / "train.yolo_data.cache"
    client.put_object("data", "pub/labels/train/3.txt", __import__("io").BytesIO(b"2 0.5 0.5 0.2 0.2\n"), 18)
    monkeypatch.setenv("YOLO_DATA_CACHE_DIR", str(tmp_path / "a-third-machine"))
    stale = load_split("s3://data/pub/images/train", names=["a", "b", "c"])
    assert stale.built and stale.store.labels[:, 0].tolist().count(2) == 1  # rescanned, not the stale one


def test_publishing_a_local_split_is_refused(s3, small_dataset, capsys):
    from yolo_data.cli import build_cache_main
    assert build_cache_main([str(small_dataset), "--publish"]) == 2
    assert "not the label cache of a split in a bucket" in capsys.readouterr().err


def test_a_coco_json_in_the_bucket_reads_as_its_local_copy_and_warm_starts_from_listings(s3, tmp_path):
    import json
    client, _ = s3
    root = tmp_path / "coco"
    for k, name in enumerate(["1.jpg", "2.jpg", "sub/3.jpg"]):  # COCO's layout: val2017/ beside annotations/
        write_image(root / "val2017" / name, 80, 60, seed=k)
    images = [{"id": k + 1, "file_name": n, "width": 80, "height": 60} for k, n in enumerate(["1.jpg", "2.jpg", "sub/3.jpg"])]
    anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [10, 10, 20, 20]},
            {"id": 2, "image_id": 3, "category_id": 9, "bbox": [0, 0, 40, 30], "segmentation": [[0, 0, 40, 0, 40, 30]]}]
    cats = [{"id": 7, "name": "cat"}, {"id": 9, "name": "dog"}]
    (root / "annotations").mkdir()
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                                            "categories": cats}))
    upload(client, root, "data", "coco")
    here = load_split(str(root / "annotations" / "instances_val2017.json"))
    there = load_split("s3://data/coco/annotations/instances_val2017.json")
    assert there.names == here.names == ["cat", "dog"] and there.kind == "coco" and there.built
    assert [there.store.im_file(i) for i in range(3)] == [f"s3://data/coco/val2017/{n}" for n in ("1.jpg", "2.jpg", "sub/3.jpg")]
    for k, a in here.store.arrays().items():
        if "path" not in k:
            assert np.array_equal(a, there.store.arrays()[k]), k
    start = remote.counts()
    again = load_split("s3://data/coco/annotations/instances_val2017.json")
    used = {k: v - start.get(k, 0) for k, v in remote.counts().items()}
    assert not again.built and used.get("get", 0) == 0 and used.get("head", 0) <= 1, used  # the JSON is not read


def test_a_bounded_object_cache_serves_later_epochs_without_requests(faulty, s3, user_cache_dir):
    _, local = s3
    kw = dict(augment=True, shuffle=True, seed=3, workers=2, split="train")
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, object_cache_gb=1.0, **kw)
    faulty.reset_counts()
    first = batches(got)
    assert faulty.requests == 16  # each train image once
    faulty.reset_counts()
    second = batches(got)
    assert faulty.requests == 0, faulty.counts
    objects = [p for p in (user_cache_dir / "remote" / "objects").rglob("*") if p.is_file()]
    assert len(objects) == 16 and all(p.stat().st_mode & 0o077 == 0 for p in objects)  # the user's own
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(first + second, batches(want, 2), str(local))


def test_the_object_cache_keeps_within_its_bound(faulty, s3, user_cache_dir):
    sizes = sorted(o.size for o in remote.list_folder("s3://data/sample/images/train"))
    limit = sum(sizes[:6])  # about a third of the images
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, augment=True, workers=0, split="train",
                               object_cache_gb=limit / 2**30)
    batches(got, 2)
    files = [p for p in (user_cache_dir / "remote" / "objects").rglob("*") if p.is_file()]
    assert 0 < sum(p.stat().st_size for p in files) <= limit
    faulty.reset_counts()
    batches(got)
    assert faulty.requests == 16 - len(files)  # the same part from the cache every epoch, the rest fetched


def test_objects_nobody_read_for_a_week_make_room(tmp_path):
    from yolo_data.storage.objectcache import STALE_DAYS, ObjectCache
    cache = ObjectCache(tmp_path / "objects", 100)
    cache.put("s3://b/old.jpg", 60, 1, b"o" * 60)
    assert cache.get("s3://b/old.jpg", 60, 1) == b"o" * 60 and cache.get("s3://b/old.jpg", 60, 2) is None
    cache.put("s3://b/new.jpg", 60, 1, b"n" * 60)  # past the bound: not kept
    assert cache.get("s3://b/new.jpg", 60, 1) is None
    old = [p for p in (tmp_path / "objects").rglob("*") if p.is_file()][0]
    week_ago = __import__("time").time() - (STALE_DAYS + 1) * 86400
    os.utime(old, (week_ago, week_ago))
    later = ObjectCache(tmp_path / "objects", 100)  # another process, another day
    later.put("s3://b/new.jpg", 60, 1, b"n" * 60)
    assert later.get("s3://b/new.jpg", 60, 1) == b"n" * 60 and not old.exists()


def test_workers_filling_the_object_cache_at_once_keep_near_its_bound(faulty, s3, user_cache_dir):
    sizes = sorted(o.size for o in remote.list_folder("s3://data/sample/images/train"))
    limit = sum(sizes[:6])
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, augment=True, workers=2, split="train",
                               object_cache_gb=limit / 2**30)
    batches(got, 2)
    held = sum(p.stat().st_size for p in (user_cache_dir / "remote" / "objects").rglob("*") if p.is_file())
    assert limit * 0.5 < held <= limit + sizes[-1]  # the other worker's last file at most


def test_two_processes_filling_one_object_folder_see_each_others_files(tmp_path):
    from yolo_data.storage.objectcache import RECOUNT, ObjectCache
    limit = 1600
    a, b = ObjectCache(tmp_path / "o", limit), ObjectCache(tmp_path / "o", limit)  # two workers' own
    b.put("s3://b/first", 100, 0, b"b" * 100)  # b counts an empty folder
    for i in range(30):
        a.put(f"s3://b/a{i}", 100, 0, b"a" * 100)  # a fills it
    for i in range(30):
        b.put(f"s3://b/b{i}", 100, 0, b"b" * 100)  # b would fill it again from its own count
    held = sum(p.stat().st_size for p in (tmp_path / "o").rglob("*") if p.is_file())
    assert limit <= held <= limit * (1 + RECOUNT) <= limit * 1.25  # not twice the bound


def test_the_scan_reads_an_image_header_in_few_requests(faulty, s3, tmp_path):
    client, _ = s3
    root = tmp_path / "big"
    make_dataset(root, [("big.png", (520, 500), "0 0.5 0.5 0.2 0.2\n"), ("big.jpg", (900, 700), "0 0.5 0.5 0.2 0.2\n"),
                        ("small.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n")])
    sizes = {p.name: p.stat().st_size for p in (root / "images" / "train").iterdir()}
    assert sizes["big.png"] > 700_000 and sizes["big.jpg"] > 300_000  # past the whole-object read
    upload(client, root, "data", "big")
    faulty.reset_counts()
    split = load_split("s3://data/big/images/train")
    assert len(split.store) == 3 and split.counts["corrupt"] == 0
    gets = {path.rpartition("/")[2]: n for (method, path), n in faulty.counts.items() if method == "GET"}
    # the PNG: its first 64 KiB, then the rest of its chunk walk in one read-ahead; the JPEG: its head
    # and its last 2 bytes; a small image: whole, in one
    assert (gets["big.png"], gets["big.jpg"], gets["small.jpg"]) == (2, 2, 1), gets


def _unwritable_node_worker(rank, world, port, endpoint, creds, out_dir, cache_root):
    import json
    from yolo_data.labels import cache as cache_module
    if rank == 0:  # a full or read-only cache folder on rank 0's node
        def full(path, contents):
            raise OSError(28, "No space left on device")
        cache_module.save = full
    as_node(rank, world, port, endpoint, creds, cache_root)
    try:
        start = remote.counts()
        _, ds = create_dataloader("s3://data/sample/images/val", 64, 4, 32, workers=0, rank=0)
        used = {k: v - start.get(k, 0) for k, v in remote.counts().items()}
        Path(out_dir, f"{rank}.json").write_text(json.dumps({
            "built": ds.split_labels.built, "n": len(ds), "written": ds.split_labels.cache_file is not None,
            "lists": used.get("list", 0)}))
    finally:
        import torch.distributed as dist
        dist.destroy_process_group()


def test_when_rank_0_cannot_write_its_cache_the_other_nodes_scan_themselves(s3, store, tmp_path):
    r0, r1 = two_nodes(_unwritable_node_worker, store, tmp_path)
    assert r0 == {"built": True, "n": 8, "written": False, "lists": 2}
    assert r1 == {"built": True, "n": 8, "written": True, "lists": 2}


def test_a_worker_forked_while_a_thread_holds_the_lock_gets_a_fresh_one():
    backend = remote.backend()
    held = backend._lock
    held.acquire()  # as a listing thread of the parent may hold it at the fork
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if backend._lock.acquire(timeout=2) else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        held.release()
    assert os.waitstatus_to_exitcode(status) == 0


# -- each worker fetches its next batch while it makes this one (loader.LookAhead, ImageSource.fetch) ------
def record_fetches(monkeypatch, log: Path):
    """Make every S3Backend.read_many call, in this process and in workers forked after it, append a
    line 'pid thread-name url url ...' to ``log``."""
    read_many = S3Backend.read_many

    def recorded(self, urls, threads=None):
        import threading
        with open(log, "a") as f:
            f.write(" ".join([str(os.getpid()), threading.current_thread().name, *urls]) + "\n")
        return read_many(self, urls, threads)

    monkeypatch.setattr(S3Backend, "read_many", recorded)


def fetches(log: Path) -> dict:
    """{pid: [(thread name, [urls])]} in the order they were made."""
    out = {}
    for line in log.read_text().splitlines():
        pid, thread, *urls = line.split(" ")
        out.setdefault(pid, []).append((thread, urls))
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_each_process_fetches_its_next_batch_in_the_background_once_per_image(faulty, s3, workers, monkeypatch,
                                                                            tmp_path):
    _, local = s3
    record_fetches(monkeypatch, tmp_path / "fetches")
    kw = dict(augment=True, shuffle=True, seed=5, workers=workers, split="train")
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)  # 4 batches of 4
    faulty.reset_counts()
    b = batches(got)
    assert faulty.requests == 16, faulty.counts  # every image once: each guess of the next batch was right
    per_process = fetches(tmp_path / "fetches")
    assert len(per_process) == max(workers, 1)
    for made in per_process.values():  # the first batch in the foreground, every later one ahead of time
        assert [t for t, _ in made] == ["MainThread"] + ["yolo_data-ahead"] * (len(made) - 1), made
    assert sorted(u for made in per_process.values() for _, urls in made for u in urls) == \
        sorted(f"s3://data/sample/images/train/train_{i:03d}.jpg" for i in range(16))
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(b, batches(want), str(local))


def test_a_wrong_guess_of_the_next_batch_costs_requests_not_other_batches(faulty, s3, monkeypatch):
    from yolo_data.loading import loader as loader_module
    _, local = s3
    init = loader_module.LookAhead.__init__
    monkeypatch.setattr(loader_module.LookAhead, "__init__", lambda self, b, ahead: init(self, b, ahead + 1))
    kw = dict(augment=True, shuffle=True, seed=5, workers=2, split="train")
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    faulty.reset_counts()
    b = batches(got)
    assert faulty.requests > 16  # the other worker's batches were fetched for nothing
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(b, batches(want), str(local))


def test_without_torchs_index_sampler_batches_are_fetched_when_made(faulty, s3, monkeypatch, tmp_path):
    from yolo_data.runtime import torch_private
    _, local = s3
    monkeypatch.setattr(torch_private, "PRIVATE", torch_private.PRIVATE - {"index_sampler"})
    record_fetches(monkeypatch, tmp_path / "fetches")
    kw = dict(augment=True, shuffle=True, seed=5, workers=0, split="train")
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    b = batches(got)
    assert {t for made in fetches(tmp_path / "fetches").values() for t, _ in made} == {"MainThread"}
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(b, batches(want), str(local))


def test_a_worker_forked_while_the_next_batch_is_on_its_way_fetches_for_itself(faulty, s3):
    import pickle
    from torch.utils.data import DataLoader
    got, dataset = create_dataloader("s3://data/sample.yaml", 64, 2, 32, augment=False, workers=0, split="val")
    faulty.faults.latency_s = 0.5
    it = iter(got)
    next(it)  # the second batch's fetch has started, and lasts half a second at least
    assert dataset.images._ahead is not None and not dataset.images._ahead._done.is_set()
    copy = pickle.loads(pickle.dumps(dataset.images))  # a spawned worker's copy: no thread, nothing fetched
    assert copy._ahead is None and copy.fetched == {}
    plain = DataLoader(dataset, batch_size=2, num_workers=1, collate_fn=dataset.collate_fn, timeout=30)
    imgs, _, paths, _ = next(iter(plain))  # a child waiting for its parent's thread would time out
    assert list(paths) == ["s3://data/sample/images/val/val_000.jpg", "s3://data/sample/images/val/val_001.jpg"]
    faulty.faults.latency_s = 0.0
    assert len(list(it)) == 3


# -- one folder listed in ranges at once (s3list.py, keyspace.py) ----------------------------------------------
@pytest.fixture(scope="module")
def many(store):
    """s3://data/many/: 2,500 sequential names, 2,500 random ones, and 1,200 odd names (spaces, accents,
    '~', names that sort around '/') with subfolders; empty objects."""
    import hashlib
    import io
    from concurrent.futures import ThreadPoolExecutor
    _, client, _ = store
    keys = [f"many/seq/{i:012d}.jpg" for i in range(2500)]
    keys += [f"many/hash/{hashlib.sha1(str(i).encode()).hexdigest()}.jpg" for i in range(2500)]
    odd = ["a b", "é", "~x", "Z", "a-b", "a.b", "a0", "a_b", "中文", "x y/z"]
    keys += [f"many/odd/{odd[i % len(odd)]}{i}.jpg" for i in range(1000)]
    keys += [f"many/odd/sub{i % 5}/{i}.jpg" for i in range(200)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.put_object("data", k, io.BytesIO(b""), 0), keys))
    return client


def ranges_at_once(monkeypatch) -> list:
    """[most ranges of one listing listed at once], filled as listings run."""
    import threading
    lock, now, most = threading.Lock(), [0], [0]
    from yolo_data.storage import s3list
    listing_range = s3list._Listing._range

    def counted(self, after, upto):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            return listing_range(self, after, upto)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(s3list._Listing, "_range", counted)
    return most


@pytest.mark.parametrize("folder", ["seq", "hash", "odd"])
def test_a_folder_of_many_pages_is_listed_in_ranges_at_once_and_exactly(faulty, s3, many, folder, monkeypatch):
    monkeypatch.setattr(s3list, "CUT_PAGES", 1)  # cut after every page: these folders have 2 or 3
    most = ranges_at_once(monkeypatch)
    faulty.faults.latency_s = 0.02
    got = remote.list_folder(f"s3://data/many/{folder}")
    want = [o.object_name for o in many.list_objects("data", prefix=f"many/{folder}/", recursive=True)]
    assert [o.url for o in got] == [f"s3://data/{k}" for k in want]  # each once, in S3's order
    assert len(want) >= 1200 and most[0] >= 2
    one_level = remote.list_folder(f"s3://data/many/{folder}", recursive=False)
    assert [o.url for o in one_level] == [f"s3://data/{k}" for k in want if "/" not in k[len(f"many/{folder}/"):]]


def test_a_range_whose_listing_fails_for_a_while_is_retried_and_the_listing_stays_exact(faulty, s3, many, monkeypatch):
    monkeypatch.setattr(s3list, "CUT_PAGES", 1)
    most = ranges_at_once(monkeypatch)
    rule = faulty.faults.error(times=3, method="GET", query=r"start-after", status=503, code="ServiceUnavailable")
    start = remote.counts()
    got = remote.list_folder("s3://data/many/seq")
    assert [o.url for o in got] == [f"s3://data/many/seq/{i:012d}.jpg" for i in range(2500)]
    assert rule.served == 3 and remote.counts()["retries"] - start.get("retries", 0) >= 3 and most[0] >= 2


def test_a_folder_of_fewer_pages_than_are_cut_is_listed_in_one_range_without_waste(faulty, s3, many, monkeypatch):
    most = ranges_at_once(monkeypatch)
    faulty.reset_counts()
    got = remote.list_folder("s3://data/many/seq")
    assert len(got) == 2500 and most[0] == 1 and faulty.requests == 3  # pages of 1,000, 1,000 and 500 keys


def test_a_listing_that_keeps_failing_is_an_error_naming_the_folder(faulty, s3, many, monkeypatch):
    monkeypatch.setattr(s3list, "CUT_PAGES", 1)
    faulty.faults.error(times=None, method="GET", query=r"start-after", status=500, code="InternalError")
    with pytest.raises(OSError, match=r"s3://data/many/hash.*InternalError"):
        remote.list_folder("s3://data/many/hash")


def test_a_background_fetch_that_fails_leaves_the_batch_to_be_fetched_when_made(faulty, s3, monkeypatch, capfd):
    import threading
    _, local = s3
    read_many = S3Backend.read_many

    def failing_ahead(self, urls, threads=None):
        if threading.current_thread().name == "yolo_data-ahead":
            raise RuntimeError("the background fetch broke")
        return read_many(self, urls, threads)

    monkeypatch.setattr(S3Backend, "read_many", failing_ahead)
    kw = dict(augment=True, shuffle=True, seed=5, workers=0, split="train")
    got, _ = create_dataloader("s3://data/sample.yaml", 64, 4, 32, **kw)
    faulty.reset_counts()
    b = batches(got)
    assert faulty.requests == 16 and "the background fetch broke" not in capfd.readouterr().err
    want, _ = create_dataloader(str(local / "sample.yaml"), 64, 4, 32, **kw)
    same(b, batches(want), str(local))


def test_without_the_clients_signed_request_a_folder_is_listed_in_one_range_as_exactly(faulty, s3, many, monkeypatch):
    monkeypatch.setattr(s3list, "CUT_PAGES", 1)
    monkeypatch.setattr(s3list, "RAW_PAGES", False)
    most = ranges_at_once(monkeypatch)
    for folder in ("seq", "odd"):
        want = [o.object_name for o in many.list_objects("data", prefix=f"many/{folder}/", recursive=True)]
        assert [o.url for o in remote.list_folder(f"s3://data/many/{folder}")] == [f"s3://data/{k}" for k in want]
        assert [o.url for o in remote.list_folder(f"s3://data/many/{folder}", recursive=False)] == \
            [f"s3://data/{k}" for k in want if "/" not in k[len(f"many/{folder}/"):]]
    assert most[0] == 0  # no range of s3list's


def test_a_listing_page_is_read_from_its_xml():
    xml = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
           b'<Name>data</Name><Prefix>f/</Prefix><KeyCount>3</KeyCount><MaxKeys>3</MaxKeys>'
           b'<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>'
           b'<NextContinuationToken>tok+1</NextContinuationToken>'
           b'<Contents><Key>f/a+b.jpg</Key><LastModified>2026-11-27T00:00:00.000Z</LastModified>'
           b'<ETag>&quot;e1&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>'
           b'<Contents><Key>f/%C3%A9%2B.jpg</Key><LastModified>2026-11-27T00:00:01.000Z</LastModified>'
           b'<ETag>&quot;e2&quot;</ETag><Size>0</Size></Contents>'
           b'<CommonPrefixes><Prefix>f/sub/</Prefix></CommonPrefixes></ListBucketResult>')
    page = s3list.parse_page(xml)
    assert page.entries == [s3list.Entry("f/a b.jpg", 12, '"e1"', "2026-11-27T00:00:00.000Z"),
                            s3list.Entry("f/\u00e9+.jpg", 0, '"e2"', "2026-11-27T00:00:01.000Z")]
    assert page.truncated and page.token == "tok+1"
    plain = s3list.parse_page(b"<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>x+y</Key>"
                              b"<Size>3</Size></Contents></ListBucketResult>")  # no namespace, no URL encoding
    assert plain == s3list.Page([s3list.Entry("x+y", 3, "", "")], False, None)
