"""The compatibility suite: yolo_data against YOLOv5 7.0, Ultralytics 8.4 and pycocotools, and Ultralytics'
trainer in Ray Train workers, in the peer environment (benchmarks/requirements-peers.txt), as pytest tests.

    .peer-venv/bin/python -m pytest -q benchmarks/compat

Each test runs one of the comparison scripts beside this file (the same a reader runs by hand, see
BENCHMARKS.md) and checks what it concludes.  Where a peer is missing the suite fails, it never
skips.  Data: the datasets folder beside the project ($YOLO_DATA_BENCH_DATA, default
../shared/datasets), which must be there.
"""
import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = Path(os.environ.get("YOLO_DATA_BENCH_DATA") or ROOT.parent / "shared" / "datasets")
# found, not imported: importing Ultralytics here would write its settings into $HOME (the scripts
# isolate it in a temporary folder first)
MISSING = [m for m in ("yolov5", "ultralytics", "pycocotools", "ray") if find_spec(m) is None]


def test_every_peer_is_installed():
    assert not MISSING, (f"{', '.join(MISSING)} not installed in {sys.executable}: pip install -r "
                         "benchmarks/requirements-peers.txt")


def run(script: str, *args: str, timeout: int = 900, check: bool = True) -> str:
    """Run ``benchmarks/compat/<script>`` with this Python; returns its output (stdout), failing the test on a
    non-zero exit (unless ``check`` is False) with the output's end."""
    assert DATA.is_dir(), f"the datasets folder {DATA} is missing (set YOLO_DATA_BENCH_DATA)"
    env = {**os.environ, "YOLO_DATA_BENCH_DATA": str(DATA)}
    p = subprocess.run([sys.executable, str(HERE / script), *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0 or not check, f"{script} {' '.join(args)} exited {p.returncode}:\n{(p.stdout + p.stderr)[-4000:]}"
    return p.stdout


def test_yolov5_parity_of_evaluation_batches_on_coco128_and_bccd():
    # (not on the bundled sample: one of its label files mixes polygon and box rows, which YOLOv5 reads
    # as 2-point polygons on purpose of its own; README, "Where YOLOv5 and yolo_data differ on purpose")
    assert "ALL EQUAL" in run("parity_yolov5.py")


def test_yolov5_seg_parity_of_evaluation_batches_and_masks():
    assert "ALL EQUAL" in run("parity_yolov5_seg.py")


def test_yolov5_train_and_val_scripts_run_on_yolo_data():
    out = run("yolov5_train_val.py", "--flags", "", "--img", "160", check=False)
    assert "train runs failed: none" in out and "metrics identical: True" in out, out[-3000:]
    # YOLOv5's NMS keeps only the images it reached within its wall-clock limit: where it says it hit
    # the limit, which boxes were saved depends on timing, not on the loader
    boxes = re.search(r"saved boxes identical \(([0-9,]+) label files, ([0-9,]+) boxes\): (True|False)", out)
    assert boxes and (boxes.group(3) == "True" or "NMS hit its time limit" in out), out[-3000:]
    run("yolov5_seg_train_val.py")


def test_ultralytics_validation_inputs_and_metrics_equal_for_every_task():
    """Ultralytics' validation inputs and the plug-in's for every task; then detect (bccd, 16 images) and obb
    (pen-obb) trained briefly with YoloDataTrainer, and both validators' metrics on the same weights."""
    out = run("ultralytics_tasks.py", "--tasks", "segment", "pose", "--epochs", "0")
    assert "validation inputs identical for segment, pose: True" in out
    out = run("ultralytics_tasks.py", "--tasks", "detect", "--epochs", "60", "--batch", "4", "--val-images", "16")
    assert "validation inputs and metrics identical for detect: True" in out
    # identical and not trivially so: the model found some of the cells
    m = re.search(r"\[detect\]\s+metrics/mAP50\(B\)\s+Ultralytics ([0-9.]+)\s+yolo_data ([0-9.]+)", out)
    assert m and float(m.group(1)) > 0, out[-3000:]
    out = run("ultralytics_tasks.py", "--tasks", "obb", "--epochs", "100", "--batch", "4")
    assert "validation inputs and metrics identical for obb: True" in out


def test_ultralytics_first_resize_and_validation_pixels_on_awkward_sizes():
    out = run("ultralytics_sizes.py")
    assert "pixels differ in 0, classes in 0, ori_shape in 0, ratio_pad in 0" in out
    assert "sizes differ in 0, pixels in 0" in out


def test_coco_and_voc_read_in_place_against_pycocotools_and_the_yolo_conversion():
    run("coco_voc_parity.py")


def test_ultralytics_trainer_takes_class_balance_for_its_train_loader_and_ddp_ranks():
    out = run("ultralytics_class_balance.py")
    assert "train loader: 5 steps of 4, 18 draws from 16 images" in out
    for line in ("class_balance reached the train loader: True", "model callbacks keep nothing of the run: True",
                 "a DDP rank's trainer has class_balance 0.5: True"):
        assert line in out, out[-3000:]


def test_ultralytics_trainer_trains_from_an_s3_bucket_with_the_batches_of_a_local_copy():
    out = run("ultralytics_s3.py")
    for line in ("trained and validated from the bucket: True", "next train batch equals the local copy's: True",
                 "nothing written into the bucket: True"):
        assert line in out, out[-3000:]


def test_ultralytics_trainer_trains_from_memory_sources_with_the_batches_of_the_files():
    out = run("ultralytics_memory.py")
    for line in ("trained and validated from memory: True", "next train batch equals the local copy's: True",
                 "args.yaml names the data by its string: True"):
        assert line in out, out[-3000:]


def test_ultralytics_trainer_trains_from_an_ndjson_export_of_signed_urls_read_in_place():
    out = run("ultralytics_ndjson.py")
    for line in ("trained and validated from the export's URLs: True",
                 "next train batch equals the local copy's: True", "no converted copy: True"):
        assert line in out, out[-3000:]


def test_ultralytics_classes_give_its_own_rows_and_the_remap_trains_a_model_of_the_kept_classes():
    out = run("ultralytics_classes.py")
    for line in ("classes gives Ultralytics' rows: True",
                 "without remap_classes the model is made for 80 classes: True",
                 "trained 1 epoch with classes=[2, 0] remap_classes=True: completed True",
                 "model nc 2, names {0: 'car', 1: 'person'}: True", "weights' names {0: 'car', 1: 'person'}: True",
                 "a DDP rank's trainer has the kept names: True"):
        assert line in out, out[-3000:]
    assert re.search(r"loaders' class ids train \[[01, ]+\] val \[0, 1\]: True", out), out[-3000:]
    assert re.search(r"model.val with YoloDataValidator and the remap: 2 classes, .*: True", out), out[-3000:]
    assert re.search(r"validated without remap_classes, the validator says: .*yolo_data: the model's class names "
                     r"are not its labels' \(0: 'car' / 'person'", out), out[-3000:]


def test_ultralytics_trainer_in_ray_train_workers_is_one_ddp_rank_each():
    """A two-node Ray cluster on loopback: YoloDataTrainer in 1 and in 2 TorchTrainer workers (the 2 train as
    DDP ranks: equal parameters after the epoch); Ultralytics' own trainer in 2 workers, as docs/ultralytics.md
    says it behaves there."""
    out = run("ultralytics_ray.py", timeout=600)
    for line in ("trained and validated, last.pt written: True", "one DDP rank each, on half of the images: True",
                 "parameters equal on both ranks after the epoch: True", "parameters changed by the epoch: True"):
        assert line in out, out[-3000:]
    alone = out.split("Ultralytics' own DetectionTrainer", 1)[-1]
    assert alone.count("trainer world size 0, model DetectionModel") == 2, out[-3000:]
    assert alone.count("last loss 0.0; ended with RuntimeError: Found no NVIDIA driver") == 2, out[-3000:]
    assert "ultralytics/engine/validator.py" in alone and "parameters equal on both ranks after the epoch: False" in alone


def test_ultralytics_plugin_on_1_4_and_10_channels_equals_its_own_inputs_and_trains_a_model_of_c_channels():
    """Copies of 16 coco128 images with 1, 4 and 10 channels: the plug-in's validation inputs equal Ultralytics'
    own pixel for pixel; yolo11n.yaml trains an epoch with YoloDataTrainer, its first conv taking C channels."""
    out = run("ultralytics_channels.py", timeout=300)
    assert "validation inputs identical for 1, 4, 10 channels: True" in out, out[-3000:]
    for c in (1, 4, 10):
        assert re.search(rf"\[{c} channels\] 16 images of {c} bands uint8: pixels differ in 0, classes in 0", out), out
        for line in (f"[{c} channels] model's first conv in_channels {c}: True",
                     f"[{c} channels] epoch 1 finished", f"[{c} channels] model.val with YoloDataValidator"):
            assert line in out, out[-3000:]
        assert re.search(rf"\[{c} channels\] \d+ train batches of {c} channels torch.uint8, .*: True", out), out


def test_yolov5_model_of_c_channels_trains_an_epoch_of_create_dataloader_on_1_4_and_10_channels():
    out = run("yolov5_channels.py", timeout=300)
    for c in (1, 4, 10):
        assert re.search(rf"\[{c} channels\] first conv in_channels {c}; batches of {c} channels torch.uint8, .*; "
                         r"(\d+) of \1 steps .*epoch finished: True", out), out[-3000:]


def test_the_package_suites_ultralytics_tests_run_here():
    """The tests of tests/ that need Ultralytics (its validation inputs, a trainer's epoch, the census of
    its default.yaml, a trainer as a DDP rank of a process group opened before it) skip in the package's own environment; here they must run, none skipped."""
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                        "tests/integrations/test_ultralytics_args.py", "tests/integrations/test_ultralytics_integration.py",
                        "tests/integrations/test_ultralytics_group.py"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = (p.stdout + p.stderr)[-4000:]
    assert p.returncode == 0 and "skipped" not in tail, tail
