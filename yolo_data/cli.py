"""Command-line entry points: ``yolo-data`` (report, split, cache, demo, bench), ``yolo-data-cache`` (= ``python tools/build_cache.py``) and the demo."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from .formats.datayaml import is_dataset_yaml, load_dataset_yaml
from .labels.split import SplitLabels, fit_channels, load_split
from .labels.summary import progress_bar
from .storage import Storage, StorageOptions, container, using

# The bundled sample dataset and YOLOv5's hyperparameter files are package data (setup.cfg), so the
# console scripts find them in an installed wheel as in a checkout (where this folder links to data/).
DATA_DIR = Path(__file__).resolve().parent / "data"
SAMPLE_YAML = DATA_DIR / "sample.yaml"


def cache_dir_for(data: str, cache_dir=None):
    """``cache_dir``, or the per-user cache folder for the bundled sample: the package's own files stay
    as installed (a site-packages may be read-only or shared, and an uninstall leaves nothing behind)."""
    if cache_dir is None and Path(data).resolve() == SAMPLE_YAML.resolve():
        from .labels.cache import user_cache_dir
        return user_cache_dir()
    return cache_dir


def _splits(data: str) -> Tuple[List[Tuple[str, object]], List[str]]:
    """[(split name, paths)] and class names for a dataset yaml or an image path."""
    if is_dataset_yaml(data):
        spec = load_dataset_yaml(data)
        if not spec.splits:
            raise SystemExit(f"{data}: no train/val/test split listed")
        return list(spec.splits.items()), spec.names
    return [(Path(data).name or data, data)], []


def format_table(rows: List[Tuple[str, SplitLabels]]) -> str:
    head = ("split", "images", "boxes", "backgrounds", "corrupt", "warnings", "cache", "seconds")
    lines = [head]
    for name, s in rows:
        c = s.counts
        where = f"{s.cache_file} ({'built' if s.built else 'reused'})" if s.cache_file else "(not written)"
        lines.append((name, str(len(s.store)), str(c["boxes"]), str(c["backgrounds"]), str(c["corrupt"]),
                      str(c["warnings"]), where, f"{s.seconds:.2f}"))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in lines)


def build_caches(data: str, workers: Optional[int] = None, cache_dir=None, force: bool = False,
                 progress: bool = True, keep_difficult: bool = False) -> List[Tuple[str, SplitLabels]]:
    splits, names = _splits(data)
    # the images a training run leaves out for their bands are listed with the rest
    channels = (load_dataset_yaml(data).channels if is_dataset_yaml(data) else None) or 3
    return [(name, fit_channels(load_split(paths, cache_dir=cache_dir, workers=workers, force=force, names=names or None,
                                           keep_difficult=keep_difficult,
                                           progress=progress_bar(f"scanning {name}", progress and sys.stderr.isatty())),
                                channels))
            for name, paths in splits]


def report(rows: List[Tuple[str, SplitLabels]]) -> int:
    """Print the table and the problems; return the exit status (1 when a split has no usable image)."""
    print(format_table(rows))
    for name, s in rows:
        if s.problems:
            print(f"\n{name}: {len(s.problems)} problem(s)")
            for p in s.problems:
                print(f"  {p}")
    empty = [name for name, s in rows if not len(s.store)]
    if empty:
        print(f"\nno usable image in: {', '.join(empty)}", file=sys.stderr)
        return 1
    return 0


def leftover_folders(data: Optional[str], cache_dir=None) -> List[Path]:
    """Where yolo_data may have left files: the shared-memory folder, the per-user cache folder,
    ``cache_dir``, and the label-cache folders of ``data``'s splits (beside their labels)."""
    from .labels.cache import user_cache_dir
    from .items.imagecache import shm_dir
    from .formats.sources import default_cache_file, img2label_path, list_image_files
    folders = [shm_dir(), user_cache_dir()] + ([Path(cache_dir)] if cache_dir else [])
    if data:
        for _, paths in _splits(data)[0]:
            files = list_image_files(paths)
            if files:
                folders.append(default_cache_file(paths, img2label_path(files[0])).parent)
    return list(dict.fromkeys(folders))


def leftovers(folders) -> List[Path]:
    """Files of the current user that yolo_data no longer needs: named RAM caches of yolo_data before
    0.2 in the shared-memory folder (today's have no name) and our temporaries of dead writers (only
    those certainly ours, see ``container.stale_temps``: a user's own ``.x.1.y.tmp`` is left alone)."""
    found = []
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for p in folder.glob("yolo_data-*.imgcache"):
            try:
                if p.lstat().st_uid == os.geteuid():
                    found.append(p)
            except OSError:
                pass
        found += container.stale_temps(folder)
    return sorted(set(found))


def leftovers_main(data: Optional[str], cache_dir, remove: bool) -> int:
    """List (and with ``remove`` delete) files of yours that yolo_data no longer needs."""
    found = leftovers(leftover_folders(data, cache_dir))
    for p in found:
        try:
            size = p.stat().st_size
            if remove:
                p.unlink()
            print(f"{'removed' if remove else 'leftover'}  {size / 2**20:10,.1f} MiB  {p}")
        except OSError as e:
            print(f"cannot remove {p}: {e.strerror}", file=sys.stderr)
    print(f"{len(found)} leftover file(s)" + ("" if remove or not found else "; remove them with --remove-leftovers"))
    return 0


def build_cache_main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="yolo-data-cache",
        description="Build or refresh the label cache of every split of a dataset and report what was found.")
    ap.add_argument("data", nargs="?", default=str(SAMPLE_YAML),
                    help="dataset yaml, image path (folder, .txt list), COCO .json, or Pascal VOC folder or "
                         "ImageSets list; default: the bundled sample")
    ap.add_argument("--keep-difficult", action="store_true", help="keep VOC objects marked difficult")
    ap.add_argument("--workers", type=int, default=None, help="scan processes (default: all cores)")
    ap.add_argument("--cache-dir", default=None,
                    help="write caches to this folder instead of beside the labels")
    ap.add_argument("--force", action="store_true", help="rescan even when the cache is fresh")
    ap.add_argument("--endpoint-url", default=None, metavar="URL",
                    help="the S3-compatible server of s3:// paths (default: $AWS_ENDPOINT_URL_S3, "
                         "$AWS_ENDPOINT_URL, else AWS)")
    ap.add_argument("--publish", action="store_true",
                    help="for a dataset in a bucket: also put each split's label cache in the bucket beside "
                         "its labels, where every job then finds it (needs write permission there)")
    ap.add_argument("--leftovers", action="store_true",
                    help="only list files of yours that yolo_data left behind (temporaries of killed writers, "
                         "RAM caches of older versions) in /dev/shm, the per-user cache folder, --cache-dir "
                         "and the dataset's cache folders")
    ap.add_argument("--remove-leftovers", action="store_true", help="list those files and remove them")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(message)s")  # problems go into the report below
    if args.leftovers or args.remove_leftovers:
        data = None if args.data == str(SAMPLE_YAML) and not SAMPLE_YAML.exists() else args.data
        try:
            return leftovers_main(data, args.cache_dir, args.remove_leftovers)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    # the buckets of this command's dataset are read at --endpoint-url (a Storage of its own)
    with using(Storage(StorageOptions(endpoint_url=args.endpoint_url))):
        return _build_and_publish(args)


def _build_and_publish(args) -> int:
    """yolo-data-cache's work, once its arguments are read: the caches, their table, --publish."""
    try:
        rows = build_caches(args.data, args.workers, cache_dir_for(args.data, args.cache_dir), args.force,
                            keep_difficult=args.keep_difficult)
    except (OSError, ValueError, ImportError) as e:  # a missing or unreadable path, a malformed yaml: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        # a file name that is not UTF-8 (lone surrogates) prints as its bytes instead of a traceback
        sys.stdout.reconfigure(errors="surrogateescape")
    status = report(rows)
    if args.publish:
        from .labels.split import publish
        for name, s in rows:
            try:
                print(f"{name}: published {publish(s)}")
            except (OSError, ValueError) as e:
                print(f"{name}: not published: {e}", file=sys.stderr)
                status = status or 2
    return status


def demo_main(argv=None) -> int:
    """Build the caches of a dataset (default: the bundled sample), then load one batch and describe it."""
    ap = argparse.ArgumentParser(prog="yolo-data-demo", description=demo_main.__doc__)
    ap.add_argument("data", nargs="?", default=str(SAMPLE_YAML),
                    help="dataset yaml or image path, as yolo-data-cache takes it; default: the bundled sample")
    ap.add_argument("--imgsz", type=int, default=320, help="training image size (default 320)")
    ap.add_argument("--batch-size", type=int, default=4, help="images in the batch (default 4)")
    ap.add_argument("--rect", action="store_true", help="a rectangular batch, as for evaluation")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    cache_dir = cache_dir_for(args.data)
    try:
        status = report(build_caches(args.data, cache_dir=cache_dir))
        if status:
            return status
        from .integrations.yolov5 import create_dataloader
        loader, dataset = create_dataloader(args.data, args.imgsz, args.batch_size, 32, rect=args.rect, workers=0,
                                            split="train" if is_dataset_yaml(args.data) else None,
                                            cache_dir=cache_dir)
        imgs, targets, paths, shapes = next(iter(loader))
    except (OSError, ValueError, ImportError) as e:  # a missing or unreadable path, a malformed yaml: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"\none batch of the {len(dataset)}-image train split at imgsz {args.imgsz}:")
    print(f"  imgs     {tuple(imgs.shape)} {imgs.dtype} (RGB)")
    print(f"  targets  {tuple(targets.shape)} {targets.dtype} [image, class, x, y, w, h]")
    for row in targets[:4].tolist():
        print("           " + " ".join(f"{v:.3f}" for v in row))
    for p, s in zip(paths, shapes):
        print(f"  {Path(p).name}: original (h0, w0)={s[0]}, ratio={tuple(round(r, 3) for r in s[1][0])}, "
              f"pad={s[1][1]}")
    return 0


def frame_count(text: str) -> int:
    """``--sequence-frames K``: a whole number of frames, 1 or more."""
    k = int(text)
    if k < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text}")
    return k


def print_report(rep) -> None:
    """The report's lines on the terminal: each split, the checkpoint's data, pictures, flat pictures, sequences,
    findings and the files written."""
    from .report.checkpoint import checkpoint_lines
    from .report.datastats import bands_text
    from .report.leakage import sequences_text
    from .labels.summary import plural
    f = rep.figures
    for name, s in f["splits"].items():
        if "error" in s:
            source = ", ".join(s["source"]) if isinstance(s["source"], list) else s["source"]
            print(f"{name}: cannot read {source}: {s['error']}")
        else:
            cache = (f"label cache {'built in' if s['cache_built'] else 'read from'} {s['cache_file']}"
                     if s["cache_file"] else "label cache not written")
            print(f"{name}: {plural(s['images'], 'image')}, {plural(s['objects'], 'object')}, "
                  f"{plural(s['backgrounds'], 'background')}, {s['left_out']:,} left out, "
                  f"{plural(s['warnings'], 'warning')}; {cache}")
            other = f" ({s['other_bands']:,} of other bands left out)" if s.get("other_bands") else ""
            print(f"{name} images by bands: {bands_text(s['image_bands'])}{other}")
    for line in checkpoint_lines(f.get("checkpoint")):
        print(line)
    if f["pictures"]:
        print(f"pictures of {f['settings']['channels']}-channel batches show {f['pictures_show']}")
    flat = f["duplicates"].get("flat", [])
    if flat:
        print(f"{plural(len(flat), 'flat picture')} (one colour: black, white or gray), grouped only with "
              "byte-identical copies")
    print(sequences_text(f))
    print("findings: " + ", ".join(f"{k} {v:,}" for k, v in f["findings"].items()))
    print(f"wrote {rep.html_file} and {rep.json_file} in {f['seconds']:.1f} s")


def report_main(argv=None) -> int:
    """``yolo-data report DATA``: write DATA's dataset report (HTML and JSON); exit 1 when a category
    of ``--fail-on`` has findings or a split cannot be read, 2 when the data cannot be read at all."""
    from .report.compose import FINDINGS, ReportOptions, write_report
    ap = argparse.ArgumentParser(
        prog="yolo-data report",
        description="Write a dataset report: counts, every problem, classes per split, object and image sizes, "
                    "duplicates and leakage between splits, training batches; as one HTML page and a JSON file.")
    ap.add_argument("data", nargs="?", default=str(SAMPLE_YAML),
                    help="dataset yaml, image path (folder, .txt list), COCO .json, or Pascal VOC folder or "
                         "ImageSets list; default: the bundled sample")
    ap.add_argument("--out", default="dataset_report",
                    help="write OUT.html and OUT.json (a given .html or .json suffix is replaced, any other is "
                         "kept; a folder gets dataset_report.html and .json; default: dataset_report in the "
                         "current folder)")
    ap.add_argument("--imgsz", type=int, default=640, help="training size object sizes are measured at")
    ap.add_argument("--task", choices=("detect", "segment", "pose", "obb"), default=None,
                    help="how label rows are read (default: pose where the yaml has kpt_shape, else detect)")
    ap.add_argument("--no-duplicates", action="store_true", help="do not read the images to look for duplicates")
    ap.add_argument("--no-pictures", action="store_true", help="no pictures of training batches and rare classes")
    ap.add_argument("--class-balance", type=float, default=0.1, metavar="T",
                    help="show class frequencies as class_balance=T samples them (default 0.1)")
    ap.add_argument("--fail-on", default="", metavar="LIST",
                    help=f"exit 1 when any of these has findings, or a split cannot be read (comma-separated, "
                         f"or 'all'): {', '.join(FINDINGS)}")
    ap.add_argument("--sequence-frames", type=frame_count, default=ReportOptions.sequence_frames, metavar="K",
                    help="a val or test video frame at most K frames from a training frame leaks (default %(default)s)")
    ap.add_argument("--workers", type=int, default=None, help="threads reading images, processes scanning labels")
    ap.add_argument("--cache-dir", default=None,
                    help="read and write label caches in this folder (default: the per-user cache folder; the "
                         "dataset is never written to)")
    ap.add_argument("--checkpoint", default=None, metavar="PT", help="a checkpoint (best.pt) of yolo_data's "
                    "Ultralytics plug-in: is each split it was trained on the same data now (finding data-changed)")
    args = ap.parse_args(argv)
    fail_on = list(FINDINGS) if args.fail_on.strip() == "all" else [c.strip() for c in args.fail_on.split(",") if c.strip()]
    unknown = [c for c in fail_on if c not in FINDINGS]
    if unknown:
        ap.error(f"--fail-on: unknown {', '.join(unknown)}; choose from {', '.join(FINDINGS)} or 'all'")
    if not 0 < args.class_balance <= 1:
        ap.error(f"--class-balance must be in (0, 1], got {args.class_balance}")
    logging.basicConfig(level=logging.ERROR, format="%(message)s")  # problems go into the report
    options = ReportOptions(img_size=args.imgsz, task=args.task, duplicates=not args.no_duplicates,
                            pictures=not args.no_pictures, class_balance=args.class_balance, workers=args.workers,
                            cache_dir=args.cache_dir, sequence_frames=args.sequence_frames,
                            checkpoint=args.checkpoint)
    try:
        rep = write_report(args.data, args.out, options)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(rep)
    failed = rep.failed(fail_on)
    if failed:
        why = "; ".join(f"split {k} cannot be read, so nothing in it was checked: {v}"
                        for k, v in rep.unreadable.items())
        print(f"failed on: {', '.join(failed)}" + (f" ({why})" if why else ""), file=sys.stderr)
        return 1
    return 0


def bench_main(argv=None) -> int:
    """``yolo-data bench DATA``: where a training loader's time goes (report/bench.py); exit 2 when the
    data cannot be read."""
    from .report.bench import BenchOptions, format_bench, run_bench
    ap = argparse.ArgumentParser(
        prog="yolo-data bench",
        description="Time a training loader: per-stage time per image (read, decode, augment, collate, transfer; "
                    "or the device stage's), "
                    "the loader's img/s and CPU time per image, a training step's img/s, which is the bottleneck, "
                    "and the workers that keep the step fed.")
    ap.add_argument("data", nargs="?", default=str(SAMPLE_YAML),
                    help="dataset yaml (its train split), image folder or .txt list; default: the bundled sample")
    ap.add_argument("--img-size", type=int, default=640, help="training image size (default 640)")
    ap.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    ap.add_argument("--workers", type=int, default=None, help="loader workers (default: min(8, CPUs))")
    ap.add_argument("--images", type=int, default=None,
                    help="images timed in each phase (default: 256, or the split when smaller)")
    ap.add_argument("--hyp", default=None, help="YOLOv5 hyp yaml (default: hyp.scratch-low's values)")
    ap.add_argument("--device", default=None,
                    help="where batches are copied and the stand-in step runs (default: cuda when available, else cpu)")
    ap.add_argument("--step-ms", type=float, default=None, metavar="MS",
                    help="your model's training step in ms per batch, instead of timing the stand-in step")
    ap.add_argument("--cache-dir", default=None, help="read and write label caches in this folder")
    ap.add_argument("--device-stage", action="store_true",
                    help="time the loader that decodes and augments on --device (Settings device=..., docs/device.md)")
    args = ap.parse_args(argv)
    for name in ("img_size", "batch", "images"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers is not None and args.workers < 0:
        ap.error("--workers must be at least 0")
    if args.step_ms is not None and not 0 < args.step_ms < float("inf"):
        ap.error("--step-ms must be a positive number of milliseconds")
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    options = BenchOptions(img_size=args.img_size, batch=args.batch, workers=args.workers, images=args.images,
                           hyp=args.hyp, device=args.device, step_ms=args.step_ms,
                           cache_dir=cache_dir_for(args.data, args.cache_dir), device_stage=args.device_stage)
    try:
        print(format_bench(run_bench(args.data, options)))
    except (OSError, ValueError, RuntimeError) as e:  # a missing path, a malformed yaml, an absent device: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def split_main(argv=None) -> int:
    """``yolo-data split DATA``: new leak-free train/val(/test) lists (splits/command.py)."""
    from .splits.command import split_main as run
    return run(argv)


COMMANDS = {"report": report_main, "cache": build_cache_main, "demo": demo_main, "bench": bench_main,
            "split": split_main}


def main(argv=None) -> int:
    """``yolo-data COMMAND ...``: report (a dataset report), cache (= yolo-data-cache), demo, bench."""
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: yolo-data {report,split,cache,demo,bench} ...\n\n"
             "  report DATA   write a dataset report (HTML and JSON): problems, classes, sizes, duplicates, leakage\n"
             "  split DATA    new train/val(/test) lists with related images (copies, recordings, frames) on one side\n"
             "  cache DATA    build or refresh the label caches of a dataset (= yolo-data-cache)\n"
             "  demo [DATA]   build the caches and describe one batch (= yolo-data-demo)\n"
             "  bench DATA    time a training loader: per stage, against a training step, and the workers it needs\n")
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if not argv or argv[0] not in COMMANDS:
        print(usage + (f"\nyolo-data: unknown command {argv[0]!r}" if argv else ""), file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])
