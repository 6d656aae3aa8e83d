"""What every benchmark that imports YOLOv5 or Ultralytics needs: keep them offline, inside the
benchmark's temp folder, and quiet.  (Both are installed in a separate environment, never as
dependencies of yolo_data.)"""
import contextlib
import io
import os
import socket
import sys
import types
from pathlib import Path

LIBRARY_LOG = io.StringIO()  # what the libraries print (progress bars, notices); never closed


def isolate_environment(tmp: Path, who: str) -> None:
    """Settings/cache folders into ``tmp``, no DDP variables, no network.  Must run before the imports
    (Ultralytics looks up hosts and writes settings into $HOME at import otherwise)."""
    for var in ("YOLO_CONFIG_DIR", "YOLOV5_CONFIG_DIR", "MPLCONFIGDIR", "YOLO_DATA_CACHE_DIR"):
        os.environ[var] = str(tmp / "config" / var.lower())
        Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
    os.environ.update(YOLO_OFFLINE="1", YOLOv5_AUTOINSTALL="false", YOLOv5_VERBOSE="false")
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        os.environ.pop(var, None)

    def refuse(self, address, *args, **kwargs):
        if self.family in (socket.AF_INET, socket.AF_INET6):
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


def smaps_rollup(pid: int) -> dict:
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


def child_pids(pid: int) -> list:
    """The direct children of ``pid`` (of any of its threads), e.g. a DataLoader's workers."""
    kids = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return kids
