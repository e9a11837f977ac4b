// Read-only view of a zip archive held in a MappedFile. The central directory is read with
// minizip over the mapped bytes (no second open of the file); a stored (uncompressed) entry's
// bytes are returned as a span into the mapping, so weights are never copied.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ptc/mapped_file.h"

namespace ptc {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // offset of the entry's (compressed) bytes in the file
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  bool stored = false;  // compression method 0
};

struct ByteSpan {
  const std::byte* data = nullptr;
  size_t size = 0;
};

class ZipArchive {
 public:
  // Reads the directory. Throws UserError ("<path>: not a zip archive ...") on anything malformed:
  // truncated files, entries past the end of the file, names that escape the archive.
  explicit ZipArchive(std::shared_ptr<const MappedFile> file);

  const std::string& path() const { return file_->path(); }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // The folder every entry sits under ("mlp/"), or "" for a flat archive.
  const std::string& root() const { return root_; }
  const ZipEntry* find(const std::string& name) const;  // full name inside the archive
  // Bytes of a stored entry, borrowed from the mapping. Throws UserError if compressed.
  ByteSpan span(const ZipEntry& e) const;
  // Whole entry as a string (decompressing when needed, CRC checked); refuses entries larger
  // than `limit` bytes.
  std::string read(const ZipEntry& e, size_t limit = size_t(1) << 30) const;
  std::shared_ptr<const MappedFile> file() const { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> by_name_;
  std::string root_;
};

}  // namespace ptc
