"""The fenced code blocks of README.md and docs/*.md, and where each one runs.

A block runs in the test suite (tests/project/test_docs.py) unless the line right before it is a mark:

    <!-- example: needs ultralytics -->            run by the compatibility suite, in the peers' environment
    <!-- example: needs yolov5 train.py -->        the import line, put into YOLOv5's script (compatibility suite)
    <!-- example: several processes -->           torchrun and friends (compatibility suite)
    <!-- example: dataset coco128, tiger-pose --> runs beside copies of these folders of ../shared/datasets
    <!-- example: s3 bucket -->                   runs with a real S3 server (SeaweedFS) holding the bundled
                                                   sample as s3://data/sample.yaml, its endpoint and
                                                   credentials in the AWS variables
    <!-- example: not run: REASON -->             runs nowhere; the reason (the rest of the mark) is required

Marks are joined with ';'.  ``python`` and ``bash`` blocks run (in a temporary folder holding a copy of
``data/`` and a link to ``tools/``), ``yaml`` blocks are parsed, ``text`` blocks are output shown to the
reader.  A block of another language, or an unknown mark, is an error: no example escapes the tests.
"""
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("YOLO_DATA_BENCH_DATA") or ROOT.parent / "shared" / "datasets")
LANGUAGES = ("python", "bash", "yaml", "text")
MARK = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass
class Block:
    file: str           # relative to the checkout
    line: int           # the opening fence's line, 1-based
    lang: str
    code: str
    needs: List[str] = field(default_factory=list)      # 'ultralytics', 'yolov5 train.py', ...
    datasets: List[str] = field(default_factory=list)
    several_processes: bool = False
    bucket: bool = False                                # needs the S3 server (tests/s3server.py)
    not_run: Optional[str] = None                       # the reason

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def where(self) -> str:
        """'here' (tests/), 'compat' (benchmarks/compat), 'nowhere', 'parsed' (yaml) or 'output' (text)."""
        if self.lang == "text":
            return "output"
        if self.lang == "yaml":
            return "parsed"
        if self.not_run:
            return "nowhere"
        if self.needs or self.several_processes:
            return "compat"
        return "here"


def parse_marks(block: Block, text: str) -> None:
    if "not run:" in text:  # the reason is the rest of the mark, ';' and all
        text, reason = text.split("not run:", 1)
        if not reason.strip():
            raise ValueError(f"{block.id}: 'not run:' needs a reason")
        block.not_run = reason.strip()
    for part in filter(None, (p.strip() for p in text.split(";"))):
        if part.startswith("needs "):
            block.needs.append(part[len("needs "):].strip())
        elif part == "several processes":
            block.several_processes = True
        elif part == "s3 bucket":
            block.bucket = True
        elif part.startswith("dataset "):
            block.datasets += [d.strip() for d in part[len("dataset "):].split(",") if d.strip()]
        else:
            raise ValueError(f"{block.id}: unknown example mark {part!r}")


def markdown_files() -> List[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def blocks(paths=None) -> List[Block]:
    found = []
    for path in paths or markdown_files():
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            start, lang = i, m.group(1)
            i += 1
            while i < len(lines) and lines[i].rstrip() != "```":
                i += 1
            b = Block(str(path.relative_to(ROOT)), start + 1, lang, "\n".join(lines[start + 1:i]) + "\n")
            prev = lines[start - 1] if start else ""
            mark = MARK.match(prev)
            if mark:
                parse_marks(b, mark.group(1))
            found.append(b)
            i += 1
    return found


def workspace(tmp: Path, block: Block) -> Path:
    """A folder for ``block``: a copy of the bundled ``data/`` (examples write label caches), a link to
    ``tools/``, and copies of the datasets it names."""
    shutil.copytree(ROOT / "data", tmp / "data", ignore=shutil.ignore_patterns("*.cache", "*.imgcache"))
    (tmp / "tools").symlink_to(ROOT / "tools")
    for name in block.datasets:
        shutil.copytree(DATASETS / name, tmp / name, ignore=shutil.ignore_patterns("*.cache", "*.imgcache"))
    return tmp


def environment(extra=None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # python, yolo-data-cache
    env.update(extra or {})
    return env


def run(block: Block, cwd: Path, prelude: str = "", env=None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run a python or bash block in ``cwd``; python with ``prelude`` before it."""
    if block.lang == "python":
        script = cwd / "example.py"
        script.write_text(prelude + block.code)
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", block.code]
    return subprocess.run(cmd, cwd=cwd, env=environment(env), capture_output=True, text=True, timeout=timeout)
