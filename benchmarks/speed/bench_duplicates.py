#!/usr/bin/env python
"""How fast are duplicate images found: ``fingerprint_images`` on real datasets with 1 and 2 threads
(images per second, ms per image), and ``find_duplicates`` on a million synthetic fingerprints.

    python benchmarks/speed/run.py duplicates [--datasets coco128 bccd] [--workers 1 2] [--repeats 3]
        [--n 1000000] [--near 1000]

The datasets are read from $YOLO_DATA_BENCH_DATA (default ../shared/datasets): every image of every
split folder under ``<dataset>/images``, read once beforehand so that each round starts from a warm page
cache (the fingerprint reads every byte: a cold disk would time the disk).  The groups each dataset holds
are printed too.

The synthetic search: ``--n`` random digests, DCT hashes and gradient hashes in two splits (train 80%,
val 20%), of which ``--near`` files are re-encoded copies of others (both hashes moved by 0 to 6 bits)
and ``--near`` // 10 byte copies; the report says whether each was found, and how many groups more
(random 64-bit hashes give none within the default bounds).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

import numpy as np  # noqa: E402

from yolo_data.report.dedupe import ImagePrints, find_duplicates, fingerprint_images  # noqa: E402

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def dataset_splits(root: Path):
    """{split folder name: sorted image paths} under ``root/images``."""
    return {d.name: sorted(str(p) for p in d.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            for d in sorted((root / "images").iterdir()) if d.is_dir()}


def time_fingerprints(splits, workers: int, repeats: int):
    """(seconds of each round, the last round's prints per split): all splits' files in one call."""
    paths = [p for ps in splits.values() for p in ps]
    times = []
    for _ in range(repeats):
        t, prints = common.timed(lambda: fingerprint_images(paths, workers=workers))
        times.append(t)
    out, start = {}, 0
    for name, ps in splits.items():
        part = ImagePrints(prints.digest[start:start + len(ps)], prints.phash[start:start + len(ps)],
                           prints.dhash[start:start + len(ps)], prints.ok[start:start + len(ps)])
        out[name] = (ps, part)
        start += len(ps)
    return times, out, len(prints.errors)


def flip(rng, h: np.uint64, k: int) -> np.uint64:
    for b in rng.choice(64, k, replace=False):
        h ^= np.uint64(1) << np.uint64(int(b))
    return h


def synthetic(n: int, near: int, seed: int = 0):
    """({'train': (paths, prints), 'val': ...}, the injected (copy, original) index pairs over all n)."""
    rng = np.random.default_rng(seed)
    digest = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    words = rng.integers(0, 2 ** 32, (2, n, 2), dtype=np.uint64)
    phash, dhash = (words[0, :, 0] << np.uint64(32)) | words[0, :, 1], (words[1, :, 0] << np.uint64(32)) | words[1, :, 1]
    picked = rng.choice(n, 2 * (near + near // 10), replace=False)
    originals, copies = picked[::2], picked[1::2]
    for k, (o, c) in enumerate(zip(originals, copies)):
        if k < near:
            phash[c], dhash[c] = flip(rng, phash[o], int(rng.integers(0, 7))), flip(rng, dhash[o], int(rng.integers(0, 7)))
        else:  # byte copies
            digest[c], phash[c], dhash[c] = digest[o], phash[o], dhash[o]
    cut = n * 4 // 5
    paths = [f"images/{i:07d}.jpg" for i in range(n)]
    ok = np.ones(n, bool)
    splits = {name: (paths[s], ImagePrints(digest[s], phash[s], dhash[s], ok[s]))
              for name, s in (("train", slice(0, cut)), ("val", slice(cut, n)))}
    return splits, list(zip(originals.tolist(), copies.tolist())), cut


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="*", default=["coco128", "bccd"],
                    help="dataset folders in $YOLO_DATA_BENCH_DATA (default: coco128 bccd)")
    ap.add_argument("--root", default=None, help="the datasets folder (default: $YOLO_DATA_BENCH_DATA)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="fingerprint threads to time")
    ap.add_argument("--repeats", type=int, default=3, help="rounds of each measurement (medians reported)")
    ap.add_argument("--n", type=int, default=1_000_000, help="synthetic fingerprints for find_duplicates")
    ap.add_argument("--near", type=int, default=1000, help="re-encoded copies injected among them")
    ap.add_argument("--seed", type=int, default=0)
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    results = {"fingerprint": {}, "groups": {}, "synthetic": {}}
    errors = []

    print(f"### Duplicate images: fingerprints ({', '.join(args.datasets)}) and the search over "
          f"{args.n:,} synthetic fingerprints\n")
    print(f"Fingerprints: `fingerprint_images`, every split in one call, warm page cache, median of "
          f"{args.repeats} (min-max).\n")
    print("| dataset | images | threads | seconds | images/s | ms/image |\n|---|---:|---:|---:|---:|---:|")
    found = {}
    for name in args.datasets:
        root = common.dataset(name, args.root)
        splits = dataset_splits(root)
        common.warm_page_cache(*[root / "images" / s for s in splits])
        count = sum(len(p) for p in splits.values())
        for w in args.workers:
            times, prints, failed = time_fingerprints(splits, w, args.repeats)
            if failed:
                errors.append(f"{name}: {failed} images could not be fingerprinted")
            m = common.med(times)
            results["fingerprint"][f"{name}, {w} threads"] = {"images": count, "seconds": times, "median_s": m,
                                                              "images_per_s": count / m, "ms_per_image": 1e3 * m / count}
            print(f"| {name} | {count} | {w} | {common.fmt_range(times, 3)} | {count / m:,.0f} | {1e3 * m / count:.2f} |")
        found[name] = find_duplicates(prints)
        results["groups"][name] = [{"kind": g.kind, "across": g.across,
                                    "members": [[s, i, Path(p).name] for s, i, p in g.members]} for g in found[name]]
    for name, groups in found.items():
        print(f"\n{name}: {len(groups)} group{'' if len(groups) == 1 else 's'}" + ("" if groups else "."))
        for g in groups:
            leak = ", across splits" if g.across else ""
            print(f"- {g.kind}{leak}: " + ", ".join(f"{s}/{Path(p).name}" for s, _, p in g.members))

    if args.n:
        common.log(f"making {args.n:,} synthetic fingerprints ...")
        splits, injected, cut = synthetic(args.n, args.near, args.seed)
        times, groups = [], []
        for _ in range(args.repeats):
            t, groups = common.timed(lambda: find_duplicates(splits))
            times.append(t)
        at = {(s, i): k for k, g in enumerate(groups) for s, i, _ in g.members}

        def key(i):
            return ("train", i) if i < cut else ("val", i - cut)

        hit = sum(1 for o, c in injected if key(o) in at and at.get(key(o)) == at.get(key(c)))
        extra = len(groups) - len({at[key(o)] for o, c in injected if key(o) in at})
        m = common.med(times)
        results["synthetic"] = {"n": args.n, "injected": len(injected), "found": hit, "groups": len(groups),
                                "other_groups": extra, "seconds": times, "median_s": m}
        print(f"\nSearch: `find_duplicates` over {args.n:,} synthetic fingerprints (2 splits, {len(injected)} "
              f"copies injected: {args.near} re-encoded, {len(injected) - args.near} byte copies), median of "
              f"{args.repeats} (min-max).\n")
        print("| images | seconds | injected found | other groups |\n|---:|---:|---:|---:|")
        print(f"| {args.n:,} | {common.fmt_range(times, 2)} | {hit} / {len(injected)} | {extra} |")
        if hit != len(injected):
            errors.append(f"synthetic: {len(injected) - hit} injected copies not found")
    common.write_result("duplicates", results, args, datasets=args.datasets)
    common.report_end(errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
