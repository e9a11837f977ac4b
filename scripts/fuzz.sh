#!/usr/bin/env bash
# Fuzzing (docs/reliability.md): builds the libFuzzer targets with clang, AddressSanitizer,
# UndefinedBehaviorSanitizer and coverage in build-fuzz/, then runs each target for a fixed time.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s; pt2 pt2_entries abi)
#
# Targets: pt2 (whole archives), pt2_entries (the archive's entries, packed into a valid zip by
# the harness), abi (a generated library's C ABI: $PTC_FUZZ_ABI_MODEL, default index_ops, built
# with the same sanitizers). The working corpus stays in build-fuzz/corpus/<target> between runs;
# a crash is written to fuzz/regressions/<target>/ — fix it and commit the file: CTest replays
# every file there (fuzz_replay_<target>). Totals go to build-fuzz/fuzz-log.txt.
# PTC_FUZZ_SAVE=1 also copies the corpus's small inputs (< 16 KiB, coverage-minimized) into
# fuzz/corpus/<target>/ for CTest's replay.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(pt2 pt2_entries abi)
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is needed (scripts/setup.sh installs it)" >&2; exit 1; }

if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTC_WITH_TORCHSCRIPT=OFF \
    -DPTC_SANITIZE=address,undefined -DPTC_FUZZ=ON >/dev/null
fi
cmake --build build-fuzz --target ptc $(printf 'fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus" "fuzz/regressions/$t"
  seeds=()
  case "$t" in
    pt2) seeds=(build-fuzz/seeds/pt2); mkdir -p "${seeds[0]}"; cp models/*.pt2 "${seeds[0]}/" ;;
    pt2_entries) seeds=(build-fuzz/seeds/pt2_entries); python3 fuzz/make_seeds.py "${seeds[0]}" models/*.pt2 ;;
    abi)
      model=${PTC_FUZZ_ABI_MODEL:-index_ops}
      build-fuzz/ptc compile -q "models/$model.pt2" -o "build-fuzz/abi-$model.so" --no-cache --cxx clang++ \
        --sanitize address,undefined,fuzzer-no-link
      export PTC_FUZZ_LIB=$PWD/build-fuzz/abi-$model.so
      # One OpenMP thread: argument checking needs no parallel kernels, and LeakSanitizer's
      # exit-time check crashed once with OpenMP's pool threads alive (after a clean 30 minutes).
      export OMP_NUM_THREADS=1
      ;;  # seeds: fuzz/corpus/abi, below
  esac
  [ -d "fuzz/corpus/$t" ] && seeds+=("fuzz/corpus/$t")
  echo "== fuzz_$t for ${secs} s"
  set +e
  build-fuzz/fuzz/fuzz_$t -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="fuzz/regressions/$t/" "$corpus" "${seeds[@]}" 2>&1 | tee "build-fuzz/fuzz_$t.log" | grep -E "^#[0-9]+ +(DONE|INITED)|ERROR|SUMMARY|stat::number_of_executed_units|Done" 
  rc=${PIPESTATUS[0]}
  set -e
  runs=$(grep -Eo "stat::number_of_executed_units: [0-9]+" "build-fuzz/fuzz_$t.log" | awk '{print $2}')
  echo "$(date -u +%FT%TZ) fuzz_$t seconds=$secs executions=${runs:-?} exit=$rc" | tee -a build-fuzz/fuzz-log.txt
  if [ "${PTC_FUZZ_SAVE:-0}" = 1 ]; then
    rm -rf build-fuzz/merged && mkdir -p build-fuzz/merged "fuzz/corpus/$t"
    build-fuzz/fuzz/fuzz_$t -merge=1 build-fuzz/merged "$corpus" >/dev/null 2>&1 || true
    find build-fuzz/merged -type f -size -16k -exec cp {} "fuzz/corpus/$t/" \;
  fi
  [ "$rc" = 0 ] || { echo "fuzz_$t found a problem: see build-fuzz/fuzz_$t.log and fuzz/regressions/$t/" >&2; exit 1; }
done
