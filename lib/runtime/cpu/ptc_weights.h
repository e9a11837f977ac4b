// ptc_weights.h — the external weights file (`ptc compile --weights external`), shared by ptc
// (which writes it) and generated libraries (which map and verify it at ptc_open).
//
//   offset 0   "PTCWGT01"
//          8   uint64 payload bytes
//         16   uint64 checksum of the payload (ptc_rt::checksum)
//         24   uint64 model id (ties the file to the library that was compiled with it)
//         64   payload: the weights blob, 64-byte aligned entries
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace ptc_rt {

constexpr size_t kWeightsHeader = 64;

// A fast 64-bit checksum of a byte range (8 bytes a step, multiply-xorshift mixing).
inline uint64_t checksum(const unsigned char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  return h;
}

// The same checksum over a byte stream given in pieces (total length known up front).
class Checksummer {
 public:
  explicit Checksummer(uint64_t total) : h_(0x9E3779B97F4A7C15ull ^ total) {}
  void add(const unsigned char* p, size_t n) {
    while (n > 0) {
      size_t take = std::min<size_t>(n, 8 - carry_n_);
      std::memcpy(carry_ + carry_n_, p, take);
      carry_n_ += take;
      p += take;
      n -= take;
      if (carry_n_ == 8) {
        uint64_t w;
        std::memcpy(&w, carry_, 8);
        h_ = (h_ ^ w) * 0xBF58476D1CE4E5B9ull;
        h_ ^= h_ >> 31;
        carry_n_ = 0;
      }
    }
  }
  uint64_t finish() {
    uint64_t h = h_;
    for (size_t i = 0; i < carry_n_; ++i) h = (h ^ carry_[i]) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    return h;
  }

 private:
  uint64_t h_;
  unsigned char carry_[8] = {};
  size_t carry_n_ = 0;
};

struct MappedWeights {
  void* base = nullptr;
  size_t size = 0;
  const unsigned char* payload = nullptr;
};

// The weights file for a library: `given` when not null, else next to the shared object that
// contains `self` (model.so -> model.weights). False, with a message in `err`, when the library
// cannot be located.
inline bool weights_path(const char* given, const void* self, std::string& path, std::string& err) {
  if (given) {
    path = given;
    return true;
  }
  Dl_info info{};
  if (!dladdr(self, &info) || !info.dli_fname) {
    err = "cannot locate the library to find its weights; pass the weights path";
    return false;
  }
  path = info.dli_fname;
  size_t dot = path.rfind(".so");
  if (dot != std::string::npos) path.resize(dot);
  path += ".weights";
  return true;
}

// Maps and verifies `path`; on failure returns false with a message in `err`.
inline bool map_weights(const char* path, uint64_t bytes, uint64_t sum, uint64_t model_id, MappedWeights& out,
                        std::string& err) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err = std::string(path) + ": cannot open the weights file: " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != kWeightsHeader + bytes) {
    ::close(fd);
    err = std::string(path) + ": the weights file has " + std::to_string(static_cast<long long>(st.st_size)) +
          " bytes, this library needs " + std::to_string(kWeightsHeader + bytes) + " (truncated, or another model's?)";
    return false;
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    err = std::string(path) + ": cannot map the weights file";
    return false;
  }
  const unsigned char* h = static_cast<const unsigned char*>(p);
  uint64_t f_bytes, f_sum, f_id;
  std::memcpy(&f_bytes, h + 8, 8);
  std::memcpy(&f_sum, h + 16, 8);
  std::memcpy(&f_id, h + 24, 8);
  const char* why = nullptr;
  if (std::memcmp(h, "PTCWGT01", 8) != 0) why = "is not a ptc weights file";
  else if (f_id != model_id) why = "belongs to a different compiled model";
  else if (f_bytes != bytes || f_sum != sum) why = "does not match this library";
  else if (checksum(h + kWeightsHeader, bytes) != sum) why = "is corrupt (checksum mismatch)";
  if (why) {
    ::munmap(p, static_cast<size_t>(st.st_size));
    err = std::string(path) + ": the weights file " + why;
    return false;
  }
  out.base = p;
  out.size = static_cast<size_t>(st.st_size);
  out.payload = h + kWeightsHeader;
  return true;
}

inline void unmap_weights(MappedWeights& w) {
  if (w.base) ::munmap(w.base, w.size);
  w = MappedWeights{};
}

}  // namespace ptc_rt
