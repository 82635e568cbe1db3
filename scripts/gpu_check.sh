#!/usr/bin/env bash
# Prove the CUDA path on a machine with an NVIDIA GPU, within 8 minutes (issue 52):
#   1. without a GPU (nvidia-smi lists none) stop at once, with one line, having done nothing;
#   2. set up .venv as scripts/test.sh does (scripts/venv.sh), then install
#      scripts/gpu-requirements.txt into it: nnabla-ext-cuda120 and the CUDA 12 / cuDNN 8
#      runtime libraries it needs, as nvidia-*-cu12 wheels (the driver is the machine's);
#   3. put those wheels' library folders on LD_LIBRARY_PATH (each library it needs must be there);
#   4. run the tests marked gpu (tests/gpu: the device path's host reads, cudnn:half
#      training beside nnabla's updater, the AMP rewrite) and a short benchmark;
#   5. write reports/gpu.md: the GPU, the versions, the tests' summary and the benchmark.
# Usage: bash scripts/gpu_check.sh            (from anywhere; the checkout is this script's parent)
#        bash scripts/gpu_check.sh --library-path   (print the LD_LIBRARY_PATH step 3 would use,
#                                               from DLS_PYTHON or python3, and check it)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
deadline=$((SECONDS + 480))
say() { echo "gpu_check.sh: $*" >&2; }
left() { echo $((deadline - SECONDS > 10 ? deadline - SECONDS : 10)); }

# The nvidia-*-cu12 wheels' lib folders, ':'-joined, from the python $1; exit 1 naming any
# library nnabla-ext-cuda120 1.39 needs (readelf -d of libnnabla_cuda-120_8.so) that none holds.
library_path() {
  "$1" - <<'EOF'
import importlib.util, os, sys

NEEDED = ["libcudart.so.12", "libcublas.so.12", "libcusolver.so.11", "libcurand.so.10",
          "libcufft.so.11", "libcudnn.so.8"]
spec = importlib.util.find_spec("nvidia")
roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
dirs = sorted({os.path.join(r, d, "lib") for r in roots for d in os.listdir(r)
               if os.path.isdir(os.path.join(r, d, "lib"))})
missing = [n for n in NEEDED if not any(os.path.exists(os.path.join(d, n)) for d in dirs)]
if missing:
    where = ", ".join(dirs) or "no nvidia package on sys.path"
    sys.exit(f"gpu_check.sh: {', '.join(missing)} not found in the nvidia-*-cu12 wheels' "
             f"folders ({where}); pip install -r scripts/gpu-requirements.txt")
print(":".join(dirs))
EOF
}

if [ "${1:-}" = "--library-path" ]; then
  library_path "${DLS_PYTHON:-python3}"
  exit
fi

if ! gpus="$(nvidia-smi -L 2>/dev/null)" || ! grep -q '^GPU ' <<<"$gpus"; then
  say "no NVIDIA GPU here (nvidia-smi lists none): nothing installed, nothing run"
  exit 1
fi

say "$(grep -c '^GPU ' <<<"$gpus") GPU(s): $(head -n 1 <<<"$gpus")"
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
say "installing scripts/gpu-requirements.txt into .venv (CUDA and cuDNN wheels: a few GB)"
timeout "$(left)" .venv/bin/python -m pip install --quiet -r scripts/gpu-requirements.txt
libs="$(library_path .venv/bin/python)"
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
.venv/bin/python -c "from updater.runtime.context import cuda_device_count as c; assert c() > 0, \
'nnabla-ext-cuda sees no GPU: see the DEBUG log of updater.runtime.context'"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
say "running the tests marked gpu"
status=0
timeout "$(left)" .venv/bin/python -m pytest -m gpu -n 0 -p no:cacheprovider -rs \
  tests/gpu 2>&1 | tee "$log" || status=$?
say "running the benchmark (cudnn:half and cudnn:float, ours against nnabla's updater)"
timeout "$(left)" .venv/bin/python -m benchmarks.bench_gpu --tests "$log" --out reports/gpu.md
say "done in $SECONDS s: reports/gpu.md"
exit "$status"
