#!/usr/bin/env bash
# Runs every test: the main build's suite, then the sanitizer build's (AddressSanitizer +
# UndefinedBehaviorSanitizer; the TorchScript tests are not part of it).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build
cmake --build build-asan
ctest --test-dir build --output-on-failure -j2
ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j2
