# Sourced by the device scripts that run tests beside fla: unbuffered output, every failed test's report written as it
# fails (tests/conftest.py: a run cut by its limit still says why), fla and einops from the wheels carried in .whl/,
# and the GPU's name and driver in $OUT/gpu.txt.
set -u
export PYTHONUNBUFFERED=1
export LAB_TEST_FAILURES=$OUT/gpu_failures.log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/fla_core-*.whl .whl/einops-*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
