#!/usr/bin/env bash
# The README's training example end to end: export examples/train_mlp's model, compile it with
# --train, build examples/train_mlp/train.cpp against only the library and its header, run it
# (it exits non-zero unless the loss drops 4x), and check the library links no torch/Python.
set -euo pipefail
SRC="$1" PTC="$2" WORK="$3"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$SRC/.venv/bin/python" "$SRC/examples/train_mlp/export.py" train_mlp.pt2 2>/dev/null
"$PTC" compile train_mlp.pt2 -o train_mlp.so --train --no-cache
"${CXX:-c++}" -O2 "$SRC/examples/train_mlp/train.cpp" -I. -L. -l:train_mlp.so -Wl,-rpath,'$ORIGIN' -o train
./train
# Library names only: ldd's load addresses are random hex and can contain "c10".
if ldd train_mlp.so | awk '{print $1}' | grep -Eiq 'torch|python|libc10'; then
  echo "train_mlp.so links torch or Python:" && ldd train_mlp.so && exit 1
fi
echo "training example: ok"
