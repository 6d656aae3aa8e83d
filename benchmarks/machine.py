"""Describing the machine a benchmark ran on."""
import contextlib
import platform


def cpu_model() -> str:
    """The CPU's model name (first 'model name' of /proc/cpuinfo), else what platform says."""
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
