#!/usr/bin/env python
"""Memory of cache='ram' under DDP: one copy of the pixels per node, whatever the ranks and workers.

    python benchmarks/speed/run.py ddp-ram [--data YAML] [--nproc 4] [--workers 2] [--imgsz 640] [--link-copies K]
                                       [--timeout SECONDS]

Launches ``torchrun --nproc_per_node=NPROC`` (gloo, CPU) on this script's worker part: every rank
builds its training loader with ``cache='ram'`` and ``rank=LOCAL_RANK`` (local rank 0 decodes into one
shared-memory file, the others map it), runs one epoch so every worker has touched every image, then
reads /proc/<pid>/smaps of itself and its DataLoader workers: PSS (proportional set size: shared pages
split between the processes mapping them) in total, and PSS of the image-cache mapping alone (found by
its device and inode: the RAM cache is a file without a name).  Rank 0 prints the sums next to the size
of the cached pixels.

``--data`` is a dataset yaml; by default the generated 2,000-image set (benchmarks/generators/make_synthetic.py) in
$YOLO_DATA_BENCH_SYNTHETIC or yolo_data_bench in the system temp folder, generated there when missing.

``--timeout`` bounds the torchrun part, so that a hung rank cannot hold the machine for ever: default
3600 s, meant to leave room for ``--link-copies 5`` (10,000 images decoded once, then an epoch) on a slow
machine.  Past it, torchrun, its ranks and their workers are all killed and the run fails with what they
printed so far.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
from common import REPO  # noqa: E402


def file_id(fd: int):
    """(major, minor, inode) of an open file: how /proc/PID/smaps names it even when it has no name (the
    RAM cache is an O_TMPFILE: its mappings show as ``/dev/shm/#NNNN (deleted)`` or alike)."""
    st = os.fstat(fd)
    return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino


def kind_of(dev: str, inode: str, path: str, cache_id) -> str:
    """What a mapping is, for the breakdown: the image cache (same device and inode as ``cache_id``),
    other shared memory (batches in flight, torch's shared tensors), file-backed (Python, torch and
    other libraries), or anonymous (heaps)."""
    major, minor = (int(x, 16) for x in dev.split(":"))
    if (major, minor, int(inode)) == tuple(cache_id):
        return "cache"
    if path.startswith("/dev/shm") or path.startswith("/memfd:") or "(deleted)" in path and "/dev/shm" in path:
        return "shm"
    if path.startswith("/"):
        return "file"
    return "anon"


def smaps_pss(pid: int, cache_id):
    """{kind: PSS bytes} for one process (see kind_of)."""
    out = {"cache": 0, "shm": 0, "file": 0, "anon": 0}
    current = "anon"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            if not fields[0].endswith(":"):  # a mapping header: address perms offset dev inode [path]
                path = " ".join(fields[5:]) if len(fields) > 5 else ""
                current = kind_of(fields[3], fields[4], path, cache_id)
            elif fields[0] == "Pss:":
                out[current] += int(fields[1]) * 1024
    return out


def linked_copies(data: Path, copies: int, root: Path) -> Path:
    """A dataset of ``copies`` hard-linked copies of every image and label under other names (a bigger
    cache at no decoding cost); returns its yaml."""
    src = data.parent
    for k in range(copies):
        for sub in ("images/train", "labels/train"):
            (root / sub).mkdir(parents=True, exist_ok=True)
            for f in sorted((src / sub).iterdir()):
                os.link(f, root / sub / f"{f.stem}-{k}{f.suffix}")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nnc: 80\n")
    return root / "data.yaml"


def rank_main(args) -> None:
    import torch.distributed as dist
    from yolo_data import create_dataloader
    dist.init_process_group("gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    loader, ds = create_dataloader(args.data, args.imgsz, 16, 32, augment=True, cache="ram", rank=local_rank,
                                   workers=args.workers, shuffle=True, split="train",
                                   hyp=str(REPO / "data" / "hyps" / "hyp.scratch-low.yaml"))
    loader.sampler.set_epoch(0)
    for _ in loader:  # one epoch: every worker maps and reads its share of the cache
        pass
    del _  # the last batch
    cache_id = file_id(ds.image_cache.fd)
    path = (f"anonymous file, inode {cache_id[2]}" if ds.image_cache.anonymous
            else f"{ds.image_cache.path}, inode {cache_id[2]}")
    procs = [os.getpid()] + common.child_pids(os.getpid())
    measured = [smaps_pss(p, cache_id) for p in procs]
    report = {"rank": dist.get_rank(), "procs": len(procs), "pixels": ds.image_cache.nbytes, "path": path,
              "pss": {k: sum(m[k] for m in measured) for k in measured[0]}}
    everything = [None] * dist.get_world_size()
    dist.all_gather_object(everything, report)  # workers are still alive here (persistent)
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(everything))
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset yaml (default: the generated 2,000-image set)")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--link-copies", type=int, default=1,
                    help="use K hard-linked copies of every image (a K times bigger cache; default 1)")
    ap.add_argument("--timeout", type=float, default=3600,
                    help="seconds the torchrun part may take before all its processes are killed (default 3600)")
    ap.add_argument("--rank-part", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    if args.rank_part:
        rank_main(args)
        return 0
    args.data = args.data or str(common.synthetic_set())
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if args.link_copies > 1:
            data = str(linked_copies(Path(args.data), args.link_copies, Path(tmp) / "linked"))
        n_images = sum(1 for _ in (Path(data).parent / "images" / "train").iterdir())
        out = Path(tmp) / "pss.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               __file__, "--rank-part", "--data", data, "--workers", str(args.workers),
               "--imgsz", str(args.imgsz), "--out", str(out)]
        try:  # the ranks run in sessions of their own: run_tree ends them and their workers too
            r = common.run_tree(cmd, args.timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired as e:
            print(common.as_text(e.stdout)[-3000:], common.as_text(e.stderr)[-3000:])
            print(f"bench_ram_pss.py: torchrun still running after {args.timeout:.0f} s; it, its ranks and their "
                  "workers were killed", file=sys.stderr)
            return 1
        if r.returncode:
            print(r.stdout[-3000:], r.stderr[-3000:])
            return r.returncode
        ranks = json.loads(out.read_text())
    pixels = ranks[0]["pixels"]
    pss = {k: sum(r["pss"][k] for r in ranks) for k in ranks[0]["pss"]}
    total = sum(pss.values())
    procs = sum(r["procs"] for r in ranks)
    gib = 2 ** 30
    print(f"### cache='ram' memory: {args.nproc} ranks x {args.workers} workers ({procs} processes), imgsz {args.imgsz}"
          + f", {n_images} images" + (f" ({args.link_copies} linked copies of each)" if args.link_copies > 1 else "")
          + "\n")
    print("| | GiB | × cached pixels |\n|---|---:|---:|")
    print(f"| cached pixels (one copy, {ranks[0]['path']}) | {pixels / gib:.2f} | 1.00× |")
    print(f"| **summed PSS of everything, all processes** | **{total / gib:.2f}** | **{total / pixels:.2f}×** |")
    rows = [("cache", "the image-cache mapping"), ("shm", "other shared memory (batches in flight)"),
            ("file", "file-backed (Python, torch and other libraries)"), ("anon", "anonymous (heaps, arrays)")]
    for k, label in rows:
        print(f"| of which {label} | {pss[k] / gib:.2f} | {pss[k] / pixels:.2f}× |")
    if not pss["cache"]:
        print("\nWARNING: no mapping with the cache's device and inode was found in any smaps; "
              "its pages are counted under the other rows.")
    print(f"\nA copy per rank (YOLOv5, Ultralytics) would hold {args.nproc}× the pixels: "
          f"{args.nproc * pixels / gib:.2f} GiB; everything but the cache is {(total - pss['cache']) / procs / 2**20:.0f} MiB "
          "per process.")
    print("\n" + common.footer())
    common.write_result("ddp-ram", {"images": n_images, "processes": procs, "cached_pixels_bytes": pixels,
                                    "summed_pss_bytes": total, "summed_pss_by_kind_bytes": pss,
                                    "pss_per_rank": ranks, "pss_over_pixels": total / pixels}, args,
                        datasets=[Path(args.data).parent.name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
