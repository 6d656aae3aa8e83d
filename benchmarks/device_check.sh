#!/usr/bin/env bash
# The device stage on a GPU machine, in one run of under 10 minutes: its tests on CUDA (tests/device
# parametrises every test over the CUDA devices it finds), then the training loader into CUDA tensors,
# the CPU path against the device stage (benchmarks/speed/run.py cuda --quick).  Needs python3 with
# torch, torchvision, OpenCV, NumPy, Pillow, PyYAML and pytest; yolo_data runs from this checkout
# (simplejpeg, when missing, leaves JPEGs to OpenCV).  Outputs go to $OUT (default /tmp/device-check).
#
#   bash benchmarks/device_check.sh
set -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/device-check}"
mkdir -p "$OUT"
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')" | tee "$OUT/versions.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/device 2>&1 | tee "$OUT/tests.log"
tests=$?
timeout 420 python3 benchmarks/speed/run.py cuda --quick 2>&1 | tee "$OUT/bench.log"
bench=$?
echo "tests exit $tests, benchmark exit $bench"
[ "$tests" = 0 ] && [ "$bench" = 0 ]
