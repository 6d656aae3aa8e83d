"""Parquet tables in the Hugging Face Hub's layout, read in place: an ``image`` column of {bytes, path} and
an ``objects`` column of boxes and categories, written here with pyarrow from the bundled sample and
coco128.  Their batches equal those of the same images and boxes as YOLO .txt files on disk, from a
local file and from a bucket; a missing pyarrow and a corrupt image cell are named; memory stays
bounded by the row groups kept, whatever the table's size.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import s3server  # noqa: E402
from conftest import run_all  # noqa: E402
from s3server import upload  # noqa: E402
from yolo_data import LoadImagesAndLabels, create_dataloader  # noqa: E402
from yolo_data.storage import Storage  # noqa: E402
from yolo_data.storage.parquetrows import ParquetRowsBackend, row_url  # noqa: E402

s3_server, store, s3 = s3server.s3_server, s3server.store, s3server.s3  # the fixtures
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "yolo_data" / "data"
SAMPLE_NAMES = ["circle", "rectangle", "triangle"]


def hub_table(ds, out: Path, bbox_format: str = "coco", row_group_size: int = 5, sizes: bool = True,
              corrupt: int = -1, names=SAMPLE_NAMES) -> Path:
    """Write dataset ``ds``'s images and boxes as the Hub lays them out: image {bytes, path}, width,
    height, objects {bbox, category} (a struct of lists, as ``datasets`` writes a Sequence of dicts), the
    class names as a ClassLabel in the ``huggingface`` schema metadata.  ``corrupt``: that row's image
    bytes are garbage."""
    images, objects, widths, heights = [], [], [], []
    for i, (f, labels) in enumerate(zip(ds.im_files, ds.labels)):
        h, w = (int(v) for v in ds.shapes[i][::-1])
        data = Path(f).read_bytes() if i != corrupt else b"not an image at all" * 10
        cls, xywh = labels[:, 0].astype(int), labels[:, 1:5].astype(np.float64)
        if bbox_format == "yolo":
            boxes = labels[:, 1:5].tolist()  # float32 values, kept exactly in a float column
        else:
            xy = (xywh[:, :2] - xywh[:, 2:] / 2) * (w, h)
            wh = xywh[:, 2:] * (w, h)
            boxes = (np.concatenate([xy, wh], 1) if bbox_format == "coco" else np.concatenate([xy, xy + wh], 1)).tolist()
        images.append({"bytes": data, "path": os.path.basename(f)})
        objects.append({"bbox": boxes, "category": cls.tolist()})
        widths.append(w)
        heights.append(h)
    box_type = pa.list_(pa.list_(pa.float32() if bbox_format == "yolo" else pa.float64(), 4))
    table = pa.table({
        "image": pa.array(images, pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        **({"width": pa.array(widths, pa.int32()), "height": pa.array(heights, pa.int32())} if sizes else {}),
        "objects": pa.array(objects, pa.struct([("bbox", box_type), ("category", pa.list_(pa.int64()))]))})
    features = {"image": {"_type": "Image"}, "objects": {"_type": "Sequence", "feature": {
        "bbox": {"_type": "Sequence", "length": 4, "feature": {"_type": "Value", "dtype": "float32"}},
        "category": {"_type": "ClassLabel", "names": list(names)}}}}
    table = table.replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": features}}).encode()})
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out, row_group_size=row_group_size)
    return out


@pytest.fixture
def sample(tmp_path):
    """(an image folder, its dataset): the bundled sample's train images with their boxes only (a table's
    objects are boxes: its polygons would change training's boxes) as YOLO .txt files, each number
    written so that it reads back as the same float32."""
    src = LoadImagesAndLabels(str(SAMPLE / "sample" / "images" / "train"), 64)
    folder, labels = tmp_path / "boxes" / "images", tmp_path / "boxes" / "labels"
    labels.mkdir(parents=True)
    shutil.copytree(SAMPLE / "sample" / "images" / "train", folder)
    for f, rows in zip(src.im_files, src.labels):
        lines = [" ".join([str(int(r[0]))] + [repr(float(v)) for v in r[1:]]) for r in rows]
        (labels / Path(f).name).with_suffix(".txt").write_text("\n".join(lines) + "\n")
    ref = LoadImagesAndLabels(str(folder), 64)
    assert all(np.array_equal(a, b) for a, b in zip(ref.labels, src.labels))
    return folder, ref


def table_yaml(path: Path, table: Path, bbox_format: str) -> Path:
    """A dataset yaml whose splits are a table yaml (a split entry) naming ``table`` and its box format."""
    path.write_text(f"parquet: {table.name}\nbbox_format: {bbox_format}\n")
    data = path.with_name("data.yaml")
    data.write_text(f"path: .\ntrain: {path.name}\nval: {path.name}\nnames: {SAMPLE_NAMES}\n")
    return data


def all_batches(path, workers=0, augment=False, **kw):
    loader, ds = create_dataloader(str(path), 64, 4, 32, workers=workers, augment=augment, seed=5, shuffle=augment,
                                   **kw)
    return [(a.clone(), b.clone(), list(p), s) for a, b, p, s in loader], ds


def image_name(path: str) -> str:
    """A file's name, or the name a row URL gives its image."""
    return path.rpartition("&name=")[2] if "#row=" in path else os.path.basename(path)


def same_batches(got, want):
    assert len(got) == len(want) > 0
    for (a, ta, pa_, sa), (b, tb, pb, sb) in zip(got, want):
        assert a.dtype == b.dtype == torch.uint8 and torch.equal(a, b)
        assert ta.dtype == tb.dtype == torch.float32 and torch.equal(ta, tb)
        assert sa == sb
        assert [image_name(p) for p in pa_] == [image_name(p) for p in pb]


def test_a_hub_table_gives_the_batches_of_the_same_yolo_files_bit_for_bit(sample, tmp_path):
    folder, ref = sample
    table = hub_table(ref, tmp_path / "t" / "train.parquet", "yolo", row_group_size=5)  # 4 row groups of 16 rows
    assert pq.ParquetFile(table).metadata.num_row_groups == 4
    entry = table_yaml(tmp_path / "t" / "train.yaml", table, "yolo")
    want, _ = all_batches(folder)
    got, ds = all_batches(entry)
    assert ds.split_labels.kind == "parquet" and ds.names == SAMPLE_NAMES
    assert ds.im_files[0].startswith(f"parquet+file://{table}#row=00&col=image&size=")
    assert ds.label_files[0] == str(table)
    same_batches(got, want)
    for workers in (0, 2):  # training: mosaic and all, the same seed; the cache read back
        got, ds = all_batches(entry, workers=workers, augment=True)
        assert not ds.split_labels.built
        want, _ = all_batches(folder, workers=workers, augment=True)
        same_batches(got, want)


def test_box_formats_give_the_same_boxes_and_are_named(sample, tmp_path):
    folder, ref = sample
    want = np.concatenate(ref.labels)
    for fmt in ("coco", "xyxy"):
        table = hub_table(ref, tmp_path / fmt / "t.parquet", fmt, sizes=fmt == "coco")
        ds = LoadImagesAndLabels(str(table_yaml(tmp_path / fmt / "t.yaml", table, fmt)), 64)
        assert ds.split_labels.kind == "parquet"
        np.testing.assert_allclose(np.concatenate(ds.labels), want, atol=2e-6)
    plain = LoadImagesAndLabels(str(tmp_path / "coco" / "t.parquet"), 64)  # coco is the default
    assert plain.names == SAMPLE_NAMES  # from the schema's ClassLabel
    np.testing.assert_allclose(np.concatenate(plain.labels), want, atol=2e-6)
    bad = table_yaml(tmp_path / "coco" / "bad.yaml", tmp_path / "coco" / "t.parquet", "cxcywh")
    with pytest.raises(ValueError, match=r"bbox_format 'cxcywh' is not one of coco, xyxy, yolo"):
        LoadImagesAndLabels(str(bad), 64)


def test_a_corrupt_image_cell_is_named_and_left_out(sample, tmp_path):
    folder, ref = sample
    table = hub_table(ref, tmp_path / "t.parquet", corrupt=3)
    ds = LoadImagesAndLabels(str(table), 64)
    assert len(ds.im_files) == len(ref.im_files) - 1
    assert not any("#row=03&" in f for f in ds.im_files)
    problems = [p for p in ds.split_labels.problems if "#row=03&" in p.file]
    assert problems and problems[0].dropped and "not an image PIL can identify" in problems[0].reason


def test_a_table_in_a_bucket_gives_the_batches_of_the_local_one(sample, tmp_path, s3):
    client, _ = s3
    folder, ref = sample
    table = hub_table(ref, tmp_path / "t" / "train.parquet", "coco", row_group_size=3)
    upload(client, tmp_path / "t", "data", "parquet")
    url = "s3://data/parquet/train.parquet"
    loader, ds = create_dataloader(url, 64, 4, 32, workers=0)
    assert ds.im_files[0].startswith(f"parquet+{url}#row=00&")
    rows = ds.storage.backend_for(ds.im_files[0])
    before = rows.counts()["row_groups"]
    got = [(a.clone(), b.clone(), list(p), s) for a, b, p, s in loader]
    assert rows.counts()["row_groups"] - before <= 6  # 16 rows in 6 groups of 3: each read once at most
    want, _ = all_batches(table)
    same_batches(got, want)
    got, _ = all_batches(url, workers=2, augment=True)
    want, _ = all_batches(table, workers=2, augment=True)
    same_batches(got, want)


def test_a_missing_pyarrow_is_named_with_its_extra(sample, tmp_path):
    folder, ref = sample
    table = hub_table(ref, tmp_path / "t.parquet")
    code = ("import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None\n"
            "from yolo_data import LoadImagesAndLabels\n"
            f"LoadImagesAndLabels({str(table)!r}, 64)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = run_all([sys.executable, "-c", code], timeout=120, capture_output=True, text=True, env=env)
    assert out.returncode != 0
    assert 'ModuleNotFoundError: Parquet tables are read with pyarrow, which is not installed' in out.stderr
    assert 'pip install "yolo-data[parquet]"' in out.stderr


def test_reading_a_table_much_larger_than_the_row_groups_kept_holds_those_only(tmp_path):
    """64 row groups of 8 rows of 64 kB cells (32 MB); every row read twice through the backend while
    pyarrow's allocations stay below what 4 row groups and the one being read take."""
    rng = np.random.default_rng(0)
    cell = 64 * 1024
    rows = [{"bytes": rng.bytes(cell), "path": f"{i}.jpg"} for i in range(512)]
    table = pa.table({"image": pa.array(rows, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))})
    path = tmp_path / "big.parquet"
    pq.write_table(table, path, row_group_size=8, compression="none")
    del table, rows
    backend = ParquetRowsBackend(inner=Storage().backend_for, groups_kept=4)
    urls = [row_url(str(path), i, "image", cell, f"{i}.jpg", 3) for i in range(512)]
    group_bytes = 8 * cell
    base = pa.total_allocated_bytes()
    peak = 0
    for _ in range(2):
        for k in range(0, 512, 16):  # a batch of 16 rows: 2 row groups
            got = backend.read_many(urls[k:k + 16])
            assert all(isinstance(g, bytes) and len(g) == cell for g in got)
            peak = max(peak, pa.total_allocated_bytes() - base)
            groups, held = backend.held()
            assert groups <= 4 and held <= 4 * group_bytes + 4096
    assert backend.counts()["row_groups"] == 128  # each group read once per pass: the batch's rows share it
    assert peak <= 6 * group_bytes < path.stat().st_size / 8


def test_a_warm_start_reads_no_row_and_the_cache_follows_the_table(sample, tmp_path, monkeypatch):
    from yolo_data.formats import parquet
    from yolo_data.labels.split import load_split
    folder, ref = sample
    table = hub_table(ref, tmp_path / "t.parquet")
    first = load_split(str(table))
    assert first.built and len(first.store) == 16 and first.names == SAMPLE_NAMES
    listed = []
    real = parquet._list_table
    monkeypatch.setattr(parquet, "_list_table", lambda *a: listed.append(a[0]) or real(*a))
    again = load_split(str(table))
    assert not again.built and listed == [] and again.label_file_of("x") == str(table)
    assert np.array_equal(again.store.labels, first.store.labels)
    hub_table(ref, table, corrupt=0)  # the table rewritten: its size and tag change, so every row's
    third = load_split(str(table))
    assert third.built and listed == [str(table)] and len(third.store) == 15


def test_a_table_dataset_reaches_spawned_workers(sample, tmp_path):
    """The dataset and its rows' backend are pickled into spawned DataLoader workers; each makes its own
    row groups anew there."""
    folder, ref = sample
    table = hub_table(ref, tmp_path / "t.parquet", row_group_size=4)
    loader, ds = create_dataloader(str(table), 64, 4, 32, workers=0)
    want = [(a.clone(), b.clone(), list(p), s) for a, b, p, s in loader]
    spawned = DataLoader(ds, batch_size=4, sampler=loader.sampler, collate_fn=loader.collate_fn, num_workers=2,
                         multiprocessing_context="spawn", timeout=120)
    got = [(a.clone(), b.clone(), list(p), s) for a, b, p, s in spawned]
    same_batches(got, want)


def test_coco128_as_a_hub_table_in_coco_boxes_gives_its_yolo_batches_bit_for_bit(coco128, tmp_path):
    """The Hub's default box format (x, y, w, h pixels) from coco128's .txt boxes: the same float32 rows
    back, no warning for boxes that touch an edge by the rounding of their 6 decimals (as in the .txt
    files), and the evaluation batches of the .txt files."""
    folder = coco128 / "images" / "train2017"
    ref = LoadImagesAndLabels(str(folder), 64)
    table = hub_table(ref, tmp_path / "t" / "train.parquet", "coco", row_group_size=16, names=[str(i) for i in range(80)])
    ds = LoadImagesAndLabels(str(table), 64)
    assert [p for p in ds.split_labels.problems] == []
    assert all(np.array_equal(a, b) for a, b in zip(ds.labels, ref.labels))
    got, _ = all_batches(table)
    want, _ = all_batches(folder)
    same_batches(got, want)


def test_a_folder_of_tables_plain_binary_images_and_one_band(sample, tmp_path):
    """A folder of two tables (the Hub shards a split: train-00000-of-00002.parquet, ...), the second with
    a plain binary image column, read as one split in row order; grayscale batches (channels=1) equal
    those of the .txt files."""
    folder, ref = sample
    whole = pq.read_table(hub_table(ref, tmp_path / "whole.parquet", "yolo"))
    shards = tmp_path / "shards"
    shards.mkdir()
    pq.write_table(whole.slice(0, 10), shards / "train-00000-of-00002.parquet", row_group_size=4)
    second = whole.slice(10).set_column(0, "image", whole.slice(10).column("image").combine_chunks().field("bytes"))
    pq.write_table(second, shards / "train-00001-of-00002.parquet", row_group_size=4)
    (shards / "train.yaml").write_text("parquet: .\nbbox_format: yolo\n")
    data = tmp_path / "data.yaml"
    data.write_text(f"path: {shards}\ntrain: train.yaml\nval: train.yaml\nnames: {SAMPLE_NAMES}\nchannels: 1\n")
    plain = LoadImagesAndLabels(str(shards), 64)  # the folder itself: coco boxes by default, the same rows
    assert len(plain.im_files) == 16 and "train-00001-of-00002.parquet#row=5&" in plain.im_files[-1]
    assert plain.im_files[-1].endswith("&name=5.jpg")  # no name in a binary column: its row and its bytes' suffix
    ref_data = tmp_path / "ref.yaml"
    ref_data.write_text(f"path: {folder.parent}\ntrain: images\nval: images\nnames: {SAMPLE_NAMES}\nchannels: 1\n")
    got, ds = all_batches(data)
    want, _ = all_batches(ref_data)
    assert got[0][0].shape[1] == 1
    for (a, ta, _, sa), (b, tb, _, sb) in zip(got, want):
        assert torch.equal(a, b) and torch.equal(ta, tb) and sa == sb


def test_what_a_table_lacks_is_named(sample, tmp_path):
    folder, ref = sample
    table = pq.read_table(hub_table(ref, tmp_path / "t.parquet"))
    pq.write_table(table.drop_columns(["objects"]), tmp_path / "bare.parquet")
    with pytest.raises(ValueError, match=r"bare.parquet: no column 'objects' \(a table yaml's image_column, "
                                         r"objects_column\); its columns: image, width, height"):
        LoadImagesAndLabels(str(tmp_path / "bare.parquet"), 64)
    (tmp_path / "odd.yaml").write_text("parquet: t.parquet\nbox_format: xyxy\n")
    (tmp_path / "data.yaml").write_text(f"path: .\ntrain: odd.yaml\nval: odd.yaml\nnames: {SAMPLE_NAMES}\n")
    with pytest.raises(ValueError, match=r"odd.yaml: unknown keys \['box_format'\] \(a table yaml has parquet, "
                                         r"bbox_format, image_column, objects_column\)"):
        LoadImagesAndLabels(str(tmp_path / "data.yaml"), 64)


def test_a_row_name_never_holds_the_url_separator_or_a_nul(sample, tmp_path):
    folder, ref = sample
    table = pq.read_table(hub_table(ref, tmp_path / "t.parquet"))
    images = table.column("image").to_pylist()
    images[0]["path"], images[1]["path"] = "dir/a&b.jpg", "c\0d.png"
    odd = table.set_column(0, "image", pa.array(images, table.schema.field("image").type))
    pq.write_table(odd, tmp_path / "odd.parquet")
    ds = LoadImagesAndLabels(str(tmp_path / "odd.parquet"), 64)
    assert ds.im_files[0].endswith("&name=a_b.jpg") and ds.im_files[1].endswith("&name=c_d.png")
    assert len(ds.im_files) == 16 and all("\0" not in f for f in ds.im_files)
