"""``yolo-data split`` of datasets in an S3 bucket (a real S3 server, tests/s3server.py, reached only through
``--endpoint-url`` and the loader's ``endpoint_url`` setting): generated recordings with YOLO labels under a dataset
yaml that splits them at random, and a COCO JSON of the same images.  The lists written locally name the images'
s3:// URLs, every clip is whole on one side, the subset lists name the JSON's URL as their source, the new splits
load with the loader at that endpoint, and nothing is written into the bucket."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import cv2
import pytest

import s3server
from recordings import write_recordings
from yolo_data.build import build_loader
from yolo_data.cli import main as cli_main
from yolo_data.settings import Settings
from yolo_data.storage import remote

minio = pytest.importorskip("minio")

s3_server = s3server.s3_server  # the session's server, in this module's namespace
BUCKET, PREFIX = "splits", "rec"
CLIPS, FRAMES = 8, 4
ROOT = f"s3://{BUCKET}/{PREFIX}"


def clip_of(path: str) -> int:
    return int(re.search(r"clip(\d+)_", path).group(1))


def coco_json(files, classes: int = 3) -> dict:
    """A COCO JSON of ``files`` (their names relative to the images folder beside it): each YOLO label row as an
    annotation, categories 1..classes named a, b, c."""
    images, anns = [], []
    for i, f in enumerate(files):
        h, w = cv2.imread(f).shape[:2]
        images.append({"id": i + 1, "file_name": Path(f).name, "width": w, "height": h})
        for row in Path(f.replace("/images/", "/labels/")[:-4] + ".txt").read_text().split("\n"):
            if row.strip():
                c, x, y, bw, bh = map(float, row.split())
                anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(c) + 1, "iscrowd": 0,
                             "bbox": [(x - bw / 2) * w, (y - bh / 2) * h, bw * w, bh * h], "area": bw * w * bh * h})
    cats = [{"id": k + 1, "name": "abc"[k]} for k in range(classes)]
    return {"images": images, "annotations": anns, "categories": cats}


@pytest.fixture(scope="module")
def bucket(s3_server, tmp_path_factory):
    """s3://splits/rec: images/ and labels/ of 8 clips of 4 frames, data.yaml whose train and val lists (relative
    lines) draw the frames at random, and coco.json of the same images."""
    local = tmp_path_factory.mktemp("rec")
    files = write_recordings(local, clips=CLIPS, frames=FRAMES)
    order = [Path(f).name for f in files]
    random.Random(0).shuffle(order)
    (local / "train.txt").write_text("".join(f"./images/{n}\n" for n in order[8:]))
    (local / "val.txt").write_text("".join(f"./images/{n}\n" for n in order[:8]))
    (local / "data.yaml").write_text("path: .\ntrain: train.txt\nval: val.txt\nnames: [a, b, c]\n")
    (local / "coco.json").write_text(json.dumps(coco_json(files)))
    host = s3_server.endpoint_url.split("//", 1)[1]
    client = minio.Minio(host, s3_server.access_key, s3_server.secret_key, secure=False, region="us-east-1")
    if not client.bucket_exists(BUCKET):
        client.make_bucket(BUCKET)
    s3server.upload(client, local, BUCKET, PREFIX)
    return s3_server, client, [f"{ROOT}/images/{Path(f).name}" for f in files]


@pytest.fixture
def creds(bucket, monkeypatch):
    """Credentials in the environment, no endpoint anywhere but the command's and the settings' (the process's
    default would reach AWS), every listing asked anew."""
    srv, client, urls = bucket
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", srv.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", srv.secret_key)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    before = remote.options()
    remote.configure(endpoint_url=None)
    remote.forget()
    yield srv, client, urls
    remote.configure(**before.__dict__)
    remote.forget()


def split(data: str, out: Path, endpoint: str) -> int:
    return cli_main(["split", data, "--val", "0.25", "--group-by", "sequence", "--out", str(out),
                     "--endpoint-url", endpoint, "--workers", "1"])


def loads(yaml_file: Path, endpoint: str):
    """The val split of ``yaml_file`` built by the loader at ``endpoint``: its images, and its object count."""
    loader = build_loader(str(yaml_file), Settings.evaluation(batch_size=4, img_size=64, workers=0, split="val",
                                                              endpoint_url=endpoint))
    ds = loader.dataset
    return sorted(ds.im_files), sum(len(ds.store.labels_of(i)) for i in range(len(ds)))


def whole_clips(lists) -> None:
    side = {f: n for n, files in lists.items() for f in files}
    for c in range(CLIPS):
        assert len({n for f, n in side.items() if clip_of(f) == c}) == 1, c


def test_split_of_a_yaml_in_a_bucket_lists_urls_and_keeps_clips_whole(creds, tmp_path, capsys):
    srv, client, urls = creds
    before = s3server.bucket_digest(client, BUCKET)
    out = tmp_path / "out"
    assert split(f"{ROOT}/data.yaml", out, srv.endpoint_url) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert f"{len(urls)} images in {CLIPS} groups" in printed and "groups that straddle splits: 0" in printed
    lists = {n: (out / f"{n}.txt").read_text().split() for n in ("train", "val")}
    assert sorted(lists["train"] + lists["val"]) == sorted(urls)  # the images' URLs, each once
    whole_clips(lists)
    assert len(lists["val"]) == 2 * FRAMES  # two whole clips of eight
    summary = json.loads((out / "split.json").read_text())
    assert summary["data"] == f"{ROOT}/data.yaml" and summary["straddling_groups"] == 0
    images, objects = loads(out / "data.yaml", srv.endpoint_url)
    assert images == sorted(lists["val"]) and objects >= len(images)
    assert s3server.bucket_digest(client, BUCKET) == before  # nothing written into the bucket


def test_split_of_a_coco_json_in_a_bucket_writes_subset_lists_of_its_url(creds, tmp_path, capsys):
    srv, client, urls = creds
    before = s3server.bucket_digest(client, BUCKET)
    out = tmp_path / "out"
    assert split(f"{ROOT}/coco.json", out, srv.endpoint_url) == 0, capsys.readouterr().err
    subsets = {n: json.loads((out / f"{n}.subset.json").read_text()) for n in ("train", "val")}
    for sub in subsets.values():
        assert sub["source"] == [f"{ROOT}/coco.json"]
    lists = {n: sub["images"] for n, sub in subsets.items()}
    assert sorted(lists["train"] + lists["val"]) == sorted(urls)
    whole_clips(lists)
    images, objects = loads(out / "data.yaml", srv.endpoint_url)
    assert images == sorted(lists["val"]) and objects >= len(images)
    assert s3server.bucket_digest(client, BUCKET) == before
