"""Every code example of README.md and docs/*.md runs, so that none can rot (see docs_examples.py for the
marks).  Examples that need YOLOv5, Ultralytics or several processes run in the compatibility suite
(benchmarks/compat/test_docs_examples.py)."""
import os
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


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every example that can run here, run once, a few at a time (each is mostly a Python start-up and
    an import of torch): {block id: CompletedProcess}."""
    root = tmp_path_factory.mktemp("docs")

    def one(i_block):
        i, block = i_block
        return block.id, run(block, workspace(Path(tempfile.mkdtemp(dir=root, prefix=f"{i}-")), block))

    todo = [(i, b) for i, b in enumerate(HERE) if not missing(b)]
    with ThreadPoolExecutor(max(2, min(4, os.cpu_count() or 1))) as pool:
        return dict(pool.map(one, todo))


@pytest.mark.parametrize("block", HERE, ids=lambda b: b.id)
def test_example_runs(block, results):
    if missing(block):
        pytest.skip(f"{', '.join(missing(block))} not in {DATASETS}")
    r = results[block.id]
    assert r.returncode == 0, f"{block.id} ({block.lang}) failed:\n{block.code}\n{(r.stdout + r.stderr)[-3000:]}"
