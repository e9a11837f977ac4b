#!/usr/bin/env bash
# Runs every test: the main build's suite, then the sanitizer builds' (AddressSanitizer +
# UndefinedBehaviorSanitizer, then ThreadSanitizer; the TorchScript tests are not part of them).
# Their tests compile the generated libraries with the same sanitizers (--sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build
cmake --build build-asan
cmake --build build-tsan
ctest --test-dir build --output-on-failure -j2 -LE long
# Long tests (a model with over 2 GiB of weights: ~5 GB of disk, a few minutes): PTC_LONG_TESTS=0 skips them.
[ "${PTC_LONG_TESTS:-1}" = 0 ] || ctest --test-dir build --output-on-failure -L long
ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j2
# Archer (LLVM OpenMP's TSan support) so that OpenMP barriers count as synchronization.
ARCHER="$(dirname "$(readlink -f "$(command -v clang++)")")/../lib/libarcher.so"
TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:ignore_noninstrumented_modules=1" OMP_TOOL_LIBRARIES="$ARCHER" \
  ctest --test-dir build-tsan --output-on-failure -j2
