"""tools/build_cache.py and the console scripts as a user runs them, from a checkout and from a
non-editable install."""
import os
import shutil
import sys
from pathlib import Path

import pytest

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
    assert ".venv/bin/pip install . && .venv/bin/yolo-data-demo" in readme  # the main job, non-editable


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


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The project as ``pip install .`` puts it (a wheel, not editable) into a folder of its own, built
    from a copy of what the wheel is made of, links kept (the checkout gets no build folder), with a
    stray label cache beside the sample's labels that the wheel must leave out: that folder."""
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.cache")
    shutil.copytree(ROOT / "data", src / "data", ignore=skip)
    shutil.copytree(ROOT / "yolo_data", src / "yolo_data", symlinks=True, ignore=skip)
    (src / "data" / "sample" / "labels" / "train.yolo_data.cache").write_bytes(b"stray")
    site = root / "site"
    r = run_all([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                 "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return site


def run_installed(site: Path, cwd: Path, *args, timeout=300):
    """A console script of the installed copy, run from ``cwd`` with that copy first on the path."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    return run_all([str(site / "bin" / args[0]), *map(str, args[1:])], capture_output=True, text=True, cwd=cwd,
                   env=env, timeout=timeout)


def test_console_scripts_run_from_a_non_editable_install(installed, tmp_path, user_cache_dir):
    """Each console script from a folder outside the checkout, on the sample that ships in the wheel; the
    sample's label caches go to the per-user cache folder, never into the installed package."""
    away = tmp_path / "elsewhere"
    away.mkdir()
    r = run_all([sys.executable, "-c", "import yolo_data; print(yolo_data.__file__)"], capture_output=True,
                text=True, cwd=away, env={**os.environ, "PYTHONPATH": str(installed)}, timeout=120)
    assert r.stdout.strip() == str(installed / "yolo_data" / "__init__.py"), r.stdout + r.stderr
    sample = installed / "yolo_data" / "data"
    assert (sample / "sample.yaml").is_file() and len(list(sample.glob("hyps/*.yaml"))) == 3
    assert not list(installed.rglob("*.cache"))  # the stray cache of the source stayed out of the wheel

    r = run_installed(installed, away, "yolo-data-demo", "--imgsz", 64)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "one batch of the 16-image train split at imgsz 64:" in r.stdout
    assert str(user_cache_dir) in r.stdout.splitlines()[1]
    r = run_installed(installed, away, "yolo-data-cache")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[1].split()[:2] == ["train", "16"] and "(reused)" in r.stdout.splitlines()[1]
    r = run_installed(installed, away, "yolo-data", "cache", "--workers", 1)
    assert r.returncode == 0 and "(reused)" in r.stdout, r.stderr[-3000:]
    assert not list(installed.rglob("*.cache")) and not list(away.iterdir())


def test_a_bad_path_is_one_line_from_the_installed_demo(installed, tmp_path):
    r = run_installed(installed, tmp_path, "yolo-data-demo", "missing.yaml", timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "error: dataset yaml missing.yaml does not exist\n")


@pytest.mark.parametrize("command", ["demo", "cache"])
@pytest.mark.parametrize("data", ["missing.yaml", "no/such/folder", "broken.yaml"])
def test_a_bad_path_is_one_line(command, data, tmp_path, monkeypatch, capsys):
    """``yolo-data demo|cache BAD``: one line on stderr naming the path, exit 2, no traceback."""
    from yolo_data.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.yaml").write_text("train: [unclosed\n")
    status = main([command, data])
    out, err = capsys.readouterr()
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("error: ") and data in err, err
