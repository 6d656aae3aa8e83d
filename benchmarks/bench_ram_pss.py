#!/usr/bin/env python
"""Memory of cache='ram' under DDP: one copy of the pixels per node, whatever the ranks and workers.

    python benchmarks/bench_ram_pss.py [--data YAML] [--nproc 4] [--workers 2] [--imgsz 640]

Launches ``torchrun --nproc_per_node=NPROC`` (gloo, CPU) on this script's worker part: every rank
builds its training loader with ``cache='ram'`` and ``rank=LOCAL_RANK`` (local rank 0 decodes into one
shared-memory file, the others map it), runs one epoch so every worker has touched every image, then
reads /proc/<pid>/smaps of itself and its DataLoader workers: PSS (proportional set size: shared pages
split between the processes mapping them) in total, and PSS of the image-cache mapping alone.  Rank 0
prints the sums next to the size of the cached pixels.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path("/tmp/yolo_data_bench/synthetic-n2000-seed0-640px-q90/data.yaml")


def smaps_pss(pid: int, needle: str):
    """(total PSS, PSS of mappings whose path contains ``needle``) in bytes for one process."""
    total = part = 0
    current = ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            if not fields[0].endswith(":"):  # a mapping header: address perms offset dev inode [path]
                current = fields[5] if len(fields) > 5 else ""
            elif fields[0] == "Pss:":
                kb = int(fields[1]) * 1024
                total += kb
                if needle in current:
                    part += kb
    return total, part


def children(pid: int):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def rank_main(args) -> None:
    import torch.distributed as dist
    sys.path.insert(0, str(REPO))
    from yolo_data import create_dataloader
    dist.init_process_group("gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    loader, ds = create_dataloader(args.data, args.imgsz, 16, 32, augment=True, cache="ram", rank=local_rank,
                                   workers=args.workers, shuffle=True, split="train",
                                   hyp=str(REPO / "data" / "hyps" / "hyp.scratch-low.yaml"))
    loader.sampler.set_epoch(0)
    for _ in loader:  # one epoch: every worker maps and reads its share of the cache
        pass
    path = str(ds.image_cache.path)
    procs = [os.getpid()] + children(os.getpid())
    measured = [smaps_pss(p, path) for p in procs]
    report = {"rank": dist.get_rank(), "procs": len(procs), "pss": sum(m[0] for m in measured),
              "cache_pss": sum(m[1] for m in measured), "pixels": ds.image_cache.nbytes, "path": path}
    everything = [None] * dist.get_world_size()
    dist.all_gather_object(everything, report)  # workers are still alive here (persistent)
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(everything))
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--rank-part", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank_part:
        rank_main(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pss.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               __file__, "--rank-part", "--data", args.data, "--workers", str(args.workers),
               "--imgsz", str(args.imgsz), "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(r.stdout[-3000:], r.stderr[-3000:])
            return r.returncode
        ranks = json.loads(out.read_text())
    pixels = ranks[0]["pixels"]
    total = sum(r["pss"] for r in ranks)
    cache = sum(r["cache_pss"] for r in ranks)
    procs = sum(r["procs"] for r in ranks)
    gib = 2 ** 30
    print(f"### cache='ram' memory: {args.nproc} ranks x {args.workers} workers ({procs} processes), imgsz {args.imgsz}\n")
    print("| | GiB | × cached pixels |\n|---|---:|---:|")
    print(f"| cached pixels (one copy, {ranks[0]['path']}) | {pixels / gib:.2f} | 1.00× |")
    print(f"| summed PSS of the image-cache mapping, all processes | {cache / gib:.2f} | {cache / pixels:.2f}× |")
    print(f"| summed PSS of everything, all processes | {total / gib:.2f} | {total / pixels:.2f}× |")
    print(f"| summed PSS besides the cache (Python, torch, buffers; {procs} processes) | {(total - cache) / gib:.2f} | "
          f"{(total - cache) / pixels:.2f}× |")
    print(f"\nA copy per rank (YOLOv5, Ultralytics) would hold {args.nproc}× the pixels: "
          f"{args.nproc * pixels / gib:.2f} GiB.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
