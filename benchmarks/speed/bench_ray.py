"""Ray Train against torchrun on one machine: seconds from the call that starts training to the first batch,
and the training loader's images per second, the same loop under both launchers.

    python benchmarks/speed/run.py ray                          # coco128 x32, 2 and 4 workers, 3 rounds
    python benchmarks/speed/run.py ray --quick --no-results     # smoke run: the bundled sample, 2 workers
    python benchmarks/speed/run.py ray --data DATASETS/coco128/images/train2017 --copies 64 --repeats 5

Needs Ray Train (``pip install "yolo-data[ray]"``).  The script starts its own Ray node on loopback (the
head at ``--node-ip``, 127.0.0.2, every port picked free, Ray's files in a temporary folder; ``--num-cpus``
the machine's cores, at least the largest worker count, since each Ray worker asks for one CPU), once,
before the runs: a user's cluster is up before ``trainer.fit()``.  Every process the node started is killed
(SIGKILL, found by a mark in their environment: tools/proctree.py) however the run ends; so is every
process of each launch (the Ray driver, torchrun, the ranks, their DataLoader workers).

One launch, for each of ``--workers`` (2 and 4) and each launcher, alternating within a round and which
goes first from round to round:

* Ray: a driver process joins the node (``ray.init``) and calls ``TorchTrainer(...).fit()`` with
  ``ScalingConfig(num_workers=N, resources_per_worker={"CPU": 1})`` (gloo); the start is the time just
  before ``fit()``.
* torchrun: ``python -m torch.distributed.run --standalone --nproc_per_node N`` on this script (gloo); the
  start is the time just before the launch.

Both run one loop body: the loader built with ``yolo_data.integrations.ray.build_ray_loader`` under Ray
and with ``yolo_data.build.build_loader(rank=LOCAL_RANK)`` under torchrun (nothing else differs): the
training preset (mosaic, hyp.scratch-low), ``--img-size`` 320, per-rank batch ``--batch`` 8,
``--loader-workers`` 1 per rank, seed 0, one epoch, no model.  After each batch the ranks add up their
images with one all_reduce, which keeps them in step as a training loop's gradient all_reduce would.
World rank 0 writes the time (``time.time()``) at which it entered the loop body (process group up), had
its loader and had each batch in hand.  Measured: the first batch, seconds from the start (and its parts:
until the loop body runs, the loader's build); images per second over the steps after the first ``--skip``
(3), and over the epoch's second half, all ranks together.  Medians over ``--repeats`` rounds, after
``--warmup`` untimed launches of each.

Data: ``--data``, an image folder with its labels (default coco128's train2017 in $YOLO_DATA_BENCH_DATA or
../shared/datasets), copied to a temporary folder with ``--copies`` hard-linked copies of each image, its label
cache written there before the runs (untimed).  The epoch must be long: each ``fit()`` starts Ray's actors of
the run (the controller, a placement-group cleaner, a synchronisation actor, Ray Data's dataset manager) and
fresh idle workers beside the training workers, which take CPU in the first seconds of the epoch (on 2 shared
cores an epoch of coco128 x8 gave Ray about half torchrun's rate; later in an epoch of x96 the node's other
processes used under 2% of a core).

Ray's raylet starts its workers at nice 15 (``RAY_worker_niceness``), and the DataLoader workers they fork
inherit it; torchrun's ranks run at the nice value of this script (0 by default).  On a quiet machine that
changes nothing; on a machine shared with other work at nice 0, Ray's loader gets less of the cores (on 2
shared cores: 0.75x torchrun's images/s at Ray's default, no less than torchrun's with
``--worker-niceness 0``).  The report names the nice value rank 0 ran at under each launcher.  Output: a
markdown table on stdout, progress on stderr, ``benchmarks/results/ray.json``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib import util
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)
import proctree  # noqa: E402  (tools/, put on sys.path by common)
from common import REPO, log  # noqa: E402

LAUNCHERS = ("ray", "torchrun")
INSTALL = 'bench_ray.py: Ray Train is not installed in {}: pip install "yolo-data[ray]"'
DEFAULTS = {"copies": 32, "workers": [2, 4], "repeats": 3, "warmup": 1, "skip": 3}
QUICK = {"copies": 4, "workers": [2], "repeats": 1, "warmup": 0, "skip": 1}


# -- the loop body both launchers run (in the ranks: standard library, torch and yolo_data only) -----------
def rank_loop(cfg: dict, build) -> None:
    """One epoch of the training loader that ``build(images, settings)`` makes; world rank 0 writes its
    times to ``cfg['out']``: ``entered``, ``built`` and ``batches`` ([time, images of the step over all
    ranks] per step), as ``time.time()`` gives them."""
    import torch
    import torch.distributed as dist
    from yolo_data import Settings
    entered = time.time()
    settings = Settings.training(img_size=cfg["img_size"], batch_size=cfg["batch"], workers=cfg["loader_workers"],
                                 seed=cfg["seed"])
    loader = build(cfg["data"], settings)
    built = time.time()
    loader.sampler.set_epoch(0)
    batches = []
    for imgs, *_ in loader:
        got = time.time()
        images = torch.tensor([float(len(imgs))])
        dist.all_reduce(images)  # the ranks in step, as a gradient all_reduce keeps them
        batches.append([got, int(images.item())])
    if dist.get_rank() == 0:
        Path(cfg["out"]).write_text(json.dumps({"entered": entered, "built": built, "batches": batches,
                                                "loader_workers": loader.num_workers,
                                                "nice": os.getpriority(os.PRIO_PROCESS, 0)}))


def ray_loop(cfg: dict) -> None:
    """``train_loop_per_worker`` of the Ray launch."""
    from yolo_data.integrations.ray import build_ray_loader
    rank_loop(cfg, lambda data, settings: build_ray_loader(data, settings))


def torchrun_rank(cfg: dict) -> None:
    """One rank of the torchrun launch."""
    import torch.distributed as dist
    from yolo_data.build import build_loader
    dist.init_process_group("gloo")
    try:
        rank_loop(cfg, lambda data, settings: build_loader(data, settings, rank=int(os.environ["LOCAL_RANK"])))
    finally:
        dist.destroy_process_group()


def ray_driver(address: str, cfg: dict) -> None:
    """The Ray launch: join the node, ``TorchTrainer(...).fit()``; prints one JSON line (the time just
    before ``fit()``, its seconds, the error it raised)."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    ray.init(address=address, log_to_driver=False)
    trainer = TorchTrainer(ray_loop, train_loop_config=cfg,
                           scaling_config=ScalingConfig(num_workers=cfg["world"], resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(name=cfg["name"], storage_path=cfg["storage"]))
    start, error = time.time(), None
    try:
        trainer.fit()
    except Exception as e:  # noqa: BLE001 - the benchmark reports what the run ended with
        error = f"{type(e).__name__}: {e}"
    print(json.dumps({"start": start, "fit_s": time.time() - start, "error": error}), flush=True)
    ray.shutdown()


# -- the Ray node ----------------------------------------------------------------------------------------
def free_ports(n: int) -> List[int]:
    """``n`` distinct TCP ports free on every address now (held open together while picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ray_cli() -> List[str]:
    """The ``ray`` command of this interpreter's environment."""
    beside = Path(sys.executable).with_name("ray")
    if beside.is_file():
        return [str(beside)]
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


@contextlib.contextmanager
def ray_node(node_ip: str, num_cpus: int, env: Dict[str, str], logs: Path, niceness: Optional[int] = None,
             timeout: float = 180):
    """One Ray node, the head, on ``node_ip`` for the with-block; yields its address (``ip:port``).

    Every port is picked free (other clusters may run on this machine: their ports and Ray's defaults are
    left alone), Ray's files go to a temporary folder of its own (under /tmp: Ray's socket paths must
    stay under 108 bytes), and on leaving every process the node started is killed (``proctree.end_marked``
    of its mark and of its session: the node runs in a session of its own) and the folder removed.
    """
    port, *others = free_ports(8)
    options = ["--node-manager-port", "--object-manager-port", "--dashboard-port", "--dashboard-agent-listen-port",
               "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]
    temp = Path(tempfile.mkdtemp(prefix="bench_ray_node_", dir="/tmp" if os.path.isdir("/tmp") else None))
    mark, env = common.marked_env(env)
    if niceness is not None:  # the raylet gives its workers this nice value (Ray's default: 15)
        env["RAY_worker_niceness"] = str(niceness)
    cmd = [*ray_cli(), "start", "--head", "--block", "--node-ip-address", node_ip, "--port", str(port),
           *[str(x) for pair in zip(options, others) for x in pair], "--num-cpus", str(num_cpus),
           "--object-store-memory", "200000000", "--include-dashboard=false", "--disable-usage-stats",
           "--temp-dir", str(temp)]
    proc = None
    try:
        # a session of its own: its processes are found by it, and a Ctrl-C reaches this script alone, which
        # kills the node
        with open(logs, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log(f"ray node: {node_ip}:{port}, {num_cpus} CPUs (temp folder {temp}, session {proc.pid})")
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in logs.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start {'ended' if proc.poll() is not None else 'still starting'}: "
                                   f"{logs.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        yield f"{node_ip}:{port}"
    finally:
        try:
            proctree.end_marked(mark, sessions=(proc.pid,) if proc is not None else ())
        finally:
            if proc is not None:
                proc.kill()  # gone already, unless the sweep gave up on some process
                proc.wait()
            shutil.rmtree(temp, ignore_errors=True)


# -- the measurements ------------------------------------------------------------------------------------
def prepare(src: Path, copies: int, root: Path, env: Dict[str, str]) -> Path:
    """``src`` (images/<split>, with labels/<split> beside) copied under ``root``, each image and label
    ``copies`` times (hard links), its label cache written; returns the copy's image folder."""
    images, labels = root / "images" / src.name, root / "labels" / src.name
    shutil.copytree(src, images)
    shutil.copytree(src.parent.parent / "labels" / src.name, labels)
    for folder in (images, labels):
        for f in sorted(folder.iterdir()):
            for k in range(1, copies):
                os.link(f, f.with_name(f"{f.stem}-{k}{f.suffix}"))
    # a process of its own: the scan's process pool would leave its resource tracker in this one
    p = common.run_tree([sys.executable, "-c", "import sys; from yolo_data.labels.split import load_split; "
                         "load_split(sys.argv[1])", str(images)], 600, env=env, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"the label scan failed: {p.stderr[-3000:]}")
    return images


def launch(launcher: str, world: int, cfg: dict, run_dir: Path, address: str, env: Dict[str, str],
           timeout: float) -> Dict[str, object]:
    """One launch of ``world`` ranks; its times (seconds) and img/s, or ``error``."""
    run_dir.mkdir(parents=True)
    cfg = dict(cfg, world=world, out=str(run_dir / "rank0.json"), storage=str(run_dir / "ray"), name="bench")
    config = run_dir / "config.json"
    config.write_text(json.dumps(cfg))
    here = str(Path(__file__).resolve())
    if launcher == "ray":
        cmd = [sys.executable, here, "--part", "ray-driver", "--address", address, "--config", str(config)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", here,
               "--part", "torchrun-rank", "--config", str(config)]
    start = time.time()
    try:
        p = common.run_tree(cmd, timeout, env=env, capture_output=True, text=True)
    except subprocess.TimeoutExpired as e:
        return {"error": f"{launcher}, {world} workers: still running after {timeout:.0f} s (killed); "
                         f"{common.as_text(e.stderr)[-500:]}"}
    out: Dict[str, object] = {"launch_s": time.time() - start}
    if launcher == "ray":
        line = ([x for x in p.stdout.splitlines() if x.startswith('{"start"')] or ["{}"])[-1]
        said = json.loads(line)
        if said.get("error") or "start" not in said:
            return {"error": f"ray, {world} workers: {said.get('error') or p.stderr[-1500:]}"}
        start, out["fit_s"] = said["start"], said["fit_s"]
    if p.returncode or not Path(cfg["out"]).is_file():
        return {"error": f"{launcher}, {world} workers: exit {p.returncode}: {p.stderr[-1500:]}"}
    return dict(out, **times(json.loads(Path(cfg["out"]).read_text()), start, cfg["skip"]))


def times(rank0: dict, start: float, skip: int) -> Dict[str, object]:
    """Rank 0's times made seconds from ``start``; img/s over the steps after the first ``skip``."""
    batches = rank0["batches"]
    out = {"first_batch_s": batches[0][0] - start, "to_loop_s": rank0["entered"] - start,
           "build_s": rank0["built"] - rank0["entered"], "steps": len(batches), "images": sum(b[1] for b in batches),
           "loader_workers": rank0["loader_workers"], "nice": rank0["nice"]}
    out["img_s"] = rate(batches, skip)
    out["img_s_late"] = rate(batches, max(len(batches) // 2, 1))
    return out


def rate(batches: List[List[float]], skip: int) -> float:
    """Images per second of the steps after the first ``skip`` (from the time the step ``skip`` - 1 was in
    hand to the last's); NaN where the epoch is too short for that window."""
    if not len(batches) > skip >= 1:
        return float("nan")
    window = batches[-1][0] - batches[skip - 1][0]
    return sum(b[1] for b in batches[skip:]) / window if window > 0 else float("nan")


ROWS = [("first_batch_s", "seconds to the first batch"),
        ("to_loop_s", "of which until the loop body runs (processes, process group)"),
        ("build_s", "of which building the loader"),
        ("img_s", "images/s after the first {skip} steps, all ranks"),
        ("img_s_late", "images/s over the epoch's second half, all ranks")]


def nice_of(runs: Dict[str, Dict[int, List[dict]]], launcher: str) -> str:
    """The nice values rank 0 ran at under ``launcher``, e.g. '15' ('?' where no run measured)."""
    values = sorted({r["nice"] for rs in runs[launcher].values() for r in rs if "nice" in r})
    return "/".join(map(str, values)) or "?"


def report(args, runs: Dict[str, Dict[int, List[dict]]], n_images: int, name: str, errors: List[str]) -> dict:
    """Prints the table; returns the medians ({launcher: {workers: {key: median}}})."""
    medians = {lw: {w: common.medians(rs) for w, rs in by.items()} for lw, by in runs.items()}
    print(f"### Ray Train against torchrun, one machine: {name} ({n_images:,} images)\n")
    print(f"Training loader (mosaic), img_size {args.img_size}, per-rank batch {args.batch}, {args.loader_workers} "
          f"loader worker(s) per rank, one epoch, no model; a Ray node on {args.node_ip} with {args.num_cpus} CPUs "
          f"started before the runs (TorchTrainer, gloo) against `torchrun --standalone` (gloo); {args.repeats} "
          f"round(s), launchers alternating; median (min–max) over rounds. {common.usable_cores()} cores; rank 0 "
          f"at nice {nice_of(runs, 'ray')} under Ray, {nice_of(runs, 'torchrun')} under torchrun.\n")
    print("| measure | workers | Ray Train | torchrun | Ray against torchrun |\n| --- | ---: | ---: | ---: | ---: |")
    for key, label in ROWS:
        for w in args.workers:
            vals = {lw: [r.get(key) for r in runs[lw][w] if "error" not in r] for lw in LAUNCHERS}
            ray, tr = (medians[lw][w].get(key) for lw in LAUNCHERS)
            digits = 0 if key.startswith("img_s") else 2
            if ray is None or tr is None:
                versus = "-"
            elif key.startswith("img_s"):
                versus = f"{ray / tr:.2f}×" if tr else "-"
            else:
                versus = f"{ray - tr:+.2f} s"
            print(f"| {label.format(skip=args.skip)} | {w} | {common.fmt_range(vals['ray'], digits)} | "
                  f"{common.fmt_range(vals['torchrun'], digits)} | {versus} |")
    common.report_end(errors)
    return medians


# -- the command -------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="image folder with labels/<split> beside (copied; default: "
                    "coco128/images/train2017 in $YOLO_DATA_BENCH_DATA or ../shared/datasets; --quick: the "
                    "bundled sample)")
    ap.add_argument("--copies", type=int, help="hard-linked copies of each image, a longer epoch (default 32)")
    ap.add_argument("--workers", type=int, nargs="+", help="Ray workers / torchrun ranks (default 2 4)")
    ap.add_argument("--repeats", type=int, help="rounds of every launch (default 3)")
    ap.add_argument("--warmup", type=int, help="untimed launches of each launcher first (default 1)")
    ap.add_argument("--skip", type=int, help="steps left out of the images/s window (default 3)")
    ap.add_argument("--img-size", type=int, default=320)
    ap.add_argument("--batch", type=int, default=8, help="per-rank batch")
    ap.add_argument("--loader-workers", type=int, default=1, help="DataLoader workers per rank")
    ap.add_argument("--node-ip", default="127.0.0.2", help="the Ray node's address (127.0.0.1 Ray replaces by "
                    "the machine's own)")
    ap.add_argument("--num-cpus", type=int, default=None, help="the Ray node's CPUs (default: the machine's "
                    "cores, at least the largest --workers)")
    ap.add_argument("--worker-niceness", type=int, default=None, help="the Ray node's RAY_worker_niceness: the "
                    "nice value of its workers and of the loader workers they fork (default: Ray's, 15; torchrun's "
                    "ranks run at this script's)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one launch may take before it is killed")
    ap.add_argument("--quick", action="store_true", help="smoke run: the bundled sample, "
                    + ", ".join(f"{k} {v}" for k, v in QUICK.items()))
    ap.add_argument("--part", choices=["ray-driver", "torchrun-rank"], help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    common.add_result_options(ap)
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:  # typed options win over the preset
            setattr(args, key, value)
    if args.quick and args.data is None:
        args.data = str(REPO / "data" / "sample" / "images" / "train")
    if min(args.workers) < 1 or args.copies < 1 or args.skip < 1 or args.repeats < 1 or args.warmup < 0:
        ap.error("--workers, --copies, --skip and --repeats must be 1 or more, --warmup 0 or more")
    args.num_cpus = args.num_cpus or max(os.cpu_count() or 1, *args.workers)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.part:
        cfg = json.loads(Path(args.config).read_text())
        ray_driver(args.address, cfg) if args.part == "ray-driver" else torchrun_rank(cfg)
        return 0
    if util.find_spec("ray") is None or util.find_spec("ray.train") is None:
        print(INSTALL.format(sys.executable), file=sys.stderr)
        return 1
    src = Path(args.data or common.dataset("coco128") / "images" / "train2017")
    if not (src.is_dir() and (src.parent.parent / "labels" / src.name).is_dir()):
        print(f"bench_ray.py: {src} is no image folder with labels/{src.name} beside it; pass --data", file=sys.stderr)
        return 2
    args.data = str(src)
    for hidden in ("part", "address", "config"):  # the launches' own options, not settings of the run
        delattr(args, hidden)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench_ray.py: terminated"))  # the finally kills the node
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    name = src.parent.parent.name
    with tempfile.TemporaryDirectory(prefix="bench_ray_") as tmp:
        images = prepare(src, args.copies, Path(tmp) / name, env)
        n_images = sum(1 for _ in images.iterdir())
        cfg = {"data": str(images), "img_size": args.img_size, "batch": args.batch, "seed": 0,
               "loader_workers": args.loader_workers, "skip": args.skip}
        runs = {lw: {w: [] for w in args.workers} for lw in LAUNCHERS}
        warm: List[dict] = []
        errors: List[str] = []
        with ray_node(args.node_ip, args.num_cpus, env, Path(tmp) / "ray-node.log", args.worker_niceness) as address:
            plan = [(-1 - i, w) for i in range(args.warmup) for w in args.workers[:1]] \
                + [(r, w) for r in range(args.repeats) for w in args.workers]
            for i, (r, w) in enumerate(plan):
                for lw in (LAUNCHERS if r % 2 == 0 else LAUNCHERS[::-1]):  # which goes first alternates
                    m = launch(lw, w, cfg, Path(tmp) / f"run{i}-{lw}", address, env, args.timeout)
                    (warm if r < 0 else runs[lw][w]).append(dict(m, launcher=lw, workers=w))
                    if "error" in m:
                        errors.append(m["error"])
                        log(f"{'warm-up' if r < 0 else f'round {r + 1}'} {lw} {w}: {m['error'][:300]}")
                    else:
                        log(f"{'warm-up' if r < 0 else f'round {r + 1}'} {lw} {w} workers: first batch "
                            f"{m['first_batch_s']:.2f} s (loop body at {m['to_loop_s']:.2f} s), "
                            f"{m['img_s']:.0f} img/s over {m['steps'] - args.skip} steps")
    medians = report(args, runs, n_images, f"{name} x{args.copies}", errors)
    common.write_result("ray", {"images": n_images, "data": name, "copies": args.copies, "runs": runs,
                                "warmup": warm, "medians": medians, "errors": errors}, args)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
