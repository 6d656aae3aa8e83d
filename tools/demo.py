#!/usr/bin/env python
"""The main job on the bundled sample: build the label caches, print a summary, load one batch."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from yolo_data.cli import demo_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(demo_main())
