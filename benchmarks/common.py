"""What the benchmark scripts share: where the data is, progress lines, timing, medians and their
formatting, the page cache, the memory and CPU time of a process tree read from /proc, the machine a
report came from, and the peers (YOLOv5, Ultralytics: never dependencies of yolo_data) kept offline and
imported only when asked.  Finding and ending every process a command started (``run_tree``,
``descendants``) is tools/proctree.py's, which the tests use too: re-exported here.

A script (in ``speed/``, ``compat/``) puts this folder on ``sys.path`` and imports this module, which puts
the checkout first on ``sys.path`` (so every script runs from a clone without installing yolo_data) and
``generators/`` and ``tools/`` after it (``import make_synthetic``, ``import proctree``)::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common
    import common  # noqa: E402

Data and environments come from flags, or from these environment variables (BENCHMARKS.md, Setup):

* ``YOLO_DATA_BENCH_DATA``: the folder holding the real datasets (``coco128``, ``bccd``, ``bccd_voc``);
  default ``../shared/datasets`` beside the checkout;
* ``YOLO_DATA_BENCH_SYNTHETIC``: where generated sets (benchmarks/generators/make_synthetic.py) are kept
  and reused; default ``yolo_data_bench`` in the system's temporary folder;
* ``YOLO_DATA_PEER_PYTHON``: the benchmark environment's python (scripts that start the peers in
  another interpreter).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import datetime
import io
import json
import mmap
import os
import platform
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
from importlib import metadata, util
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GENERATORS = HERE / "generators"
TOOLS = REPO / "tools"
HYP_FILE = REPO / "data" / "hyps" / "hyp.scratch-low.yaml"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # yolo_data from this checkout, installed or not
if str(GENERATORS) not in sys.path:
    sys.path.append(str(GENERATORS))  # make_synthetic, coco_from_voc
if str(TOOLS) not in sys.path:
    sys.path.append(str(TOOLS))  # proctree

from proctree import (SWEEP_S, alive, as_text, child_pids, descendants, end_marked,  # noqa: E402,F401
                      marked_env, marked_pids, popen_tree, run_tree)

DATA_ENV = "YOLO_DATA_BENCH_DATA"
SYNTHETIC_ENV = "YOLO_DATA_BENCH_SYNTHETIC"
PEER_PYTHON_ENV = "YOLO_DATA_PEER_PYTHON"
SETUP_HINT = "see BENCHMARKS.md, Setup"


# -- where the data is ------------------------------------------------------------------------------
def data_root(arg=None) -> Path:
    """The folder holding the real datasets: ``arg`` (a flag), else $YOLO_DATA_BENCH_DATA, else
    ``../shared/datasets`` beside the checkout (which may not exist: see ``dataset``)."""
    return Path(arg or os.environ.get(DATA_ENV) or REPO.parent / "shared" / "datasets")


def dataset(name: str, root=None) -> Path:
    """``data_root(root) / name``, or a one-line exit naming the flag and variable that set it."""
    path = data_root(root) / name
    if not path.is_dir():
        raise SystemExit(f"{path} not found: pass the datasets folder with --root, or set ${DATA_ENV} "
                         f"({SETUP_HINT})")
    return path


def is_shared(path: Path) -> bool:
    """Is ``path`` inside the read-only datasets folder (never hard-link into it or write there)?"""
    shared = data_root().resolve()
    path = Path(path).resolve()
    return path == shared or shared in path.parents


def synthetic_root(arg=None) -> Path:
    """Where generated sets live: ``arg``, else $YOLO_DATA_BENCH_SYNTHETIC, else the system temp folder."""
    return Path(arg or os.environ.get(SYNTHETIC_ENV) or Path(tempfile.gettempdir()) / "yolo_data_bench")


def synthetic_set(n: int = 2000, seed: int = 0, size: int = 640, quality: int = 90, root=None,
                  say: Callable[[str], None] = None, objects=None, segments: bool = False,
                  workers: Optional[int] = None) -> Path:
    """The data.yaml of the generated set with these settings under ``synthetic_root(root)``, generated
    (a few minutes for 2,000 images) only when no complete one is there.  ``objects`` (min, max) per
    image (None: make_synthetic's 1-15) and ``segments`` (polygon labels) name a set of their own.
    ``workers``: processes that generate it (None: 2; the images do not depend on it)."""
    import make_synthetic
    say = say or log
    objects = list(objects or make_synthetic.OBJECTS)
    extra = ("-seg" if segments else "") + ("" if objects == list(make_synthetic.OBJECTS)
                                            else f"-obj{objects[0]}-{objects[1]}")
    out = synthetic_root(root) / f"synthetic-n{n}-seed{seed}-{size}px-q{quality}{extra}"
    want = {"splits": {"train": n}, "seed": seed, "size": size, "quality": quality, "objects": objects,
            "segments": segments}
    have = make_synthetic.dataset_settings(out)
    made_before = {"objects": list(make_synthetic.OBJECTS), "segments": False}  # sets older than these keys
    if have and all(have.get(k, made_before.get(k)) == v for k, v in want.items()) \
            and sum(1 for _ in (out / "images" / "train").iterdir()) == n:
        say(f"reusing {out} ({have['mean_kb']:.0f} KB/image, generated in {have['seconds']} s)")
        return out / "data.yaml"
    say(f"generating {n} images into {out} ...")
    # in a child process: its spawn pool leaves multiprocessing's resource tracker running in the
    # process that made it, which a benchmark would then count as a leftover child
    workers = workers or min(2, os.cpu_count() or 1)
    subprocess.run([sys.executable, str(GENERATORS / "make_synthetic.py"), str(out), "--n", str(n), "--seed", str(seed),
                    "--size", str(size), "--quality", str(quality), "--workers", str(workers),
                    "--objects", str(objects[0]), str(objects[1]), *(["--segments"] if segments else []),
                    "--overwrite"], check=True, stdout=sys.stderr)
    st = make_synthetic.dataset_settings(out)
    say(f"generated in {st['seconds']} s, {st['mean_kb']:.0f} KB/image")
    return out / "data.yaml"


def synthetic_images(arg=None) -> Path:
    """``arg`` (an image folder or a data.yaml), else the train images of the default generated set."""
    if arg:
        return Path(arg)
    return synthetic_set().parent / "images" / "train"


# -- progress, timing, medians ---------------------------------------------------------------------
def log(msg: str) -> None:
    """A progress line on stderr (reports go to stdout)."""
    print(msg, file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> Tuple[float, object]:
    """(wall seconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def med(vals: Iterable[Optional[float]]) -> Optional[float]:
    """Median of the values that are not None, or None when there are none."""
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt_range(vals: Sequence[float], digits: int = 1, scale: float = 1.0, dash: str = "–",
              always: bool = False, empty: str = "n/a") -> str:
    """``median (min–max)`` of ``vals`` times ``scale`` with ``digits`` decimals; the median alone for
    one value unless ``always``."""
    vals = [v * scale for v in vals if v is not None]
    if not vals:
        return empty
    text = f"{statistics.median(vals):.{digits}f}"
    if len(vals) > 1 or always:
        text += f" ({min(vals):.{digits}f}{dash}{max(vals):.{digits}f})"
    return text


def fmt_seconds(vals: Sequence[float], unit: str = "s") -> str:
    """Seconds in the unit that suits the median (µs, ms, s), with ``(min-max)`` for several values."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    scale, unit, digits = ((1e6, "µs", 0) if m < 1e-3 else (1e3, "ms", 1) if m < 1
                           else (1, unit, 2 if m < 10 else 1))
    text = f"{m * scale:.{digits}f} {unit}"
    if len(vals) > 1:
        text += f" ({min(vals) * scale:.{digits}f}-{max(vals) * scale:.{digits}f})"
    return text


def fmt_share(vals: Sequence[Optional[float]], dash: str = "-") -> str:
    """A share (0-1) or a range of shares as percentages; 'unknown' when none is known."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return "unknown"
    lo, hi = min(vals), max(vals)
    return f"{lo:.0%}" if hi - lo < 0.005 else f"{lo:.0%}{dash}{hi:.0%}"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, ``'1.08 / 1.31 / 1.59'``."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# -- the page cache ---------------------------------------------------------------------------------
def _opened(files: Sequence[str]):
    """A read-only descriptor of each file that can be opened (others are skipped), closed when the
    caller moves on or stops."""
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            yield fd
        finally:
            os.close(fd)


class PageCache:
    """Residency (mincore) and eviction (posix_fadvise) of individual files, no root needed; Linux only
    (elsewhere residency is None and eviction does nothing)."""

    def __init__(self):
        self.ok = sys.platform.startswith("linux") and hasattr(os, "posix_fadvise")
        if self.ok:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_long]
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
            self.libc = libc
        self.page = mmap.PAGESIZE

    def resident(self, files: Sequence[str]) -> Optional[float]:
        """Fraction of the files' bytes (in pages) now in the page cache, or None if unknown."""
        if not self.ok:
            return None
        total = cached = 0
        for fd in _opened(files):
            size = os.fstat(fd).st_size
            if not size:
                continue
            addr = self.libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                pages = (size + self.page - 1) // self.page
                vec = (ctypes.c_ubyte * pages)()
                if self.libc.mincore(addr, size, vec) != 0:
                    return None
                total += pages
                cached += sum(b & 1 for b in vec)
            finally:
                self.libc.munmap(addr, size)
        return cached / total if total else None

    def evict(self, files: Sequence[str]) -> None:
        """Ask the kernel to drop the files' pages (dirty pages are written first, or they would stay)."""
        if not self.ok:
            return
        for fd in _opened(files):
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def warm_page_cache(*folders: Path) -> None:
    """Read every file of ``folders`` once, so each library starts from the same warm page cache."""
    for folder in folders:
        for f in os.scandir(folder):
            if f.is_file():
                with open(f.path, "rb") as fh:
                    while fh.read(1 << 20):
                        pass


# -- processes, from /proc (Linux): the tree and its sweep are tools/proctree.py's (the tests use it too) --
_alive = alive  # the name bench_s3.py reads


def smaps_rollup(pid: int) -> Dict[str, int]:
    """The numeric fields of /proc/<pid>/smaps_rollup in KiB (Rss, Pss, Pss_Anon, Pss_File, ...), or an
    empty dict when the process is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[key] = int(parts[0])
    except (OSError, ValueError):
        return {}
    return out


def proc_stat(pid: int) -> Tuple[int, int, int, str]:
    """(user ticks, system ticks, minor page faults, state letter) of a process from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12]), int(fields[7]), fields[0]


def tree_cpu_seconds(pid: Optional[int] = None) -> Dict[int, float]:
    """{pid: user + system CPU seconds} of ``pid`` (default: this process) and its descendants."""
    pid = os.getpid() if pid is None else pid
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for p in [pid] + descendants(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            user, system, _, _ = proc_stat(p)
            out[p] = (user + system) / tick
    return out


def wait_for_children(timeout: float = 15.0) -> int:
    """Wait until this process has no live descendant; terminate (by pid) those left after ``timeout``
    and wait 5 s more for them.  Returns how many had to be terminated."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in descendants(me) if _alive(p)]:
            return 0
        time.sleep(0.05)
    kids = [p for p in descendants(me) if _alive(p)]
    for p in kids:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in kids):
        time.sleep(0.05)
    return len(kids)


def shutdown(loader) -> None:
    """Stop and join a loader's worker processes (persistent workers would otherwise keep running):
    Ultralytics' ``close()``, torch's ``_iterator``, YOLOv5's InfiniteDataLoader ``iterator``."""
    if hasattr(loader, "close") and callable(loader.close):
        with contextlib.suppress(Exception):
            loader.close()
    for attr in ("_iterator", "iterator"):
        it = getattr(loader, attr, None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            with contextlib.suppress(Exception):
                it._shutdown_workers()


# -- the machine ------------------------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU's model name (first 'model name' of /proc/cpuinfo), else what platform says."""
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def mem_total() -> str:
    """Total RAM, ``'24 GiB'``, or ``'?'``."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / (1 << 20):.0f} GiB"
    return "?"


def usable_cores() -> int:
    """Cores this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def version_of(dist: str) -> Optional[str]:
    """An installed distribution's version, without importing it (None when absent)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine() -> str:
    """One line: cores, CPU, RAM, OS, Python and the versions of torch, numpy, OpenCV and simplejpeg
    (which yolo_data decodes JPEGs with where it is installed)."""
    parts = [f"{os.cpu_count()} cores ({usable_cores()} usable), {cpu_model()}, {mem_total()} RAM",
             f"{platform.system()} {platform.machine()}", f"Python {platform.python_version()}"]
    for name, dists in (("torch", ("torch",)), ("numpy", ("numpy",)),
                        ("OpenCV", ("opencv-python", "opencv-python-headless")), ("simplejpeg", ("simplejpeg",))):
        v = next((v for v in map(version_of, dists) if v), None)
        if v or name == "simplejpeg":
            parts.append(f"{name} {v or 'not installed'}")
    return ", ".join(parts)


def footer() -> str:
    """The report's last line: the command, the machine and the date."""
    cmd = command().split(" ", 1)[1]  # without 'python '
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return f"<sub>{cmd}; {machine()}; {when}</sub>"


def report_end(errors: Sequence[str] = ()) -> None:
    """A report's end: the errors met, if any, as a list, then the footer."""
    if errors:
        print("\n**Errors:**\n")
        for e in errors:
            print(f"- {e}")
    print(f"\n{footer()}")


def parity_verdict(results) -> int:
    """Print a parity comparison's verdict ('ALL EQUAL', or how many cases differ; each result has
    ``.ok``) and the footer; the exit status: 1 where a case differs."""
    bad = [r for r in results if not r.ok]
    print(f"\n{'ALL EQUAL' if not bad else f'{len(bad)} of {len(results)} cases differ'}")
    print(f"\n{footer()}")
    return 1 if bad else 0


# -- the peers (YOLOv5, Ultralytics, pycocotools): the benchmark environment only --------------------
PEER_MODULES = {"yolov5": "yolov5", "ultralytics": "ultralytics", "pycocotools": "pycocotools"}
LIBRARY_LOG = io.StringIO()  # what the libraries print (progress bars, notices); never closed


def require(script: str, *modules: str) -> None:
    """Exit with one line when a module this run needs is not installed (without importing it)."""
    missing = [m for m in modules if util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"{script}: {', '.join(missing)} not installed in {sys.executable}: run it with the "
                         f"benchmark environment's python (pip install -r benchmarks/requirements-peers.txt; "
                         f"{SETUP_HINT})")


def isolate_environment(tmp: Path, who: str) -> None:
    """Settings/cache folders into ``tmp``, no DDP variables, no network but loopback.  Must run before
    the peers' imports (Ultralytics looks up hosts and writes settings into $HOME at import otherwise)."""
    for var in ("YOLO_CONFIG_DIR", "YOLOV5_CONFIG_DIR", "MPLCONFIGDIR", "YOLO_DATA_CACHE_DIR"):
        os.environ[var] = str(tmp / "config" / var.lower())
        Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
    os.environ.update(YOLO_OFFLINE="1", YOLOv5_AUTOINSTALL="false", YOLOv5_VERBOSE="false")
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        os.environ.pop(var, None)

    def refuse(self, address, *args, **kwargs):
        # loopback stays open: a check's own servers (an S3 server for bucket datasets) listen there
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
            raise OSError(f"{who}: network access blocked ({address})")
        return real_connect(self, address, *args, **kwargs)

    real_connect = socket.socket.connect
    socket.socket.connect = refuse


def numpy_compat() -> None:
    """YOLOv5 7.0's metrics call np.trapz, which NumPy 2 renamed np.trapezoid."""
    import numpy as np
    if not hasattr(np, "trapz"):
        np.trapz = np.trapezoid


def provide_fonts() -> None:
    """YOLOv5's check_dataset/check_font download Arial.ttf into its config folder when missing: give it
    matplotlib's bundled DejaVuSans under those names instead (offline; only in the temp config folder
    that isolate_environment set)."""
    import shutil
    import matplotlib
    src = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    folder = Path(os.environ["YOLOV5_CONFIG_DIR"])
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not (folder / name).exists():
            shutil.copy(src, folder / name)


def library_output(verbose: bool):
    """Send what the libraries print to LIBRARY_LOG unless ``verbose``."""
    if verbose:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(LIBRARY_LOG))
    stack.enter_context(contextlib.redirect_stderr(LIBRARY_LOG))
    return stack


def ensure_pkg_resources() -> None:
    """yolov5.utils.general imports pkg_resources, which setuptools >= 81 no longer ships: give it the
    one function it uses (parse_version, from packaging) when the real module is missing."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        from packaging.version import parse
        sys.modules["pkg_resources"] = types.SimpleNamespace(parse_version=parse)


# -- results as files -------------------------------------------------------------------------------
# Every speed benchmark writes what it measured to benchmarks/results/<question>[-<task>][-<dataset>].json
# (README.md beside this file describes the layout): the same top-level keys for every benchmark.
RESULTS = HERE / "results"
RESULT_KEYS = ("benchmark", "question", "command", "date", "machine", "versions", "git", "settings", "results")
QUESTION: Optional[str] = None  # set by speed/run.py: the question asked, which names the file
VERSIONS = {"yolo_data": None, "torch": ("torch",), "torchvision": ("torchvision",), "numpy": ("numpy",),
            "opencv": ("opencv-python", "opencv-python-headless", "opencv-contrib-python"),
            "simplejpeg": ("simplejpeg",), "yolov5": ("yolov5",), "ultralytics": ("ultralytics",),
            "pycocotools": ("pycocotools",)}


def add_result_options(parser) -> None:
    """``--results DIR`` and ``--no-results`` on a benchmark's argument parser."""
    group = parser.add_argument_group("results file")
    group.add_argument("--results", type=Path, default=RESULTS, metavar="DIR",
                       help="folder of the JSON results file (default: benchmarks/results)")
    group.add_argument("--no-results", action="store_true", help="write no results file (smoke runs)")


def command() -> str:
    """The command line as typed, the script's path relative to the checkout where it is inside it:
    ``'python benchmarks/speed/run.py train --quick'``."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("?")
    with contextlib.suppress(ValueError, OSError):
        script = script.resolve().relative_to(REPO)
    return shlex.join(["python", script.as_posix(), *sys.argv[1:]])


def _gpu_names() -> List[str]:
    """The CUDA devices' names: from torch where this process imported it, else nvidia-smi; [] without."""
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            if torch.cuda.is_available():
                return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            return []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=10)
        if p.returncode == 0:
            return [line.strip() for line in p.stdout.splitlines() if line.strip()]
    return []


def machine_info() -> Dict[str, object]:
    """The machine a result came from: CPU model, cores (all and usable), RAM in GiB, GPUs, OS."""
    ram = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemTotal"):
                ram = round(int(line.split()[1]) / (1 << 20), 1)
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable_cores(), "ram_gib": ram,
            "gpus": _gpu_names(), "os": f"{platform.system()} {platform.release()} {platform.machine()}",
            "hostname": socket.gethostname()}


def versions() -> Dict[str, Optional[str]]:
    """Python's and the installed distributions' versions (importlib.metadata: nothing is imported);
    yolo_data's is the checkout's own ``__version__``, read from its source.  None: not installed."""
    out = {"python": platform.python_version()}
    for name, dists in VERSIONS.items():
        if dists is None:
            text = (REPO / "yolo_data" / "version.py").read_text(encoding="utf-8")
            m = re.search(r'^__version__ = "([^"]+)"', text, re.M)
            out[name] = m.group(1) if m else None
        else:
            out[name] = next((v for v in map(version_of, dists) if v), None)
    return out


def git_state() -> Dict[str, object]:
    """The checkout's commit and whether tracked files differ from it (None where git cannot tell)."""
    def git(*args):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            p = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
            if p.returncode == 0:
                return p.stdout.strip()
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def jsonable(value):
    """``value`` with paths, tuples, sets, NumPy numbers and arrays made JSON values; NaN and infinities
    become None (JSON has none)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist") and callable(value.tolist):  # NumPy scalars and arrays, torch tensors
        return jsonable(value.tolist())
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def medians(runs: Sequence[Dict[str, object]]) -> Dict[str, object]:
    """{key: median over ``runs``} of every numeric value in the runs' dicts (lists of numbers: element by
    element); runs holding an ``error`` are left out, and so are NaNs (not measured)."""
    runs = [r for r in runs if isinstance(r, dict) and "error" not in r]
    out = {}
    for key in dict.fromkeys(k for r in runs for k in r):
        vals = [r[key] for r in runs if key in r]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[key] = med(v for v in vals if v == v)
        elif all(isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v) for v in vals):
            out[key] = [med(column) for column in zip(*vals)]
    return out


def result_name(question: str, task: Optional[str] = None, datasets: Sequence[str] = ()) -> str:
    """``<question>[-<task>][-<dataset>...].json``, names made safe for a file name."""
    parts = [question] + ([task] if task else []) + [re.sub(r"[^A-Za-z0-9_.+]+", "_", str(d)) for d in datasets]
    return "-".join(parts) + ".json"


def write_result(question: str, results: Dict[str, object], args, task: Optional[str] = None,
                 datasets: Sequence[str] = ()) -> Optional[Path]:
    """Write one run's results to ``args.results / result_name(...)`` (replacing an older file of the same
    question, task and data) unless ``args.no_results``; returns the path (None when not written).

    ``question`` is the script's own unless speed/run.py set ``QUESTION``; ``results`` holds the raw
    per-repeat numbers and the medians the report prints; ``vars(args)`` become the settings."""
    if getattr(args, "no_results", False):
        return None
    question = QUESTION or question
    benchmark = Path(sys._getframe(1).f_globals.get("__file__") or "?")  # the script that measured
    with contextlib.suppress(ValueError, OSError):
        benchmark = benchmark.resolve().relative_to(REPO)
    settings = {k: v for k, v in vars(args).items() if k not in ("results", "no_results")}
    doc = {"benchmark": Path(benchmark).as_posix(), "question": question, "command": command(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": machine_info(), "versions": versions(), "git": git_state(), "settings": settings,
           "results": results}
    folder = Path(args.results)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / result_name(question, task, datasets)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(jsonable(doc), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    log(f"results written to {path}")
    return path
