"""Ultralytics' trainer with ``class_balance``, in the benchmark environment.

    python benchmarks/compat/ultralytics_class_balance.py     # in the benchmark environment

On a temporary copy of the bundled sample (16 train images) where 'triangle' is kept in 2 images only
(f = 2/16, so class_balance=0.5 repeats those images sqrt(0.5 / 0.125) = 2 times), trains yolo11n.yaml
from scratch for one epoch at imgsz 64 with ``YoloDataTrainer`` and ``class_balance=0.5`` (an argument
Ultralytics itself would refuse), then checks:

- the train loader's sampler has the repeat factors and its epoch grew from 16 to floor(sum r) draws;
- the model's callbacks keep nothing of the run (a next ``train()`` without the argument is unbalanced);
- the trainer rebuilt as Ultralytics' DDP launch rebuilds it in each rank (its class, its args as
  overrides, its callbacks, pickled) has class_balance 0.5 again.

Ultralytics' settings go to a temporary folder, offline.
"""
from __future__ import annotations

import math
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)


def sample_with_a_rare_class(tmp: Path) -> Path:
    """The bundled sample copied into ``tmp`` with class 2 left in two train images; its yaml, with an
    absolute path."""
    src = common.REPO / "data"
    dst = tmp / "sample"
    shutil.copytree(src / "sample", dst, ignore=shutil.ignore_patterns("*.cache"))
    kept = 0
    for f in sorted((dst / "labels" / "train").glob("*.txt")):
        rows = f.read_text().splitlines()
        if any(r.startswith("2 ") for r in rows):
            if kept < 2:
                kept += 1
                continue
            f.write_text("".join(r + "\n" for r in rows if not r.startswith("2 ")))
    yaml = tmp / "sample.yaml"
    yaml.write_text(f"path: {dst}\ntrain: images/train\nval: images/val\nnames:\n  0: circle\n  1: rectangle\n"
                    "  2: triangle\n")
    return yaml


def picklable(obj, pickler) -> bool:
    try:
        pickler.dumps(obj)
        return True
    except Exception:
        return False


def main() -> None:
    common.require("ultralytics_class_balance.py", "ultralytics")
    tmp = Path(tempfile.mkdtemp(prefix="ultra_balance_"))
    common.isolate_environment(tmp, "ultralytics_class_balance")
    data = sample_with_a_rare_class(tmp)
    from ultralytics import YOLO
    from ultralytics.utils import DEFAULT_CFG_DICT
    from yolo_data.integrations.ultralytics import OwnArgs, YoloDataTrainer

    model = YOLO("yolo11n.yaml")
    with common.library_output(False):
        model.train(data=str(data), trainer=YoloDataTrainer, class_balance=0.5, epochs=1, imgsz=64, batch=4,
                    workers=0, device="cpu", plots=False, amp=False, seed=0, project=str(tmp / "runs"),
                    name="balance", exist_ok=True, verbose=False)
    trainer = model.trainer
    sampler = trainer.train_loader.sampler
    r = sampler.repeat_factors
    length = sampler.layout.length
    print(f"train loader: {len(trainer.train_loader)} steps of 4, {length} draws from {sampler.n} images "
          f"(factors {sorted(set(r.round(3).tolist()))})")
    ok_loader = r is not None and length == math.floor(r.sum()) > sampler.n and r.max() == 2.0 \
        and len(trainer.train_loader) == math.ceil(length / 4) > math.ceil(sampler.n / 4)
    print(f"class_balance reached the train loader: {ok_loader}")
    left = [c for cs in model.callbacks.values() for c in cs if isinstance(c, OwnArgs)]
    print(f"model callbacks keep nothing of the run: {not left}")

    # what Ultralytics' DDP launch (utils/dist.py generate_ddp_file) saves, and how each rank rebuilds it;
    # it pickles with cloudpickle, which also takes the lambdas of its own callbacks: without it here,
    # those few are left out (ours are plain objects and functions either way)
    try:
        import cloudpickle as pickler
    except ImportError:
        pickler = pickle
    callbacks = {event: [c for c in cs if picklable(c, pickler)] for event, cs in trainer.callbacks.items()}
    state = pickle.loads(pickler.dumps({"trainer": type(trainer), "args": vars(trainer.args), "callbacks": callbacks}))
    cfg = DEFAULT_CFG_DICT.copy()
    cfg.update(save_dir="")
    with common.library_output(False):
        rank_trainer = state["trainer"](cfg=cfg, overrides=state["args"], _callbacks=state["callbacks"])
    print(f"a DDP rank's trainer has class_balance {rank_trainer.class_balance!r}: "
          f"{rank_trainer.class_balance == 0.5}")
    shutil.rmtree(tmp, ignore_errors=True)
    print("\n" + common.footer())


if __name__ == "__main__":
    main()
