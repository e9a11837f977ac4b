#!/usr/bin/env bash
# Compiles every fixture (models/*.pt2, *.core.pt2, *.pt) with `ptc compile --device cuda` into
# DIR/cuda_<model>_<flavour>.so, for scripts/cuda_check.py on a GPU machine. Needs nvcc, no GPU.
#   scripts/build_cuda_fixtures.sh DIR [extra ptc compile flags]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: build_cuda_fixtures.sh DIR [flags]}"
shift
mkdir -p "$out"
for exp in "$root"/models/*.expect.json; do
  name="$(basename "$exp" .expect.json)"
  for flavour in pt2 core.pt2 pt; do
    model="$root/models/$name.$flavour"
    [ -f "$model" ] || continue
    lib="$out/cuda_${name}_${flavour/./_}.so"
    "$root/build/ptc" compile "$model" -o "$lib" --device cuda -q "$@"
    echo "$lib"
    if [ "$flavour" = pt2 ]; then  # and a --cuda-graphs build for the benchmark
      "$root/build/ptc" compile "$model" -o "${lib%.so}_graphs.so" --device cuda --cuda-graphs -q "$@"
      echo "${lib%.so}_graphs.so"
    fi
  done
done
