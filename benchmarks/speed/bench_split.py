"""How long does ``yolo-data split`` take on 100,000 images, from the label cache?

    python benchmarks/speed/run.py split --root ../bench-data/m100k --images 100000
    python benchmarks/speed/run.py split --root ../bench-data/m300 --images 300 --repeats 1   # a quick run

The set is bench_million.py's (``--root`` is shared with it: hard links to the coco128 and bccd photos, numbered
``000000000000.jpg`` on, one flat ``train2017`` folder, reused when complete).  Its numbered names read as one long
recording, so the splits are grouped as a user of such data would: ``sequence`` with ``--chunk 30 --frames 2``
(pieces of 30 frames, 2 frames left out after each cut), and ``regex`` groups of 100 consecutive names.  The label
cache is built once, outside the timing.  Then, ``--repeats`` times, alternating between the two ways, each step
timed apart: reading the split (listing, fingerprint, cache load), grouping, the assignment of groups to splits,
the summary, writing the lists.  ``similar`` reads every image; its cost per image is ``run.py duplicates``.

With ``--peer-python`` (a Python with Ultralytics), Ultralytics' ``autosplit`` runs on the same folder in that
Python, in turn with the others: it draws images at random, without labels or groups, and writes its lists into the
dataset's folder (this benchmark's own).  Output: a markdown table on stdout, progress on stderr.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
sys.path.insert(0, str(HERE))  # bench_million's set
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import log  # noqa: E402
import bench_million  # noqa: E402

from yolo_data.labels.split import load_split  # noqa: E402
from yolo_data.splits.assign import assign_groups  # noqa: E402
from yolo_data.splits.groups import GroupBy, group_images  # noqa: E402
from yolo_data.splits.plan import SplitOptions, SplitPlan, pool_images, summary_figures  # noqa: E402
from yolo_data.splits.write import write_split  # noqa: E402

WAYS = {"sequence": GroupBy(("sequence",), frames=2, chunk=30), "regex": GroupBy((r"regex:(\d{10})\d\d\.jpg$",))}
PEER = """
import sys, time
from ultralytics.data.split import autosplit
t0 = time.perf_counter()
autosplit(sys.argv[1], weights=(0.9, 0.1, 0.0))
print(time.perf_counter() - t0)
"""


def measure(yaml: Path, out: Path, way: str) -> dict:
    options = SplitOptions(val=0.1, group_by=WAYS[way], progress=False)
    t0 = time.perf_counter()
    pool = pool_images(yaml, options)
    t1 = time.perf_counter()
    grouping = group_images(pool.files, options.group_by)
    t2 = time.perf_counter()
    done = assign_groups(grouping.group, pool.label_image, pool.label_class, options.fractions(), 0, grouping.left_out)
    t3 = time.perf_counter()
    figures = summary_figures(pool, grouping, done.split, done.names, done.fractions, options)
    figures.update(data=str(yaml), seconds={})
    t4 = time.perf_counter()
    write_split(SplitPlan(pool, done.split, done.names, figures), out)
    t5 = time.perf_counter()
    return {"read_s": t1 - t0, "group_s": t2 - t1, "assign_s": t3 - t2, "summary_s": t4 - t3, "write_s": t5 - t4,
            "total_s": t5 - t0, "images": len(pool.files), "objects": len(pool.label_class),
            "groups": figures["groups"], "val_share": figures["splits"]["val"]["share"]}


def peer(python: str, images: Path, config: str) -> dict:
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": config}  # the child's, never this process's
    done = subprocess.run([python, "-c", PEER, str(images)], capture_output=True, text=True, timeout=1800, env=env)
    if done.returncode:
        return {"error": done.stderr[-500:]}
    return {"total_s": float(done.stdout.strip().splitlines()[-1])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="bench_million's folder for the generated set (outside the checkout)")
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sources", nargs="+", type=Path, default=None, help="default: coco128 and bccd photos")
    ap.add_argument("--peer-python", default=None, help="a Python with Ultralytics, for its autosplit")
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    bench_million.claim_root(root)
    pairs = bench_million.copy_sources(root, args.sources or bench_million.default_sources())
    images = bench_million.build_set(root, args.images, pairs)
    names = [str(i) for i in range(80)]
    yaml = root / "split.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/{bench_million.SPLIT}\nnames: {names}\n")
    t0 = time.perf_counter()
    s = load_split(images, names=names)
    log(f"label cache {'built' if s.built else 'reused'} in {time.perf_counter() - t0:.1f} s: {len(s.store):,} images")
    runs = {way: [] for way in WAYS}
    if args.peer_python:
        runs["autosplit"] = []
    with tempfile.TemporaryDirectory(prefix="yolo_data-split-") as tmp:
        measure(yaml, Path(tmp) / "warm", "sequence")  # warms the page cache (listing, cache file)
        for k in range(args.repeats):
            for kind in runs:  # alternating
                r = peer(args.peer_python, images, tmp) if kind == "autosplit" else measure(yaml, Path(tmp) / kind, kind)
                log(f"  {kind}: {r}")
                runs[kind].append(r)
    med = {kind: common.medians(rs) for kind, rs in runs.items()}
    m = med["sequence"]
    print(f"\n### yolo-data split of {m['images']:,} images ({m['objects']:,} objects), from the label cache\n")
    print(f"{common.machine()}; val 0.1; medians of {args.repeats} (min–max), seconds\n")
    print("| step | sequence, --chunk 30 --frames 2 | regex, groups of 100 names |\n| --- | --- | --- |")
    for key, what in (("read_s", "read the split (listing, fingerprint, cache load)"), ("group_s", "group"),
                      ("assign_s", "assign groups to splits"), ("summary_s", "summary figures"),
                      ("write_s", "write the lists, data.yaml, split.json"), ("total_s", "total")):
        print(f"| {what} | " + " | ".join(common.fmt_range([r[key] for r in runs[w]], 2) for w in WAYS) + " |")
    print(f"| groups | {med['sequence']['groups']:,.0f} | {med['regex']['groups']:,.0f} |")
    print(f"| val share | {med['sequence']['val_share']:.4f} | {med['regex']['val_share']:.4f} |")
    if args.peer_python:
        ok = [r["total_s"] for r in runs["autosplit"] if "error" not in r]
        print(f"\nUltralytics autosplit (random draw of images, no labels read, no groups), same folder: "
              f"{common.fmt_range(ok, 2) if ok else 'failed: ' + runs['autosplit'][0]['error']} s")
    common.write_result("split", {"runs": runs, "medians": med}, args, datasets=[f"{args.images}"])
    common.report_end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
