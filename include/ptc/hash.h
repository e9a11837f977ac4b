// SHA-256 (FIPS 180-4; with the x86 SHA extensions where the CPU has them, ~5x faster), for
// content addresses: the compile cache's keys and the model hash in a
// compiled library's manifest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ptc {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t n);
  Sha256& update(const std::string& s) { return update(s.data(), s.size()); }
  // A field with its length first, so that ("ab","c") and ("a","bc") hash differently.
  Sha256& field(const std::string& s);
  std::string hex();  // finishes; the object is spent afterwards

 private:
  void block(const unsigned char* p);                 // portable C++
  void blocks(const unsigned char* p, size_t n);     // SHA-NI where the CPU has it
  uint32_t h_[8];
  unsigned char buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

// The SHA-256 of a file's bytes (memory-mapped); throws UserError when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace ptc
