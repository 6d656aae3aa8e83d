"""Store keys that callers name, with real processes (gloo on loopback): ranks pair the same dataset, the
same user's block and the same comparison whatever order each rank does them in."""
import json
import os
from pathlib import Path

import torch.distributed as dist

from conftest import make_dataset
from procs import init, run

# two splits with as many images and boxes, so that comparing one with the other finds no difference
ITEMS = {"a": [(f"a{i}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for i in range(5)],
         "b": [(f"b{i}.jpg", (48, 64), "1 0.5 0.5 0.3 0.3\n") for i in range(5)]}


def _datasets(tmp_path: Path) -> dict:
    return {name: str(make_dataset(tmp_path / name, items)) for name, items in ITEMS.items()}


def _eval_loader(yaml: str, rank: int):
    """An evaluation loader that gives each rank its own images: built rank 0 first, and not compared
    with the other ranks' (no meeting of all ranks that opposite orders would keep apart)."""
    from yolo_data import Settings
    from yolo_data.build import build_loader
    settings = Settings.evaluation(img_size=64, batch_size=2, each_image_once=True, split="train", workers=0)
    return build_loader(yaml, settings, rank=rank)


def _described(loader) -> dict:
    ds = loader.dataset
    return {"built": ds.split_labels.built, "cache": str(ds.split_labels.cache_file),
            "folders": sorted({Path(f).parent.parent.parent.name for f in ds.im_files}), "n": len(ds)}


def _opposite_orders_worker(rank, world, port, yamls, out_dir):
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    init(rank, world, port, timeout_s=20)  # a key rank 0 never sets fails the rank in 20 s, not in 60
    try:
        order = ["a", "b"] if rank == 0 else ["b", "a"]
        out = {name: _described(_eval_loader(yamls[name], rank)) for name in order}
        Path(out_dir, f"{rank}.json").write_text(json.dumps(out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_two_ranks_that_build_two_datasets_in_opposite_orders_each_get_their_own_split(tmp_path):
    """Local rank 1 builds b then a, local rank 0 a then b: rank 1's b waits for rank 0's b, not for
    the first block rank 0 finished (which was a)."""
    out = tmp_path / "out"
    out.mkdir()
    run(_opposite_orders_worker, 2, _datasets(tmp_path), str(out))
    r0, r1 = (json.loads((out / f"{r}.json").read_text()) for r in range(2))
    for name in ("a", "b"):
        assert r0[name]["built"] and not r1[name]["built"]  # local rank 0 scanned, rank 1 read its cache
        assert r0[name]["cache"] == r1[name]["cache"]
        assert r0[name]["folders"] == r1[name]["folders"] == [name]  # each its own split's images
    assert r0["a"]["cache"] != r0["b"]["cache"]


def _extra_block_worker(rank, world, port, yamls, out_dir):
    """Each rank enters one block of its own without a key, rank 1 before building its loader and
    rank 0 after: the blocks without a key pair with each other, the loader's with the loader's."""
    from yolo_data import torch_distributed_zero_first
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    init(rank, world, port, timeout_s=20)
    marker = Path(out_dir, "rank0-block")
    try:
        out = {}
        if rank == 1:
            with torch_distributed_zero_first(rank):  # YOLOv5's signature: no key
                out["after_rank_0"] = marker.exists()
        out["a"] = _described(_eval_loader(yamls["a"], rank))
        if rank == 0:
            with torch_distributed_zero_first(rank):
                marker.write_text("done")
        Path(out_dir, f"{rank}.json").write_text(json.dumps(out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_a_block_without_a_key_pairs_with_the_other_ranks_block_without_a_key(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run(_extra_block_worker, 2, _datasets(tmp_path), str(out))
    r0, r1 = (json.loads((out / f"{r}.json").read_text()) for r in range(2))
    assert r1["after_rank_0"]  # rank 1's block ran after rank 0's block, not after rank 0's loader
    assert r0["a"]["built"] and not r1["a"]["built"] and r0["a"]["cache"] == r1["a"]["cache"]


def _compare_out_of_order_worker(rank, world, port, yamls, out_dir):
    """Two nodes of one rank each, with the same two datasets; rank 1 builds its training loaders in the
    opposite order.  Both must raise at once instead of comparing a with b (equal numbers: no error)."""
    os.environ.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    init(rank, world, port)
    try:
        from yolo_data import RanksDisagreeError, create_dataloader
        errors = []
        for name in (["a", "b"] if rank == 0 else ["b", "a"]):
            try:
                create_dataloader(yamls[name], 64, 2, 32, rank=0, workers=0, split="train", prefix=f"{name}: ")
            except RanksDisagreeError as e:
                errors.append(str(e))
                break
        Path(out_dir, f"{rank}.json").write_text(json.dumps(errors))
        dist.barrier()  # both have read the error before rank 0, the store's host, ends
    finally:
        dist.destroy_process_group()


def test_ranks_that_compare_their_loaders_in_different_orders_fail_at_once_saying_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run(_compare_out_of_order_worker, 2, _datasets(tmp_path), str(out))
    for r in range(2):
        errors = json.loads((out / f"{r}.json").read_text())
        assert len(errors) == 1, errors  # a wait for the other rank would end at run's timeout
        assert "different orders" in errors[0] and "a: " in errors[0] and "b: " in errors[0]
