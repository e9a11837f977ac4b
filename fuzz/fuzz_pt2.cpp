// Fuzz target: the bytes are a whole .pt2 archive (zip directory, entries, JSON, weights).
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ptc::fuzz::compile_front_half(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
