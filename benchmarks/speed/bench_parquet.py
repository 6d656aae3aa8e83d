"""Parquet tables read in place: the loader's peak memory while it reads a table of a few GB, against
the table's size, and its throughput against the same images as JPEG files on disk.

    python benchmarks/speed/run.py parquet                              # 2,000 generated images, a ~3 GB table
    python benchmarks/speed/run.py parquet --images 64 --copies 2 --train-batches 2   # a quick run

What is measured:

* The table: the generated set's images (common.synthetic_set) in the Hugging Face Hub's layout
  (``image`` {bytes, path}, ``width``, ``height``, ``objects`` {bbox in COCO pixels, category}),
  written ``--copies`` times over (the rows of each copy are the same bytes; what matters here is how
  much the loader holds of a table of that size), ``--row-group`` rows a row group (the ``datasets``
  library writes 100 images a group), no compression (JPEG bytes do not compress).  It lives in a
  temporary folder under ``--tmp`` and is deleted at the end.
* Memory: in a fresh child process each, (1) the first scan of the table (the label cache built: the
  table read twice, a row group at a time) and (2) an evaluation epoch over every row (row order,
  batch 16, ``--workers`` workers, no image cache).  The parent samples /proc/<pid>/smaps_rollup of
  the child and all its descendants every 0.05 s and reports the peaks of the summed RSS and PSS.  The
  same epoch over the set's JPEG files is the reference: what any loader of these images holds.
* Throughput, images a second in a fresh child each, the page cache warm: an evaluation epoch of the
  set's images as JPEG files and as a table of one copy; and ``--train-batches`` shuffled training
  batches (mosaic, hyp.scratch-low) of each: in random order most images need a row group of their own,
  read whole (only the image column), which is the cost of reading a table in place at random.

Output: a markdown report on stdout, progress on stderr, the results file (common.write_result).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import log  # noqa: E402

SAMPLE_S = 0.05


def write_table(data_yaml: Path, out: Path, copies: int, row_group: int) -> dict:
    """The generated set as a Hub-layout table written ``copies`` times over; returns its numbers."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from yolo_data import LoadImagesAndLabels

    ds = LoadImagesAndLabels(str(data_yaml.parent / "images" / "train"), 640)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    objects_type = pa.struct([("bbox", pa.list_(pa.list_(pa.float64(), 4))), ("category", pa.list_(pa.int64()))])
    schema = pa.schema([("image", image_type), ("width", pa.int32()), ("height", pa.int32()), ("objects", objects_type)])
    rows = 0
    with pq.ParquetWriter(out, schema, compression="none") as writer:
        for _ in range(copies):
            for lo in range(0, len(ds.im_files), row_group):
                images, widths, heights, objects = [], [], [], []
                for f, labels, (w, h) in zip(ds.im_files[lo:lo + row_group], ds.labels[lo:lo + row_group],
                                             ds.shapes[lo:lo + row_group]):
                    xywh = labels[:, 1:5].astype(np.float64)
                    boxes = np.concatenate([(xywh[:, :2] - xywh[:, 2:] / 2) * (w, h), xywh[:, 2:] * (w, h)], 1)
                    images.append({"bytes": Path(f).read_bytes(), "path": Path(f).name})
                    widths.append(int(w))
                    heights.append(int(h))
                    objects.append({"bbox": boxes.tolist(), "category": labels[:, 0].astype(int).tolist()})
                writer.write_table(pa.table({"image": pa.array(images, image_type), "width": pa.array(widths, pa.int32()),
                                             "height": pa.array(heights, pa.int32()),
                                             "objects": pa.array(objects, objects_type)}, schema=schema),
                                   row_group_size=row_group)
                rows += len(images)
    return {"rows": rows, "bytes": out.stat().st_size, "row_groups": pq.ParquetFile(out).metadata.num_row_groups}


def child(mode: str, path: str, workers: int, batches: int) -> None:
    """One measured run in this process (started by the parent): prints a JSON line of its numbers."""
    import cv2
    cv2.setNumThreads(0)
    from yolo_data import create_dataloader
    from yolo_data.labels.split import load_split

    t0 = time.perf_counter()
    if mode == "scan":
        split = load_split(path)
        print(json.dumps({"seconds": time.perf_counter() - t0, "images": len(split.store), "built": split.built}))
        return
    augment = mode == "train"
    hyp = str(common.HYP_FILE) if augment else None
    loader, _ = create_dataloader(path, 640, 16, 32, hyp=hyp, augment=augment, workers=workers, shuffle=augment,
                                  seed=0)
    images, t0 = 0, time.perf_counter()
    for k, (imgs, *_rest) in enumerate(loader):
        images += len(imgs)
        if batches and k + 1 >= batches:
            break
    print(json.dumps({"seconds": time.perf_counter() - t0, "images": images}))


def measured(mode: str, path: Path, args) -> dict:
    """A child's numbers and the peaks of its process tree's summed RSS and PSS (MiB)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(path), "--workers", str(args.workers),
           "--child-batches", str(args.train_batches if mode == "train" else 0)]
    peak = {"Rss": 0, "Pss": 0}
    with common.popen_tree(cmd, stdout=subprocess.PIPE, text=True) as proc:
        while proc.poll() is None:
            total = {"Rss": 0, "Pss": 0}
            for pid in [proc.pid] + common.descendants(proc.pid):
                roll = common.smaps_rollup(pid)
                for k in total:
                    total[k] += roll.get(k, 0)
            peak = {k: max(peak[k], total[k]) for k in peak}
            time.sleep(SAMPLE_S)
        out = proc.stdout.read()
    if proc.returncode:
        raise SystemExit(f"{mode} {path}: the child failed (exit {proc.returncode})")
    got = json.loads(out.strip().splitlines()[-1])
    got.update(peak_rss_mib=peak["Rss"] / 1024, peak_pss_mib=peak["Pss"] / 1024)
    got["img_s"] = got["images"] / got["seconds"] if got.get("seconds") else None
    log(f"{mode} {path.name}: {json.dumps(got)}")
    return got


def report(args, table: dict, one: dict, runs: dict) -> None:
    gib = table["bytes"] / 2**30
    print(f"### Parquet tables read in place: {table['rows']:,} rows, {gib:.2f} GiB, {table['row_groups']} row groups "
          f"of {args.row_group}\n")
    print(f"{common.machine()}; {args.workers} workers, batch 16, imgsz 640; peaks sampled every {SAMPLE_S} s\n")
    print("| run | seconds | img/s | peak RSS of the tree (MiB) | peak PSS of the tree (MiB) | PSS above the JPEG "
          "files' epoch (MiB) | that, of the table's size |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = runs["evaluation epoch, JPEG files"]["peak_pss_mib"]
    for name, r in runs.items():
        above = r["peak_pss_mib"] - base
        size = (table if "big" in name else one)["bytes"] / 2**20
        tabled = "table" in name
        print(f"| {name} | {r['seconds']:.1f} | {r['img_s'] or 0:.0f} | {r['peak_rss_mib']:.0f} | {r['peak_pss_mib']:.0f} | "
              f"{f'{above:.0f}' if tabled else '-'} | {f'{above / size:.1%}' if tabled else '-'} |")
    print(f"\nThe table of one copy (the throughput rows): {one['rows']:,} rows, {one['bytes'] / 2**20:.0f} MiB.  "
          "Each run is a fresh process tree; the scan runs in the main process alone (no DataLoader workers).")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2000, help="generated images (default 2000)")
    ap.add_argument("--copies", type=int, default=10, help="times the images are written into the big table")
    ap.add_argument("--row-group", type=int, default=100, help="rows a row group (default 100, as datasets writes)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--train-batches", type=int, default=20, help="shuffled training batches timed (default 20)")
    ap.add_argument("--tmp", type=Path, default=None, help="where the tables are written (deleted at the end)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--child-batches", type=int, default=0, help=argparse.SUPPRESS)
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.workers, args.child_batches)
        return 0
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise SystemExit('bench_parquet needs pyarrow: pip install "yolo-data[parquet]"') from None
    data = common.synthetic_set(args.images)
    folder = data.parent / "images" / "train"
    tmp = Path(tempfile.mkdtemp(prefix="bench_parquet_", dir=args.tmp))
    try:
        big, small = tmp / "big" / "train.parquet", tmp / "one" / "train.parquet"
        big.parent.mkdir()
        small.parent.mkdir()
        log(f"writing {args.copies} copies of {args.images} images into {big} ...")
        table = write_table(data, big, args.copies, args.row_group)
        one = write_table(data, small, 1, args.row_group)
        common.warm_page_cache(tmp, folder)
        runs = {}
        runs["scan, the big table"] = measured("scan", big, args)
        runs["evaluation epoch, the big table"] = measured("eval", big, args)
        measured("scan", folder, args)  # the JPEG files' label cache, outside the timing
        measured("scan", small, args)
        runs["evaluation epoch, JPEG files"] = measured("eval", folder, args)
        runs["evaluation epoch, table of one copy"] = measured("eval", small, args)
        runs["shuffled training, JPEG files"] = measured("train", folder, args)
        runs["shuffled training, table of one copy"] = measured("train", small, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(args, table, one, runs)
    common.write_result("parquet", {"table": table, "table_of_one": one, "runs": runs}, args,
                        datasets=[f"synthetic-{args.images}x{args.copies}"])
    common.report_end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
