"""tools/build_cache.py as a user runs it."""
import shutil
import sys
from pathlib import Path

from conftest import make_dataset, run_all

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd=None):
    return run_all([sys.executable, str(ROOT / "tools" / "build_cache.py"), *map(str, args)],
                   capture_output=True, text=True, cwd=cwd, timeout=120)


def test_help():
    r = run("--help")
    assert r.returncode == 0 and "--workers" in r.stdout and "--cache-dir" in r.stdout and "--force" in r.stdout


def test_table_reuse_force_and_problems(tmp_path):
    yaml = make_dataset(tmp_path / "ds", [("a.jpg", (32, 32), "0 0.5 0.5 0.1 0.1\n"),
                                          ("b.jpg", (32, 32), "9 0.5 0.5 0.1 0.1\n"),
                                          ("c.jpg", (32, 32), None)])
    r = run(yaml)
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()[:2]
    assert header.split()[:6] == ["split", "images", "boxes", "backgrounds", "corrupt", "warnings"]
    assert row.split()[:6] == ["train", "2", "1", "1", "1", "0"] and "(built)" in row
    assert "b.txt: line 1: class 9 but the dataset has 3 names" in r.stdout
    assert "(reused)" in run(yaml).stdout.splitlines()[1]
    assert "(built)" in run(yaml, "--force").stdout.splitlines()[1]
    r = run(tmp_path / "ds" / "images" / "train", "--cache-dir", tmp_path / "elsewhere", "--workers", "1")
    assert r.returncode == 0 and str(tmp_path / "elsewhere") in r.stdout


def test_exit_status_when_a_split_has_no_usable_image(tmp_path):
    yaml = make_dataset(tmp_path / "ds", [("a.jpg", (32, 32), "0 0.5 0.5 0.1\n")])
    r = run(yaml)
    assert r.returncode == 1 and "no usable image in: train" in r.stderr and "4 columns" in r.stdout
    r = run(tmp_path / "missing.yaml")
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_coco128_report(coco128):
    r = run(coco128 / "coco128.yaml")
    assert r.returncode == 0, r.stderr
    train = next(line for line in r.stdout.splitlines() if line.startswith("train"))
    assert train.split()[1:5] == ["128", "929", "2", "0"]


def test_readme_commands_and_ci_agree():
    readme = (ROOT / "README.md").read_text()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert len(ci) == 2 and all(line in readme for line in ci)  # the README's test and compatibility commands
    assert "pytest -q tests" in ci[0] and "pytest -q benchmarks/compat" in ci[1]
    assert "tools/demo.py" in readme


def test_console_command_is_installed():
    exe = Path(sys.executable).parent / "yolo-data-cache"
    assert exe.exists(), "pip install should create the yolo-data-cache command"
    r = run_all([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--cache-dir" in r.stdout


def test_the_readmes_main_job_runs_on_the_bundled_sample(tmp_path):
    """tools/demo.py, the README's first command, on a copy of the bundled sample (it writes label caches)."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    r = run_all([sys.executable, str(ROOT / "tools" / "demo.py"), str(tmp_path / "data" / "sample.yaml")],
                capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "one batch of the 16-image train split at imgsz 320:" in r.stdout
    assert "imgs     (4, 3, 320, 320) torch.uint8 (RGB)" in r.stdout
