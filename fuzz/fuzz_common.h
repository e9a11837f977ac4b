// Shared by the fuzz targets (fuzz/*.cpp): the compiler's front half on archive bytes (zip
// archives are written with test/zip_writer.h). Built into the libFuzzer binaries (clang,
// scripts/fuzz.sh) and into the corpus-replay tests (any compiler, CTest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ptc::fuzz {

// Reads `bytes` as a .pt2 archive and, when it reads, runs everything of `ptc compile` before the
// host compiler: the graph passes, lowering, scheduling, the weight layout and both backends'
// code generation. Bad input must end in a UserError; any other outcome (a crash, a sanitizer
// report, an InternalError when PTC_FUZZ_STRICT=1) is a bug the fuzzer reports.
void compile_front_half(std::string bytes);

}  // namespace ptc::fuzz
