#!/usr/bin/env bash
# Compiles every fixture (models/*.pt2, *.core.pt2, *.pt) with `ptc compile --device cuda` into
# DIR/cuda_<model>_<flavour>.so, for scripts/cuda_check.py on a GPU machine. Needs nvcc, no GPU.
#   scripts/build_cuda_fixtures.sh DIR [extra ptc compile flags]
# PTC: the ptc binary (default build/ptc); JOBS: compiles at once (default 1; each compile runs
# -j of its own translation units).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: build_cuda_fixtures.sh DIR [flags]}"
shift
ptc="${PTC:-$root/build/ptc}"
mkdir -p "$out"
. "$root/scripts/cuda_env.sh" "$out"  # cuDNN: torch's pip one where the system has none
# One line per library: MODEL LIB [--cuda-graphs]
list() {
  for exp in "$root"/models/*.expect.json; do
    name="$(basename "$exp" .expect.json)"
    for flavour in pt2 core.pt2 pt; do
      model="$root/models/$name.$flavour"
      [ -f "$model" ] || continue
      lib="$out/cuda_${name}_${flavour/./_}.so"
      echo "$model $lib"
      # and a --cuda-graphs build of the export for the benchmark
      [ "$flavour" = pt2 ] && echo "$model ${lib%.so}_graphs.so --cuda-graphs"
    done
  done
}
export ptc
list | xargs -P "${JOBS:-1}" -L 1 sh -c 'm=$0 l=$1; shift; "$ptc" compile "$m" -o "$l" --device cuda -q "$@" '"$*"' && echo "$l"'
