#!/usr/bin/env bash
# Build the CPU test environment (make test runs this once; test/requirements-cpu.txt says why each
# pin). Prints pip's progress, then the environment's size.
#
#   test/env/build.sh PYTHON VENV [REQUIREMENTS]
# REQUIREMENTS (default test/requirements-cpu.txt): the rebase passes a newer release's pins.
set -euo pipefail
python=$1 venv=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
requirements=${3:-$repo/test/requirements-cpu.txt}
echo "test env: building $venv with $("$python" --version) (a few minutes, once; about 1.4 GB)"
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --no-compile --progress-bar on)
"${pip[@]}" -r "$requirements"
"${pip[@]}" --no-deps -e "$repo/python"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# torchvision imports on the CPU torch (test/env/torchvision_cpu_ops.py says how)
printf '%s\nimport torchvision_cpu_ops\n' "$repo/test/env" > "$site/sglang-gemma4-test-env.pth"
# What the CPU tests never use (kernels run under TRITON_INTERPRET=1, nothing is compiled or linked):
# triton's CUDA toolchain and profiler libraries (ptxas, cuobjdump, nvdisasm, CUPTI), torch's C++
# unit-test programs, xgrammar's static library, and the debug sections of the two libraries that ship them (triton's compiler,
# xgrammar's bindings; not the auditwheel-patched ones, which strip would break).
rm -rf "$site/triton/backends/nvidia/bin" "$site/triton/backends/nvidia/lib/cupti" "$site/xgrammar/lib" \
       "$site/torch/test"
if command -v strip >/dev/null; then
  strip --strip-debug "$site"/triton/_C/*.so "$site"/xgrammar/*.so
else
  echo "test env: no strip (binutils): triton's and xgrammar's libraries keep their debug sections" \
       "(about 0.3 GB more)" >&2
fi
if ! "$venv/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is not None)'; then
  echo "test env: pip installed a CUDA build of torch (no CPU build for $("$python" --version) in its" \
       "sources): the tests run the same, in a few GB more" >&2
fi
echo "test env: $(du -sh "$venv" | cut -f1) in $venv"
