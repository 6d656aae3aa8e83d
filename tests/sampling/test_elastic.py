"""Elastic determinism with real processes (gloo on loopback): for a fixed seed and global batch, every
global step (the union of the ranks' batches: images, targets, paths) is the same on 1, 2 and 4 ranks,
with mosaic, mixup, rect, image weights and the device stage, for 0 and 2 workers; and a state saved on one world size
resumes on another."""
import faulthandler
import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml as pyyaml

from conftest import make_dataset
from procs import init, run

ROOT = Path(__file__).resolve().parents[2]
GLOBAL_BATCH = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("elastic")
    # 30 images of four shapes (rect batches differ), boxes of two classes (image weights matter)
    shapes = [(64, 48), (48, 64), (64, 64), (80, 40)]
    items = [(f"{i:02d}.jpg", shapes[i % 4], f"{i % 3 % 2} 0.5 0.5 0.3 0.4\n1 0.3 0.3 0.2 0.2\n")
             for i in range(30)]
    yaml = make_dataset(tmp, items, names=("a", "b"))
    hyp = pyyaml.safe_load((ROOT / "data" / "hyps" / "hyp.scratch-high.yaml").read_text())
    hyp.update(mixup=0.5, mosaic=1.0)  # mixup often, so its partner draws are checked too
    (tmp / "hyp.yaml").write_text(pyyaml.safe_dump(hyp))
    return str(yaml), str(tmp / "hyp.yaml")


def _rank(rank, world, port, yaml, hyp, out, cfg):
    os.environ["LOCAL_RANK"] = str(rank)  # what torchrun sets; one node
    # Forked from pytest, whose earlier tests ran torch ops on OpenMP threads: GNU OpenMP is not
    # fork-safe, and a parallel op here would wait forever for threads that do not exist.  (torchrun
    # starts fresh processes; this is only about forking the test process.)
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(180, exit=True)  # a hung rank shows where, and fails the test
    init(rank, world, port)
    try:
        from yolo_data import create_dataloader
        from yolo_data.images import load as images
        from yolo_data.sampling.weights import labels_to_image_weights
        decoded = []
        real_load = images.load_image
        images.load_image = lambda path, *a: decoded.append(path) or real_load(path, *a)  # this rank's decodes
        loader, ds = create_dataloader(yaml, 64, GLOBAL_BATCH // world, 32, hyp=hyp, augment=True,
                                       rect=cfg.get("rect", False), rank=rank, workers=cfg["workers"],
                                       shuffle=True, seed=3, split="train",
                                       partner_group=cfg.get("group", 4), device=cfg.get("device"))
        assert (loader.device_stage is not None) == bool(cfg.get("device"))
        if cfg.get("weights"):
            loader.sampler.set_weights(labels_to_image_weights(ds.labels, 2))
        if "resume" in cfg:
            loader.load_state_dict(json.loads(Path(cfg["resume"]).read_text()))
        else:
            loader.sampler.set_epoch(1)
        batches = []
        for step, (imgs, targets, paths, _) in enumerate(loader):
            batches.append((imgs.clone(), targets.clone(), list(paths)))
            if cfg.get("stop") == step + 1:
                Path(out, "state.json").write_text(json.dumps(loader.state_dict()))
                break
        torch.save(batches, Path(out, f"{world}-{rank}.pt"))
        Path(out, f"{world}-{rank}.decoded").write_text(str(len(decoded)))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def global_steps(out: Path, world: int):
    """Per step: (images (B, 3, H, W), targets with the image index global in the step, paths)."""
    per_rank = [torch.load(out / f"{world}-{r}.pt", weights_only=False) for r in range(world)]
    assert len({len(b) for b in per_rank}) == 1  # the same number of steps on every rank
    steps = []
    for s in range(len(per_rank[0])):
        imgs, targets, paths, offset = [], [], [], 0
        for r in range(world):
            im, t, p = per_rank[r][s]
            t = t.clone()
            t[:, 0] += offset
            offset += len(im)
            imgs.append(im), targets.append(t), paths.extend(p)
        steps.append((torch.cat(imgs), torch.cat(targets), paths))
    return steps


def assert_same(a, b):
    assert len(a) == len(b)
    for (ia, ta, pa), (ib, tb, pb) in zip(a, b):
        assert pa == pb
        assert ia.shape == ib.shape and torch.equal(ia, ib)
        assert torch.equal(ta, tb)


CONFIGS = {
    "mosaic+mixup, 0 workers": dict(workers=0),
    "mosaic+mixup, 2 workers": dict(workers=2),
    "rect": dict(workers=0, rect=True),
    "image weights": dict(workers=0, weights=True),
    "device stage, 2 workers": dict(workers=2, device="cpu"),  # pixels made in each rank's own process
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_global_step_is_the_same_on_1_2_and_4_ranks(data, tmp_path, name):
    cfg = CONFIGS[name]
    for world in (1, 2, 4):
        run(_rank, world, *data, str(tmp_path), cfg)
    ref = global_steps(tmp_path, 1)
    assert len(ref) == 2  # 30 images, global batch 16: a full step and a last one of 14
    if cfg.get("rect"):
        assert len({s[0].shape for s in ref}) == 2  # two rect shapes
    for world in (2, 4):
        assert_same(global_steps(tmp_path, world), ref)
    # and the steps are not trivially equal: another seed would give other batches
    assert ref[0][2] != sorted(ref[0][2])
    if cfg["workers"] == 0 and not cfg.get("rect"):  # decoded in the rank itself: about one per sample
        for world in (1, 2, 4):
            decoded = sum(int((tmp_path / f"{world}-{r}.decoded").read_text()) for r in range(world))
            assert decoded <= 30 + 12, (world, decoded)  # 30 samples; the last step's group of 2 borrows


def test_default_partner_group_keeps_mosaics_equal_on_1_and_2_ranks(data, tmp_path):
    cfg = dict(workers=0, group=8)
    for world in (1, 2):
        run(_rank, world, *data, str(tmp_path), cfg)
    assert_same(global_steps(tmp_path, 2), global_steps(tmp_path, 1))


def items_of(steps):
    """Per item of an epoch, in global order: (path, image (3, H, W))."""
    return [(p[k], im[k]) for im, _, p in steps for k in range(len(im))]


def test_a_group_that_does_not_divide_the_rank_batch_takes_partners_from_each_ranks_batch(data, tmp_path):
    """What the README says changes: partners then come from each rank's batch.  On 4 ranks of 4,
    partner_group=8 gives exactly the items of groups of 4 on one rank, and none of the items of
    groups of 8."""
    runs = {}
    for world, group in ((4, 8), (1, 4), (1, 8)):
        out = tmp_path / f"{world}x{group}"
        out.mkdir()
        run(_rank, world, *data, str(out), dict(workers=0, group=group))
        runs[world, group] = global_steps(out, world)
    assert_same(runs[4, 8], runs[1, 4])
    fell_back, groups_of_8 = items_of(runs[4, 8]), items_of(runs[1, 8])
    assert len(fell_back) == 30 and [i[0] for i in fell_back] == [i[0] for i in groups_of_8]
    # mosaic=1.0 makes every item a mosaic, and every item's partner pool changed (smaller, or in the
    # last step a group of 2 that borrows from the whole split)
    assert [k for k, (a, b) in enumerate(zip(fell_back, groups_of_8)) if torch.equal(a[1], b[1])] == []


def test_a_state_saved_on_one_rank_resumes_on_two(data, tmp_path):
    full, cut, resumed = tmp_path / "full", tmp_path / "cut", tmp_path / "resumed"
    for d in (full, cut, resumed):
        d.mkdir()
    run(_rank, 1, *data, str(full), dict(workers=0))
    run(_rank, 1, *data, str(cut), dict(workers=0, stop=1))
    state = json.loads((cut / "state.json").read_text())
    assert state["epoch"] == 1 and state["step"] == 1 and len(json.dumps(state)) < 1000
    run(_rank, 2, *data, str(resumed), dict(workers=2, resume=str(cut / "state.json")))
    ref = global_steps(full, 1)
    assert_same(global_steps(cut, 1), ref[:1])
    assert_same(global_steps(resumed, 2), ref[1:])
