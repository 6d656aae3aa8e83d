#!/usr/bin/env python
"""Build or refresh the label caches of a dataset and print what was found (see --help)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from yolo_data.cli import build_cache_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(build_cache_main())
