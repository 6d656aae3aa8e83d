"""Run by torchrun in tests: build the dataset under DDP and report what this rank saw."""
import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from yolo_data import create_dataloader  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    local_rank, rank = int(os.environ["LOCAL_RANK"]), dist.get_rank()
    _, ds = create_dataloader(args.data, 64, 4, 32, rank=local_rank, workers=0, split="train")
    h = hashlib.sha256()
    for k, a in ds.store.arrays().items():
        h.update(k.encode() + a.tobytes())
    cache = ds.split_labels.cache_file
    Path(args.out, f"{rank}.json").write_text(json.dumps({
        "rank": rank, "local_rank": local_rank, "built": ds.split_labels.built, "labels": h.hexdigest(),
        "cache": str(cache), "n": len(ds), "names": ds.names, "label_file": ds.label_files[0]}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
