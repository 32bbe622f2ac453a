#!/usr/bin/env bash
# Install an sglang-gemma4 bundle (`make bundle`) on an offline GPU host. No network is used.
#
#   scripts/gpu/setup.sh [BUNDLE_DIR]      default: dist/bundle
#
# Installs the carried wheels into $PREFIX/site (pristine sglang 0.5.12 and its missing
# dependencies) and a copy of the sglang package with the series' overlay into $PREFIX/patched,
# then writes $PREFIX/env-pristine.sh and $PREFIX/env-patched.sh, which select one of the two
# through PYTHONPATH (the host's own packages stay underneath).
set -euo pipefail
BUNDLE_DIR=${1:-dist/bundle}
PREFIX=${PREFIX:-/tmp/sglang-gemma4}
PYTHON=${PYTHON:-python3}
start=$(date +%s)

parts=("$BUNDLE_DIR"/*.tar.xz.part-*)
[ -e "${parts[0]}" ] || { echo "setup: no *.tar.xz.part-* in $BUNDLE_DIR (run make bundle)" >&2; exit 1; }
bundle_id=$(cat "${parts[@]}" | sha256sum | cut -c1-16)
if [ "$(cat "$PREFIX/.bundle-id" 2>/dev/null)" = "$bundle_id" ]; then
  echo "setup: bundle $bundle_id already installed in $PREFIX"
else
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  cat "${parts[@]}" | tar -xJ -C "$PREFIX"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$PREFIX/site" \
    "$PREFIX"/bundle/wheels/*.whl
  mkdir -p "$PREFIX/patched"
  cp -a "$PREFIX/site/sglang" "$PREFIX/patched/sglang"
  cp -a "$PREFIX/bundle/overlay/." "$PREFIX/patched/"
  echo "$bundle_id" > "$PREFIX/.bundle-id"
fi

# Where the server writes caches: kept beside the install, not in it, so Triton/flashinfer JIT
# output (minutes on a cold cache) survives a reinstall on the same host.
cat > "$PREFIX/env-common.sh" <<EOT
export SGLANG_GEMMA4_PREFIX=$PREFIX
export TRITON_CACHE_DIR=\${TRITON_CACHE_DIR:-$PREFIX-cache/triton}
export FLASHINFER_WORKSPACE_BASE=\${FLASHINFER_WORKSPACE_BASE:-$PREFIX-cache}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
EOT
echo ". $PREFIX/env-common.sh; export PYTHONPATH=$PREFIX/site SGLANG_GEMMA4_BUILD=pristine" > "$PREFIX/env-pristine.sh"
echo ". $PREFIX/env-common.sh; export PYTHONPATH=$PREFIX/patched:$PREFIX/site SGLANG_GEMMA4_BUILD=patched" > "$PREFIX/env-patched.sh"

# Importing torch and transformers twice takes ~25 s: done once per install, then read back. Server
# arguments are imported too, so a wheel the bundle lacks fails here rather than in every server.
if [ ! -s "$PREFIX/versions.txt" ]; then
  for build in pristine patched; do
    # shellcheck disable=SC1090
    version=$( (. "$PREFIX/env-$build.sh"; cd /tmp && "$PYTHON" -c \
      'import sglang.version as v, sglang.srt.server_args, transformers as t, torch; print(v.__version__, "transformers", t.__version__, "torch", torch.__version__)') )
    echo "setup: $build: $version  (source $PREFIX/env-$build.sh)"
  done > "$PREFIX/versions.txt.new"
  mv "$PREFIX/versions.txt.new" "$PREFIX/versions.txt"
fi
cat "$PREFIX/versions.txt"
echo "setup: series $(python3 -c "import json; m=json.load(open('$PREFIX/bundle/manifest.json')); print(m['series_version'], m['patches'])")"
echo "setup: $(find "$PREFIX/bundle/wheels" -mindepth 1 -maxdepth 1 | wc -l) wheels in $PREFIX/site, $(find "$PREFIX/bundle/overlay" -type f | wc -l) overlay files; $(( $(date +%s) - start )) s"
