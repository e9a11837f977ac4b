#!/usr/bin/env bash
# Runs the tests (docs/reliability.md, "Test tiers").
#
#   scripts/test.sh          the fast tier (what CI runs): every test of the release build (build/),
#                            then the sanitizer builds' `sanitize`-labelled tests: build-asan/
#                            (ASan + UBSan) runs the hostile-input, C ABI and end-to-end tests and
#                            the fuzz corpora; build-tsan/ (TSan) runs the concurrency tests.
#   scripts/test.sh --full   the same, then every test under both sanitizers and a libFuzzer run of
#                            each fuzz target ($PTC_FUZZ_SECONDS each, default 300). Run it before a
#                            release and after changing the readers, the C ABI's checks or threading.
#
# The sanitizer builds are configured and built here on first use (-O1 with line tables, through
# ccache where installed); their tests compile the generated libraries with the same sanitizers
# (ptc compile --sanitize). PTC_LONG_TESTS=0 skips the long test (a model with over 2 GiB of
# weights: ~5 GB of disk).
set -euo pipefail
cd "$(dirname "$0")/.."

full=0
case "${1:-}" in
  "") ;;
  --full) full=1 ;;
  *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
esac
[ -f build/build.ninja ] || { echo "test.sh: no build/ yet; run scripts/setup.sh first" >&2; exit 1; }

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# configure_sanitizer DIR SANITIZERS [VAR=VALUE for the environment...]: a sanitizer build tree
# without the TorchScript reader (libtorch is not built with sanitizers).
configure_sanitizer() {
  local dir=$1 sanitize=$2
  shift 2
  [ -f "$dir/build.ninja" ] && return
  env "$@" cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTC_WITH_TORCHSCRIPT=OFF \
    -DPTC_SANITIZE="$sanitize" "${launcher[@]}" >/dev/null
}

# The release build's suite.
cmake --build build
ctest --test-dir build --output-on-failure -j2 -LE long
[ "${PTC_LONG_TESTS:-1}" = 0 ] || ctest --test-dir build --output-on-failure -L long

# AddressSanitizer + UndefinedBehaviorSanitizer.
configure_sanitizer build-asan address,undefined
cmake --build build-asan
asan_env=(ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1)
label=(-L sanitize)
[ $full = 1 ] && label=()
env "${asan_env[@]}" ctest --test-dir build-asan --output-on-failure -j2 "${label[@]}"

# ThreadSanitizer (clang, with LLVM's OpenMP runtime, whose Archer tool makes OpenMP's
# synchronization visible to TSan).
configure_sanitizer build-tsan thread CC=clang CXX=clang++
cmake --build build-tsan
ARCHER="$(dirname "$(readlink -f "$(command -v clang++)")")/../lib/libarcher.so"
TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:ignore_noninstrumented_modules=1" OMP_TOOL_LIBRARIES="$ARCHER" \
  ctest --test-dir build-tsan --output-on-failure -j2 "${label[@]}"

if [ $full = 1 ]; then
  bash scripts/fuzz.sh "${PTC_FUZZ_SECONDS:-300}"
fi
echo "test.sh: all tests passed ($([ $full = 1 ] && echo full || echo fast) tier)"
