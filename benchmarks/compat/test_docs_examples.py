"""The documentation's examples that need a peer or several processes (tests/docs_examples.py marks them),
run in the peers' environment with tiny settings:

- ``needs ultralytics``: the block as written, with ``Model.train`` and ``Model.val`` given 1 epoch,
  imgsz 64, batch 8, the CPU, no plots and a quarter of the training images (the arguments the block
  gives are kept unless they would make it slow), offline and with Ultralytics' settings in a
  temporary folder;
- ``needs yolov5 train.py`` (``val.py``, ``segment/train.py``): the block's import line put after
  YOLOv5's own imports in a copy of that script, which then trains 1 epoch at imgsz 64 on the bundled
  sample (segment: on coco128-seg), validating with the matching val.py patched the same way;
- ``several processes``: the bash block as written (torchrun on the CPU, gloo).

Data: the block runs beside a copy of the bundled ``data/`` and, for a block marked ``dataset NAME``, a
copy of ../shared/datasets/NAME ($YOLO_DATA_BENCH_DATA), as the rest of the suite.  Those datasets' yamls
say ``path: .``, which Ultralytics and YOLOv5 do not read from the yaml's folder: each copy's yaml is given
an absolute ``path`` first, as docs/ultralytics.md tells a reader to do.  Nothing else is rewritten: an
example on the bundled sample (whose yaml has no ``path``) runs exactly as written.
"""
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "compat")]
from docs_examples import DATASETS, blocks, run, workspace  # noqa: E402

COMPAT = [b for b in blocks() if b.where == "compat"]

ULTRALYTICS_PRELUDE = '''
import os, tempfile
os.environ["YOLO_OFFLINE"] = "1"
os.environ["YOLO_CONFIG_DIR"] = tempfile.mkdtemp(prefix="ultralytics_cfg_")
from ultralytics.engine.model import Model
_train, _val = Model.train, Model.val
TINY = dict(epochs=1, imgsz=64, batch=8, device="cpu", plots=False, amp=False, workers=0, fraction=0.25,
            project=os.path.abspath("runs"))
def train(self, *args, **kwargs):
    return _train(self, *args, **{**kwargs, **TINY})
def val(self, *args, **kwargs):
    return _val(self, *args, **{**kwargs, "imgsz": 64, "batch": 8, "device": "cpu", "plots": False})
Model.train, Model.val = train, val
'''


def test_there_are_compat_examples():
    assert any("ultralytics" in b.needs for b in COMPAT)
    assert any(n.startswith("yolov5 ") for b in COMPAT for n in b.needs)
    assert any(b.several_processes for b in COMPAT)


def yolov5_script_run(block, tmp: Path):
    """Put the block's line into a copy of the YOLOv5 script it names (and the matching val.py), train."""
    import yolov5_train_val as base  # the same helpers the train.py comparison uses
    (need,) = block.needs
    script = need.split(" ", 1)[1]
    segment = script.startswith("segment/")
    line = next(ln for ln in block.code.splitlines() if ln.startswith(("from ", "import ")))
    v5 = base.yolov5_dir()
    scripts = tmp / "scripts"
    scripts.mkdir()
    base.PATCH = {"train.py": line, "val.py": line if segment else "from yolo_data import create_dataloader"}
    src = v5 / "segment" if segment else v5
    if script.endswith("val.py"):  # val.py's line: checked through train.py's validation, as train.py runs it
        base.PATCH = {"train.py": "from yolo_data import create_dataloader, torch_distributed_zero_first",
                      "val.py": line}
    train = base.patched(src / "train.py", scripts / "train.py")
    base.patched(src / "val.py", scripts / "val.py")
    # YOLOv5 resolves a relative 'path' against its own folder: give it the absolute one
    yaml_file = workspace_dataset(tmp, "coco128-seg") / "data.yaml" if segment else tmp / "data" / "sample.yaml"
    data = with_absolute_path(yaml_file, tmp / "v5data.yaml")
    cfg = v5 / "models" / "segment" / "yolov5n-seg.yaml" if segment else v5 / "models" / "yolov5n.yaml"
    args = ["--img", 64, "--batch", 8, "--epochs", 1, "--weights", "", "--cfg", cfg, "--data", data,
            "--hyp", v5 / "data" / "hyps" / "hyp.scratch-low.yaml", "--device", "cpu", "--workers", 0,
            "--noplots", "--exist-ok", "--project", tmp / "runs", "--name", "docs"]
    rc, _ = base.run_script(train, args, tmp, tmp / "train.log")
    return rc, (tmp / "train.log").read_text()


def with_absolute_path(yaml_file: Path, out: Path) -> Path:
    """Write ``yaml_file``'s dataset spec to ``out`` with its ``path`` made absolute (YOLOv5 resolves a
    relative one against its own folder, Ultralytics against its datasets folder, not the yaml's)."""
    spec = yaml.safe_load(yaml_file.read_text())
    spec["path"] = str((yaml_file.parent / spec.get("path", ".")).resolve())
    out.write_text(yaml.safe_dump(spec))
    return out


def workspace_dataset(tmp: Path, name: str) -> Path:
    if not (tmp / name).exists():
        shutil.copytree(DATASETS / name, tmp / name, ignore=shutil.ignore_patterns("*.cache"))
    return tmp / name


@pytest.mark.parametrize("block", COMPAT, ids=lambda b: b.id)
def test_example_runs_with_the_peers(block, tmp_path):
    assert all((DATASETS / d).is_dir() for d in block.datasets), f"{block.datasets} not all in {DATASETS}"
    cwd = workspace(tmp_path, block)
    for name in block.datasets:  # what the docs say such an example needs (see the docstring)
        for yaml_file in (cwd / name).glob("*.yaml"):
            with_absolute_path(yaml_file, yaml_file)
    if "ultralytics" in block.needs:
        r = run(block, cwd, prelude=ULTRALYTICS_PRELUDE, timeout=600)
        rc, out = r.returncode, r.stdout + r.stderr
    elif block.needs:
        rc, out = yolov5_script_run(block, cwd)
    else:
        r = run(block, cwd, env={"OMP_NUM_THREADS": "1"}, timeout=600)
        rc, out = r.returncode, r.stdout + r.stderr
    assert rc == 0, f"{block.id} failed:\n{block.code}\n{out[-4000:]}"
