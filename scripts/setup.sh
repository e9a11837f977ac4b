#!/usr/bin/env bash
# One command from a fresh machine to a usable ptc: Debian packages, the project venv with the
# pinned torch (scripts/requirements.txt), then the release build in build/ (build/ptc). Safe and
# fast to re-run. The sanitizer builds the tests use are made by scripts/test.sh when it first
# needs them.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang + libclang-rt-dev + libomp-dev: the ThreadSanitizer build (with LLVM's OpenMP) and the
# fuzzers of scripts/test.sh and scripts/fuzz.sh. ccache: rebuilds of every tree reuse objects.
# libdnnl-dev: oneDNN, the CPU's channels-last convolutions (docs/user-guide.md).
APT_PACKAGES=(build-essential cmake ninja-build pkg-config python3-venv ccache
              libcli11-dev nlohmann-json3-dev libspdlog-dev catch2 libminizip-dev zlib1g-dev
              clang libclang-rt-dev libomp-dev libdnnl-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python environment with the pinned torch (the numeric reference and the exporter).
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.ptc-requirements
# (scripts/requirements-bench.txt: ONNX Runtime and OpenVINO, the peers of scripts/bench.py --peers)
if ! cat scripts/requirements.txt scripts/requirements-bench.txt | cmp -s - "$stamp"; then
  echo "setup: installing Python packages (scripts/requirements.txt, scripts/requirements-bench.txt)"
  # torch with its CUDA libraries unpacks to about 5 GiB; --no-cache-dir keeps pip from holding a
  # second copy of the wheels in ~/.cache/pip.
  free_gib=$(df -Pk .venv | awk 'NR==2 {print int($4 / 1048576)}')
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir \
         -r scripts/requirements.txt -r scripts/requirements-bench.txt; then
    echo "setup: pip could not install scripts/requirements.txt (${free_gib} GiB was free under" \
         "$(pwd)/.venv; the packages need about 8 GiB while installing)" >&2
    exit 1
  fi
  cat scripts/requirements.txt scripts/requirements-bench.txt > "$stamp"
fi
TORCH_DIR=$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))')

# The release build (with the TorchScript reader), through ccache where it is installed.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTC_TORCH_DIR="$TORCH_DIR" "${launcher[@]}" >/dev/null
cmake --build build
echo "setup: done (build/ptc; tests: scripts/test.sh)"
