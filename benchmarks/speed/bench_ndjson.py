"""An NDJSON export whose images are signed https-style URLs, with 20 ms added per request, against the
same data on local disk: the first epoch with 2 workers, a second with the object cache, requests per image.

    python benchmarks/speed/run.py ndjson                        # 2,000 images of 640 px, 1 round
    python benchmarks/speed/run.py ndjson --quick --no-results   # smoke run (64 images)
    python benchmarks/speed/run.py ndjson --latency-ms 50 --repeats 3

Needs SeaweedFS's ``weed`` and the MinIO client, as bench_s3.py does, whose parts this reuses: the set is
``common.synthetic_set``'s, uploaded to a real S3 server (tests/s3server.py) on 127.0.0.1; the export
names each image by a presigned GET URL through tests/faultproxy.py's proxy (in a process of its own),
which adds ``--latency-ms`` before forwarding each request and counts them; each record gives the
image's width and height, so building the loader fetches no image.  The local copy is bench_s3's (hard
links, page cache warm), read through its data.yaml.

Measured, per round, local and NDJSON: the training loader (``create_dataloader(source, 640, 16, 32,
augment=True, hyp=hyp.scratch-low, shuffle=True, workers=--workers, seed=0)``; for the export
``object_cache_gb`` large enough for the set, in a fresh cache folder), label caches built beforehand
(untimed).  Build: ``create_dataloader`` (early start: the workers begin fetching).  Epoch 1: from the
end of the build to the epoch's last batch, img/s over the whole epoch (the build included in its own
row).  Epoch 2: the whole second pass (the object cache serves it).  Requests per image per window, from
the proxy's counters; CPU per image per window of the loader (this process and its workers) and of the
server and proxy, from /proc: on shared cores img/s follows the others' load, CPU per image much less
(so each round also alternates which source goes first).  Output: a markdown table on stdout, progress
on stderr, the results file of question ``ndjson``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_s3  # noqa: E402  (puts benchmarks/ and tests/ on sys.path)
from bench_s3 import BUCKET, ProxyProcess, Window, World, local_copy, upload  # noqa: E402
import common  # noqa: E402
from common import HYP_FILE, log, shutdown  # noqa: E402

IMGSZ, BATCH, STRIDE = 640, 16, 32


def write_export(out: Path, root: Path, client) -> Path:
    """An NDJSON export of the generated set at ``root`` whose images are presigned URLs of ``client``'s
    endpoint (the proxy) to s3://BUCKET/train/images/train/<name>."""
    import yaml as pyyaml
    from PIL import Image

    names = pyyaml.safe_load((root / "data.yaml").read_text())["names"]
    names = names if isinstance(names, list) else [names[k] for k in sorted(names)]
    lines = [json.dumps({"type": "dataset", "task": "detect", "class_names": dict(enumerate(names))})]
    for im in sorted((root / "images" / "train").iterdir()):
        label = root / "labels" / "train" / (im.stem + ".txt")
        rows = [[int(w) if i == 0 else float(w) for i, w in enumerate(line.split())]
                for line in (label.read_text().splitlines() if label.exists() else []) if line.split()]
        w, h = Image.open(im).size
        lines.append(json.dumps({"type": "image", "file": im.name, "width": w, "height": h, "split": "train",
                                 "url": client.presigned_get_object(BUCKET, f"train/images/train/{im.name}"),
                                 "annotations": {"boxes": rows}}))
    # one val record (the first image again), so that no train record goes to val (formats/ndjson.py)
    lines.append(json.dumps(dict(json.loads(lines[1]), split="val")))
    out.write_text("\n".join(lines) + "\n")
    return out


def loader_cpu(world: World) -> float:
    """CPU seconds so far of this process and its DataLoader workers (not the server's, nor the proxy's)."""
    return sum(common.tree_cpu_seconds(p).get(p, 0.0) for p in (os.getpid(), *world.ours()))


def measure(world: World, source: str, n: int, workers: int, object_dir) -> Dict:
    from yolo_data import create_dataloader
    out: Dict[str, object] = {}
    extra = {} if object_dir is None else dict(object_cache_gb=64.0, cache_dir=str(object_dir))
    w, cpu = Window(world), loader_cpu(world)
    loader, dataset = create_dataloader(source, IMGSZ, BATCH, STRIDE, hyp=str(HYP_FILE), augment=True, pad=0.0,
                                        rect=False, workers=workers, shuffle=True, seed=0, split="train",
                                        prefix="", **extra)
    out["build"] = w.close(n)
    cpu = _cpu_per_image(world, cpu, n, out, "build")
    try:
        for epoch in ("epoch1", "epoch2"):
            w = Window(world, after=w)
            got = sum(int(b[0].shape[0]) for b in loader)
            out[epoch] = w.close(got)
            cpu = _cpu_per_image(world, cpu, got, out, epoch)
            out[epoch]["ips"] = got / out[epoch]["seconds"]
            if got != n:
                raise RuntimeError(f"{epoch}: {got} images, expected {n}")
    finally:
        shutdown(loader)
        del loader, dataset
        world.wait_for_workers(source)
    return out


def _cpu_per_image(world: World, before: float, images: int, out: Dict, window: str) -> float:
    """Puts the loader's CPU ms per image since ``before`` into ``out[window]``; returns the CPU now.
    (The workers persist from the build to the end of epoch 2, so no worker's CPU is lost between.)"""
    now = loader_cpu(world)
    out[window]["loader_cpu_ms_per_img"] = (now - before) / max(images, 1) * 1e3
    return now


def report(args, runs: Dict[str, List[Dict]], n: int) -> None:
    def med(where, *keys):
        vals = sorted(r[keys[0]][keys[1]] if len(keys) == 2 else r[keys[0]]["requests"][keys[2]]
                      for r in runs[where])
        return vals[len(vals) // 2] if vals else float("nan")

    print(f"## NDJSON export of signed URLs, {args.latency_ms:g} ms per request, against local disk\n")
    print(f"{n:,} generated 640-px JPEGs, batch {BATCH}, {args.workers} workers, {args.repeats} round(s), "
          f"{len(os.sched_getaffinity(0))} cores (the S3 server and the proxy on the same cores)\n")
    print("| | local disk | NDJSON (https) |\n| --- | --- | --- |")
    print(f"| build (s) | {med('local', 'build', 'seconds'):.1f} | {med('ndjson', 'build', 'seconds'):.1f} |")
    for epoch, what in (("epoch1", "epoch 1 (img/s)"), ("epoch2", "epoch 2, object cache (img/s)")):
        print(f"| {what} | {med('local', epoch, 'ips'):.0f} | {med('ndjson', epoch, 'ips'):.0f} |")
    for window in ("build", "epoch1", "epoch2"):
        print(f"| loader CPU ms per image, {window} | {med('local', window, 'loader_cpu_ms_per_img'):.2f} | "
              f"{med('ndjson', window, 'loader_cpu_ms_per_img'):.2f} |")
    for window in ("build", "epoch1", "epoch2"):
        print(f"| server and proxy CPU ms per image, {window} | {med('local', window, 's3_cpu_ms_per_img'):.2f} | "
              f"{med('ndjson', window, 's3_cpu_ms_per_img'):.2f} |")
    for window in ("build", "epoch1", "epoch2"):
        print(f"| image GETs per image, {window} | – | "
              f"{med('ndjson', window, 'get_image_per_img') if runs['ndjson'] else float('nan'):.2f} |")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="64 images: a smoke run")
    common.add_result_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.images = 64
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    bench_s3.require()
    import minio
    import s3server

    yaml = common.synthetic_set(args.images)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench_ndjson.py: terminated"))
    tmp = Path(tempfile.mkdtemp(prefix="bench_ndjson_"))
    os.environ["YOLO_DATA_CACHE_DIR"] = str(tmp / "user")
    proxy = None
    try:
        with s3server.start_s3_server(tmp / "seaweedfs") as srv:
            client = minio.Minio(srv.endpoint_url.split("://", 1)[1], srv.access_key, srv.secret_key,
                                 secure=False, region="us-east-1")
            client.make_bucket(BUCKET)
            log(f"uploaded {upload(client, yaml.parent, 'train'):,} objects")
            local = local_copy(yaml.parent, tmp / "local").parents[1] / "data.yaml"
            proxy = ProxyProcess(srv.endpoint_url, args.latency_ms / 1000)
            signer = minio.Minio(proxy.endpoint_url.split("://", 1)[1], srv.access_key, srv.secret_key,
                                 secure=False, region="us-east-1")
            export = write_export(tmp / "export.ndjson", yaml.parent, signer)
            world = World(proxy, srv.pid, tmp)
            from yolo_data.labels.split import load_split  # the label caches, untimed
            load_split(str(local.parent / "images" / "train"))
            sources = {"local": (str(local), None), "ndjson": (str(export), None)}
            runs: Dict[str, List[Dict]] = {k: [] for k in sources}
            for r in range(args.repeats):
                # on shared cores the load drifts: each round alternates which source goes first
                for where, (source, _) in sorted(sources.items(), reverse=bool(r % 2)):
                    objects = tmp / f"objects-{r}" if where == "ndjson" else None
                    m = measure(world, source, args.images, args.workers, objects)
                    runs[where].append(m)
                    log(f"round {r + 1} {where}: epoch 1 {m['epoch1']['ips']:.0f} img/s, epoch 2 "
                        f"{m['epoch2']['ips']:.0f} img/s, image GETs per image "
                        f"{m['epoch1']['get_image_per_img']:.2f} / {m['epoch2']['get_image_per_img']:.2f}, loader CPU "
                        f"ms per image {m['epoch1']['loader_cpu_ms_per_img']:.2f} / "
                        f"{m['epoch2']['loader_cpu_ms_per_img']:.2f}")
            report(args, runs, args.images)
            common.write_result("ndjson", {"images": args.images, "latency_ms": args.latency_ms, "runs": runs}, args)
    finally:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
