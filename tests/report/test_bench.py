"""``yolo-data bench`` on the bundled sample: every stage row with a positive time, shares that sum to
100%, the verdict and the suggested workers redone from the printed numbers, ``--step-ms`` as the
consumer's rate, one progress line per phase off a terminal, the loader's workers reaped, and a bad
path named in one line.  No timing is compared with a threshold: the numbers are checked against each
other."""
import io
import math
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from conftest import run_all
from procs import descendants
from yolo_data.cli import SAMPLE_YAML, main
from yolo_data.report.bench import STAGES, Progress, cpu_count, loader_rate, suggestion, verdict
from yolo_data.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CLI = "import sys; from yolo_data.cli import main; sys.exit(main(sys.argv[1:]))"
NUMBER = r"(\d+(?:\.\d+)?)"


def bench(*args):
    """``yolo-data bench`` on the bundled sample at a small size, in a process of its own (its loader's
    workers ended with it, whatever happens)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = run_all([sys.executable, "-c", CLI, "bench", str(SAMPLE_YAML), "--img-size", "128", "--batch", "4",
                 "--images", "8", "--device", "cpu", *map(str, args)], timeout=300, capture_output=True,
                text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r


def parsed(out: str) -> dict:
    """The numbers of a bench report, as printed."""
    rows = {m[1]: (float(m[2]), float(m[3]))
            for m in re.finditer(rf"^(\w+) +{NUMBER} +{NUMBER}%$", out, re.M)}
    loader = re.search(rf"^loader: {NUMBER} img/s with (\d+) workers? ", out, re.M)
    cpu = re.search(rf"^ +CPU {NUMBER} ms/img: main {NUMBER} \+ workers {NUMBER} ", out, re.M)
    consumer = re.search(rf"^consumer: {NUMBER} img/s: {NUMBER} ms per batch of (\d+) ", out, re.M)
    suggest = re.search(rf"^suggested workers: (\d+) = ceil\({NUMBER} img/s x {NUMBER} ms CPU/img / 1000\) = "
                        rf"ceil\({NUMBER}\)(.*)$", out, re.M)
    assert loader and cpu and consumer and suggest, out
    return {"rows": rows, "rate": float(loader[1]), "workers": int(loader[2]), "cpu": float(cpu[1]),
            "cpu_parts": (float(cpu[2]), float(cpu[3])), "consumer": float(consumer[1]),
            "step_ms": float(consumer[2]), "batch": int(consumer[3]), "suggested": int(suggest[1]),
            "suggest_args": (float(suggest[2]), float(suggest[3]), float(suggest[4])), "suggest_rest": suggest[5],
            "verdict": re.search(r"^verdict: (.*)$", out, re.M)[1]}


def check_consistent(report: dict) -> None:
    """The verdict and the suggestion follow from the printed rates and CPU time."""
    rate, consumer, cpu, cpus = report["rate"], report["consumer"], report["cpu"], cpu_count()
    if rate < consumer:
        said = re.fullmatch(rf"the loader is the bottleneck \({NUMBER} img/s < {NUMBER} img/s\)", report["verdict"])
        assert said and (float(said[1]), float(said[2])) == (rate, consumer), report["verdict"]
    else:
        spare = round(100 * (rate / consumer - 1))
        assert report["verdict"] == f"the model is the bottleneck: the loader keeps up with {spare}% to spare"
    assert report["suggest_args"][:2] == (consumer, cpu)
    need = consumer * cpu / 1000
    assert report["suggest_args"][2] == pytest.approx(need, abs=0.005)
    assert report["suggested"] == min(max(math.ceil(need), 1), cpus)
    capped = math.ceil(need) > cpus
    assert report["suggest_rest"].startswith(f", capped at {cpus} CPUs" if capped else f" (of {cpus} CPUs)")


@pytest.mark.parametrize("workers, step_ms", [(0, None), (1, 1e-3), (1, 1e4)],
                         ids=["0 workers, stand-in step", "1 worker, fast step", "1 worker, slow step"])
def test_the_report_on_the_bundled_sample(workers, step_ms):
    r = bench("--workers", workers, *(["--step-ms", step_ms] if step_ms else []))
    report = parsed(r.stdout)
    rows = report["rows"]
    assert list(rows) == list(STAGES) + ["total"], r.stdout
    assert all(ms > 0 for ms, _ in rows.values()), r.stdout
    assert sum(share for name, (_, share) in rows.items() if name != "total") == pytest.approx(100, abs=0.3)
    assert rows["total"][0] == pytest.approx(sum(ms for name, (ms, _) in rows.items() if name != "total"), abs=0.003)
    assert report["workers"] == workers and report["rate"] > 0
    assert report["cpu"] == pytest.approx(sum(report["cpu_parts"]), abs=0.011) and report["cpu"] > 0
    assert report["batch"] == 4
    if step_ms is not None:  # the caller's step: the consumer's rate is the batch over it
        assert report["step_ms"] == pytest.approx(step_ms, abs=0.05)
        assert report["consumer"] == pytest.approx(1000 * 4 / step_ms, rel=0.01)
        assert "--step-ms" in r.stdout and "stand-in" not in r.stdout
    else:
        assert report["consumer"] > 0 and "stand-in model" in r.stdout
    check_consistent(report)
    # off a terminal, one line per phase and no bar
    phases = ["timing stages on one thread", f"timing the loader, {workers} worker"]
    phases += ["timing the stand-in step"] if step_ms is None else []
    lines = [line for line in r.stderr.splitlines() if line.startswith("bench: ")]
    assert [p in line for p, line in zip(phases, lines)] == [True] * len(phases) and len(lines) == len(phases)
    assert "\r" not in r.stderr


def test_both_verdicts_and_a_capped_suggestion():
    assert verdict(99.5, 200.0) == "verdict: the loader is the bottleneck (99.5 img/s < 200.0 img/s)"
    assert verdict(300.0, 200.0) == "verdict: the model is the bottleneck: the loader keeps up with 50% to spare"
    assert suggestion(10.0, 250.0, 16) == "suggested workers: 3 = ceil(250.0 img/s x 10.00 ms CPU/img / 1000) = " \
                                          "ceil(2.50) (of 16 CPUs)"
    assert suggestion(4.0, 250.0, 16).startswith("suggested workers: 1 = ")  # at least one worker
    capped = suggestion(10.0, 5000.0, 16)
    assert capped.startswith("suggested workers: 16 = ceil(5000.0 img/s x 10.00 ms CPU/img / 1000) = ceil(50.00), "
                             "capped at 16 CPUs: about 1600.0 img/s at most"), capped


def test_the_loaders_workers_are_reaped_and_their_cpu_counted(user_cache_dir):
    before = set(descendants(os.getpid()))
    settings = Settings.training(img_size=64, batch_size=4, workers=1, cache_dir=str(user_cache_dir))
    rate = loader_rate(str(SAMPLE_YAML), settings, 8, progress=False)
    assert set(descendants(os.getpid())) == before
    assert rate.workers == 1 and rate.images >= 8 and rate.cpu_workers >= 0 and rate.cpu_main > 0
    assert rate.cpu_how == "/proc while they ran"  # read before the worker ended


def test_the_bar_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(sys, "stderr", Terminal())
    with Progress("timing", 3) as bar:
        for _ in range(3):
            bar.update(1)
    drawn = sys.stderr.getvalue()
    assert "\rtiming |" in drawn and "| 3/3 img" in drawn and drawn.endswith("\r\033[K")
    assert "bench:" not in drawn


@pytest.mark.parametrize("data", ["missing.yaml", "no/such/folder"])
def test_a_bad_path_is_one_line_naming_it(data, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status = main(["bench", data, "--device", "cpu"])
    out, err = capsys.readouterr()
    assert status == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("error: ") and data in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a CUDA device that is not there")
def test_a_cuda_device_that_is_not_there_is_one_line(capsys):
    assert main(["bench", str(SAMPLE_YAML), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: device cuda: ") and "no CUDA device" in err, err


def test_the_device_stage_report():
    """``--device-stage``: the workers hand each item's layout over and the stage makes the pixels: its
    row replaces the transfer's, the JPEGs are read by the workers and decoded by the stage (no decode
    row time), and the suggestion counts the workers' CPU only (the stage runs in the main process)."""
    r = bench("--workers", 1, "--step-ms", 1e4, "--device-stage")
    report = parsed(r.stdout.replace("device stage ", "device_stage "))
    rows = report["rows"]
    assert list(rows) == ["read", "decode", "augment", "collate", "device_stage", "total"], r.stdout
    assert rows["decode"][0] == 0 and rows["read"][0] > 0 and rows["device_stage"][0] > 0
    assert sum(share for name, (_, share) in rows.items() if name != "total") == pytest.approx(100, abs=0.3)
    assert "with the device stage" in r.stdout.splitlines()[0]
    workers_cpu = report["cpu_parts"][1]
    assert report["suggest_args"][:2] == (report["consumer"], workers_cpu)
    assert report["suggested"] == min(max(math.ceil(report["consumer"] * workers_cpu / 1000), 1), cpu_count())
