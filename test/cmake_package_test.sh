#!/usr/bin/env bash
# Installs ptc into a scratch prefix, then builds examples/cmake_model against it with
# find_package(ptc) + ptc_add_model(), runs the program on both cases of the mlp_dyn fixture
# (compared with PyTorch eager's outputs), and checks the rebuild rules: a second build compiles
# nothing, touching the model recompiles it. Finally builds the CPack archives.
#   cmake_package_test.sh <source dir> <build dir> <scratch dir>
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
export PTC_CACHE_DIR="$work/cache"
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -x "$work/prefix/bin/ptc" || fail "no bin/ptc in the install"
test -f "$work/prefix/include/ptc/runtime.h" || fail "no include/ptc/runtime.h in the install"
test -f "$work/prefix/lib/cmake/ptc/ptcConfig.cmake" || fail "no ptcConfig.cmake in the install"

cp "$src/models/mlp_dyn.pt2" "$work/model.pt2"
cmake -S "$src/examples/cmake_model" -B "$work/example" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DMODEL="$work/model.pt2" > "$work/configure.log"
cmake --build "$work/example" > "$work/build1.log" 2>&1 || { cat "$work/build1.log"; fail "first build"; }
grep -q "ptc: compiling" "$work/build1.log" || fail "the first build did not compile the model"
for c in 0 1; do
  "$work/example/run_model" "$src/models/ref/mlp_dyn.case$c.in0.npy" "$src/models/ref/mlp_dyn.case$c.out0.npy" \
    || fail "run_model case $c does not match eager"
done
lib="$work/example/ptc/mlp/mlp.so"
stamp=$(stat -c %Y.%y "$lib")

sleep 1
cmake --build "$work/example" > "$work/build2.log" 2>&1 || { cat "$work/build2.log"; fail "second build"; }
if grep -q "ptc: compiling" "$work/build2.log"; then fail "an unchanged project recompiled the model"; fi
[ "$(stat -c %Y.%y "$lib")" = "$stamp" ] || fail "an unchanged project rewrote $lib"

touch "$work/model.pt2"
cmake --build "$work/example" > "$work/build3.log" 2>&1 || { cat "$work/build3.log"; fail "third build"; }
grep -q "ptc: compiling" "$work/build3.log" || fail "touching the model did not recompile it"
[ "$(stat -c %Y.%y "$lib")" != "$stamp" ] || fail "touching the model did not rewrite $lib"
"$work/example/run_model" "$src/models/ref/mlp_dyn.case1.in0.npy" "$src/models/ref/mlp_dyn.case1.out0.npy" \
  || fail "run_model after the rebuild"

# Reconfiguring with the same ptc_add_model arguments recompiles nothing; other arguments (here
# the model's path) recompile.
cmake -S "$src/examples/cmake_model" -B "$work/example" -DCMAKE_PREFIX_PATH="$work/prefix" -DMODEL="$work/model.pt2" \
      -DCMAKE_CXX_FLAGS=-O1 > /dev/null
cmake --build "$work/example" > "$work/build4.log" 2>&1 || { cat "$work/build4.log"; fail "fourth build"; }
if grep -q "ptc: compiling" "$work/build4.log"; then fail "reconfiguring with the same ptc_add_model arguments recompiled the model"; fi
cp "$work/model.pt2" "$work/model2.pt2"
cmake -S "$src/examples/cmake_model" -B "$work/example" -DCMAKE_PREFIX_PATH="$work/prefix" -DMODEL="$work/model2.pt2" > /dev/null
cmake --build "$work/example" > "$work/build5.log" 2>&1 || { cat "$work/build5.log"; fail "fifth build"; }
grep -q "ptc: compiling" "$work/build5.log" || fail "changing ptc_add_model's arguments did not recompile the model"

# Bad ptc_add_model() calls stop the configure step with one message.
mkdir -p "$work/bad"
bad_project() {
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(bad CXX)\nfind_package(ptc REQUIRED)\n%s\n' "$1" > "$work/bad/CMakeLists.txt"
  rm -rf "$work/bad/build"
  if cmake -S "$work/bad" -B "$work/bad/build" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/bad/log" 2>&1; then
    fail "configuring with '$1' succeeded"
  fi
  grep -q "$2" "$work/bad/log" || { cat "$work/bad/log"; fail "configuring with '$1' did not say '$2'"; }
}
bad_project "ptc_add_model(m)" "MODEL <file> is required"
bad_project "ptc_add_model(m MODEL /no/such.pt2)" "the model /no/such.pt2 does not exist"
bad_project "ptc_add_model(m MODEL $work/model.pt2 DEVICE tpu)" "DEVICE tpu: expected cpu or cuda"
bad_project "ptc_add_model(m MODEL $work/model.pt2 FOO)" "unknown arguments FOO"
bad_project "ptc_add_model(m MODEL $work/model.pt2 OPTIONS --weights external)" "pass --weights through its own argument"
# (the help text is read whole first: with pipefail, grep -q leaving early would fail the pipe)
ptc_help=$("$work/prefix/bin/ptc" compile --help)
if ! grep -q -- "--train" <<< "$ptc_help"; then
  bad_project "ptc_add_model(m MODEL $work/model.pt2 TRAIN)" "TRAIN needs a ptc that compiles training libraries"
fi

(cd "$build" && cpack -G TGZ -B "$work/cpack" > "$work/cpack.log") || { cat "$work/cpack.log"; fail "cpack TGZ"; }
tgz=$(ls "$work"/cpack/ptc-*.tar.gz)
tar -tzf "$tgz" > "$work/tgz.txt"
for f in bin/ptc include/ptc/runtime.h lib/cmake/ptc/ptcConfig.cmake lib/cmake/ptc/ptcModel.cmake; do
  grep -q "/$f\$" "$work/tgz.txt" || fail "$f is not in $tgz"
done
if command -v dpkg-deb > /dev/null; then
  (cd "$build" && cpack -G DEB -B "$work/cpack" > "$work/cpack-deb.log") || { cat "$work/cpack-deb.log"; fail "cpack DEB"; }
  deb=$(ls "$work"/cpack/ptc-*.deb)
  dpkg-deb -c "$deb" > "$work/deb.txt"
  grep -q "./usr/bin/ptc\$" "$work/deb.txt" || fail "usr/bin/ptc is not in $deb"
  dpkg-deb -f "$deb" Depends | grep -q "g++" || fail "$deb does not depend on a host C++ compiler"
fi
echo "cmake package test passed"
