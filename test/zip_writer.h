// Writes zip archives byte by byte, including malformed ones: the tests' hostile archives and
// the pt2_entries fuzz target's archives (fuzz/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptc::test {

struct ZipItem {
  std::string name;
  std::string data;
  bool deflate = false;     // raw deflate (method 8), else stored (method 0)
  int64_t declared = -1;    // the uncompressed size written in the headers (-1: the real one)
};

// The archive's bytes: local headers and data, then the central directory (no zip64).
std::string make_zip(const std::vector<ZipItem>& items);

}  // namespace ptc::test
