#!/usr/bin/env bash
# examples/generate end to end: export a small decoder's decode step (and the tokens
# transformers' model.generate(do_sample=False) gives), compile it, build the C++ generator
# against only the library and its header, and check that it and the Python package's generator
# continue the prompt with exactly those tokens; the library links no torch / Python.
set -euo pipefail
SRC="$1" PTC="$2" WORK="$3"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$SRC/.venv/bin/python" "$SRC/examples/generate/export.py" . --new-tokens 16
"$PTC" compile decode.pt2 -o decode.so --no-cache
"${CXX:-c++}" -O2 "$SRC/examples/generate/generate.cpp" -I. -L. -l:decode.so -Wl,-rpath,'$ORIGIN' -o generate
prompt=$(sed -n 1p expected.txt) want=$(sed -n 2p expected.txt)
got=$(./generate 16 $prompt)
if [ "$got" != "$want" ]; then
  echo "C++ generator: got '$got', model.generate gave '$want'" && exit 1
fi
got_py=$(PYTHONPATH="$SRC/python" "$SRC/.venv/bin/python" "$SRC/examples/generate/generate.py" decode.so 16 $prompt 2>/dev/null)
if [ "$got_py" != "$want" ]; then
  echo "Python generator: got '$got_py', model.generate gave '$want'" && exit 1
fi
if ldd decode.so | awk '{print $1}' | grep -Eiq 'torch|python|libc10'; then
  echo "decode.so links torch or Python:" && ldd decode.so && exit 1
fi
echo "generation example: 16 tokens as model.generate: ok"
