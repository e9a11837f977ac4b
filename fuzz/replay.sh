#!/usr/bin/env bash
# CTest's corpus replay of one fuzz target (see fuzz/CMakeLists.txt):
#   replay.sh TARGET REPLAYER SOURCE_DIR WORK_DIR PTC SANITIZE CXX
# pt2: the fixture archives, fuzz/corpus/pt2 and fuzz/regressions/pt2.
# pt2_entries: the fixtures as entry records (fuzz/make_seeds.py) and the committed inputs.
# abi: compiles models/index_ops.pt2 and models/tfm_dyn.pt2 (with the build's sanitizers) and
#      replays the abi inputs against each (a sanitizer build compiles them with its own compiler
#      and sanitizers: one sanitizer runtime per process).
set -euo pipefail
target=$1 replayer=$2 src=$3 work=$4 ptc=$5 sanitize=${6:-} cxx=${7:-c++}
mkdir -p "$work"
dirs=()
for d in "$src/fuzz/corpus/$target" "$src/fuzz/regressions/$target"; do
  [ -d "$d" ] && dirs+=("$d")
done
case "$target" in
  pt2) "$replayer" "$src"/models/*.pt2 "${dirs[@]}" ;;
  pt2_entries)
    python3 "$src/fuzz/make_seeds.py" "$work/seeds" "$src"/models/*.pt2
    "$replayer" "$work/seeds" "${dirs[@]}" ;;
  abi)
    flags=()
    [ -n "$sanitize" ] && flags=(--sanitize "$sanitize" --cxx "$cxx")
    for model in index_ops tfm_dyn; do
      "$ptc" compile -q "$src/models/$model.pt2" -o "$work/$model.so" "${flags[@]}"
      PTC_FUZZ_LIB="$work/$model.so" "$replayer" "${dirs[@]}"
    done ;;
  *) echo "replay.sh: unknown target $target" >&2; exit 2 ;;
esac
