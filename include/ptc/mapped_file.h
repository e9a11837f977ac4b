// A read-only memory mapping of a whole file, shared by everything that borrows its bytes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace ptc {

class MappedFile {
 public:
  // Maps `path` read-only. Throws UserError naming the path when it cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  // Wraps bytes already in memory (copied), for tests and fuzzing.
  static std::shared_ptr<const MappedFile> from_bytes(std::string bytes, std::string name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool is_mapped() const { return mapped_; }  // true: bytes are an mmap of the file

 private:
  MappedFile() = default;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::string path_;
  std::string owned_;
};

}  // namespace ptc
