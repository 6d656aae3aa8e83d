#!/usr/bin/env python
"""Stress: writers of one label cache are killed with SIGKILL at random moments, again and again.

Each round starts several processes that scan the same dataset and write its cache, kills some of
them at a random moment (before, during or after the write), then checks that the file on disk is
either absent or whole and correct, that the next load_split gives exactly the reference labels, and
that temporary files of killed writers do not pile up.

    python tests/stress/kill_writers.py --rounds 200           # the long run reported in the notes
    python tests/stress/kill_writers.py --rounds 5 --quiet     # CI's short mode (tests/project/test_stress.py)
"""
import argparse
import multiprocessing as mp
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import make_dataset  # noqa: E402
from yolo_data.labels import cache  # noqa: E402
from yolo_data.labels.split import load_split  # noqa: E402


def _writer(img_dir):
    load_split(img_dir, nc=3, force=True)


def fingerprint_of(split):
    s = split.store
    return (s.labels.tobytes(), s.shapes_hw.tobytes(), s.path_bytes.tobytes(), s.label_offsets.tobytes())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    choice = random.Random(args.seed)  # the test's own generator: which writer dies, and when
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="yolo_data_stress_") as tmp:
        items = [(f"{i:04d}.jpg", (32 + i % 9, 24 + i % 5), f"{i % 3} 0.5 0.5 0.{1 + i % 8} 0.25\n")
                 for i in range(args.images)]
        yaml = make_dataset(Path(tmp) / "ds", items)
        img_dir = str(yaml.parent / "images" / "train")
        cache_file = yaml.parent / "labels" / "train.yolo_data.cache"
        reference = fingerprint_of(load_split(img_dir, nc=3, save=False))
        t0 = time.monotonic()
        _writer(img_dir)
        write_s = time.monotonic() - t0
        stats = {"killed": 0, "finished": 0, "rebuilt": 0, "reused": 0, "max_tmp": 0}
        for r in range(args.rounds):
            if choice.random() < 0.3:
                cache_file.unlink(missing_ok=True)
            procs = [ctx.Process(target=_writer, args=(img_dir,)) for _ in range(args.writers)]
            for p in procs:
                p.start()
            victims = [p for p in procs if choice.random() < 0.75]
            time.sleep(choice.uniform(0, 1.5 * write_s))
            for p in victims:
                if p.is_alive():
                    os.kill(p.pid, signal.SIGKILL)
                    stats["killed"] += 1
            for p in procs:
                p.join(60)
                stats["finished"] += p.exitcode == 0
            if cache_file.exists():  # whatever is there must be whole and right
                contents = cache.load(cache_file)
                assert (contents.store.labels.tobytes(), contents.store.shapes_hw.tobytes()) == reference[:2]
            stats["max_tmp"] = max(stats["max_tmp"], len(list(cache_file.parent.glob("*.tmp"))))
            after = load_split(img_dir, nc=3)
            stats["rebuilt" if after.built else "reused"] += 1
            assert fingerprint_of(after) == reference, f"round {r}: wrong labels"
            left = list(cache_file.parent.glob("*.tmp"))
            assert not left, f"round {r}: temporary files of dead writers left behind: {left}"
            if not args.quiet:
                print(f"round {r + 1}/{args.rounds}: {stats}", flush=True)
    print(f"{args.rounds} rounds, {args.writers} writers each, {args.images} images: {stats['killed']} writers "
          f"killed with SIGKILL, {stats['finished']} finished; next load reused the cache {stats['reused']} "
          f"times and rebuilt it {stats['rebuilt']} times, labels always right; at most {stats['max_tmp']} "
          "temporary files seen at once, none left after the next load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
