"""How long does the dataset report take on a million images, from the label cache?

    python benchmarks/speed/run.py report --root ../bench-data/million --images 1000000
    python benchmarks/speed/run.py report --root ../bench-data/m300 --images 300 --repeats 1   # a quick run

The set is bench_million.py's (``--root`` is shared with it: hard links to the coco128 and bccd photos,
one flat ``train2017`` folder, reused when complete).  The label cache is built once, outside the
timing (that is the scan, measured by ``run.py million``).  Then, ``--repeats`` times, each in this
process after the first has warmed the page cache:

* ``yolo_data.report.compose.make_report(yaml, duplicates=False, pictures=False)``, split into reading the
  split (listing, fingerprint of the files' sizes and times, cache load: no label file or image is
  opened) and the figures (datastats over the flat arrays);
* writing the HTML page and the JSON file (their sizes are shown);
* for comparison, the same report with pictures (two training batches and the rarest classes'
  objects: the only images a report without the duplicate search reads).

The duplicate search reads every image; its speed per image is ``run.py duplicates``.
Output: a markdown table on stdout, progress on stderr.
"""
from __future__ import annotations

import argparse
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

from yolo_data.report import compose as rp  # noqa: E402
from yolo_data.labels.split import load_split  # noqa: E402


def measure(yaml: Path, out: Path, pictures: bool) -> dict:
    options = rp.ReportOptions(duplicates=False, pictures=pictures, progress=False)
    t0 = time.perf_counter()
    rp.read_splits(yaml, options)
    t1 = time.perf_counter()
    rep = rp.make_report(yaml, options)
    t2 = time.perf_counter()
    rp.write(rep, out)
    t3 = time.perf_counter()
    figures_s = (t2 - t1) - (t1 - t0)  # make_report reads the split again: take that part out
    return {"read_split_s": t1 - t0, "figures_s": max(figures_s, 0.0), "report_s": t2 - t1, "write_s": t3 - t2,
            "html_bytes": rep.html_file.stat().st_size, "json_bytes": rep.json_file.stat().st_size,
            "images": rep.figures["splits"]["train"]["images"],
            "objects": rep.figures["splits"]["train"]["objects"], "pictures": len(rep.pictures)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="bench_million's folder for the generated set (outside the checkout)")
    ap.add_argument("--images", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sources", nargs="+", type=Path, default=None, help="default: coco128 and bccd photos")
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    bench_million.claim_root(root)
    pairs = bench_million.copy_sources(root, args.sources or bench_million.default_sources())
    images = bench_million.build_set(root, args.images, pairs)
    yaml = root / "report.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/{bench_million.SPLIT}\nnames: {[str(i) for i in range(80)]}\n")
    t0 = time.perf_counter()
    s = load_split(images, names=[str(i) for i in range(80)])
    log(f"label cache {'built' if s.built else 'reused'} in {time.perf_counter() - t0:.1f} s: {len(s.store):,} images")
    runs = {"no pictures": [], "pictures": []}
    with tempfile.TemporaryDirectory(prefix="yolo_data-report-") as tmp:
        measure(yaml, Path(tmp) / "warm", False)  # warms the page cache (listing, cache file)
        for k in range(args.repeats):
            for kind in runs:  # alternating
                r = measure(yaml, Path(tmp) / f"r{k}", kind == "pictures")
                log(f"  {kind}: {r}")
                runs[kind].append(r)
    med = {kind: common.medians(rs) for kind, rs in runs.items()}
    m = med["no pictures"]
    print(f"\n### Dataset report of {m['images']:,} images ({m['objects']:,} objects), from the label cache\n")
    print(f"{common.machine()}; medians of {args.repeats} (min–max)\n")
    print("| step | seconds |\n| --- | --- |")
    for key, what in (("read_split_s", "read the split (listing, fingerprint, cache load)"),
                      ("figures_s", "the figures (counts, classes, sizes, across splits)"),
                      ("report_s", "make_report, without duplicates or pictures"),
                      ("write_s", "write the HTML page and the JSON file")):
        print(f"| {what} | {common.fmt_range([r[key] for r in runs['no pictures']], 2)} |")
    print(f"| make_report with pictures (2 training batches, rarest classes) | "
          f"{common.fmt_range([r['report_s'] for r in runs['pictures']], 2)} |")
    print(f"\nHTML page {m['html_bytes'] / 1e3:,.0f} kB, JSON {m['json_bytes'] / 1e3:,.0f} kB "
          f"(with pictures: {med['pictures']['html_bytes'] / 1e3:,.0f} kB)")
    common.write_result("report", {"runs": runs, "medians": med}, args, datasets=[f"{args.images}"])
    common.report_end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
