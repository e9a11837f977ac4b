#include "zip_archive.h"

#include <unzip.h>

#include <cstring>

#include "ptc/error.h"

namespace ptc {
namespace {

// minizip I/O callbacks over an in-memory buffer.
struct MemStream {
  const std::byte* data;
  uint64_t size;
  uint64_t pos;
};

voidpf mem_open(voidpf opaque, const void*, int) { return opaque; }
uLong mem_read(voidpf, voidpf stream, void* buf, uLong n) {
  auto* s = static_cast<MemStream*>(stream);
  uint64_t left = s->pos < s->size ? s->size - s->pos : 0;
  uLong k = static_cast<uLong>(n < left ? n : left);
  if (k) std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  return k;
}
uLong mem_write(voidpf, voidpf, const void*, uLong) { return 0; }
ZPOS64_T mem_tell(voidpf, voidpf stream) { return static_cast<MemStream*>(stream)->pos; }
long mem_seek(voidpf, voidpf stream, ZPOS64_T off, int origin) {
  auto* s = static_cast<MemStream*>(stream);
  uint64_t base = origin == ZLIB_FILEFUNC_SEEK_SET ? 0 : origin == ZLIB_FILEFUNC_SEEK_CUR ? s->pos : s->size;
  if (off > s->size || base > s->size - off) return -1;
  s->pos = base + off;
  return 0;
}
int mem_close(voidpf, voidpf) { return 0; }
int mem_error(voidpf, voidpf) { return 0; }

class Unz {
 public:
  Unz(const MappedFile& f) : stream_{f.data(), f.size(), 0} {
    zlib_filefunc64_def def{};
    def.zopen64_file = mem_open;
    def.zread_file = mem_read;
    def.zwrite_file = mem_write;
    def.ztell64_file = mem_tell;
    def.zseek64_file = mem_seek;
    def.zclose_file = mem_close;
    def.zerror_file = mem_error;
    def.opaque = &stream_;
    h_ = unzOpen2_64("", &def);
  }
  ~Unz() {
    if (h_) unzClose(h_);
  }
  unzFile get() const { return h_; }

 private:
  MemStream stream_;
  unzFile h_ = nullptr;
};

bool escapes(const std::string& name) {
  if (name.empty() || name[0] == '/' || name[0] == '\\') return true;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return name.find('\0') != std::string::npos || name.find('\\') != std::string::npos;
}

}  // namespace

ZipArchive::ZipArchive(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {
  const std::string& path = file_->path();
  Unz unz(*file_);
  if (!unz.get()) user_error(path, ": not a zip archive (no readable central directory; the file may be truncated or corrupt)");
  int rc = unzGoToFirstFile(unz.get());
  while (rc == UNZ_OK) {
    unz_file_info64 info{};
    char name[4097];
    if (unzGetCurrentFileInfo64(unz.get(), &info, name, sizeof name, nullptr, 0, nullptr, 0) != UNZ_OK)
      user_error(path, ": corrupt zip directory entry #", entries_.size());
    if (info.size_filename >= sizeof name) user_error(path, ": zip entry name longer than 4096 bytes");
    ZipEntry e;
    e.name.assign(name, info.size_filename);
    if (escapes(e.name)) user_error(path, ": zip entry '", e.name, "' escapes the archive root");
    e.compressed_size = info.compressed_size;
    e.size = info.uncompressed_size;
    e.stored = info.compression_method == 0;
    if (info.compression_method != 0 && info.compression_method != Z_DEFLATED)
      user_error(path, ": zip entry '", e.name, "' uses unsupported compression method ", info.compression_method);
    if (unzOpenCurrentFile(unz.get()) != UNZ_OK)
      user_error(path, ": zip entry '", e.name, "' has a corrupt local header");
    e.data_offset = unzGetCurrentFileZStreamPos64(unz.get());
    unzCloseCurrentFile(unz.get());
    if (e.data_offset > file_->size() || e.compressed_size > file_->size() - e.data_offset)
      user_error(path, ": zip entry '", e.name, "' extends past the end of the file (truncated archive?)");
    if (e.stored && e.size != e.compressed_size)
      user_error(path, ": stored zip entry '", e.name, "' declares ", e.size, " bytes but holds ", e.compressed_size);
    // Deflate expands at most ~1032:1; an entry that declares more is a zip bomb or a lie.
    if (!e.stored && e.size / 1032 > e.compressed_size + 1)
      user_error(path, ": zip entry '", e.name, "' declares ", e.size, " bytes from ", e.compressed_size,
                 " compressed bytes, more than deflate can produce (a zip bomb?)");
    if (by_name_.count(e.name)) user_error(path, ": zip entry '", e.name, "' appears twice");
    by_name_[e.name] = entries_.size();
    entries_.push_back(std::move(e));
    rc = unzGoToNextFile(unz.get());
  }
  if (rc != UNZ_END_OF_LIST_OF_FILE) user_error(path, ": corrupt zip directory after entry #", entries_.size());
  if (entries_.empty()) user_error(path, ": the zip archive is empty");
  size_t slash = entries_.front().name.find('/');
  if (slash != std::string::npos) {
    root_ = entries_.front().name.substr(0, slash + 1);
    for (const auto& e : entries_)
      if (e.name.compare(0, root_.size(), root_) != 0) {
        root_.clear();  // mixed layout: treat as flat
        break;
      }
  }
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

ByteSpan ZipArchive::span(const ZipEntry& e) const {
  if (!e.stored) user_error(path(), ": zip entry '", e.name, "' is compressed; ptc needs weights stored uncompressed to map them");
  return ByteSpan{file_->data() + e.data_offset, static_cast<size_t>(e.size)};
}

std::string ZipArchive::read(const ZipEntry& e, size_t limit) const {
  if (e.size > limit) user_error(path(), ": zip entry '", e.name, "' declares ", e.size, " bytes, more than the ", limit, "-byte limit");
  if (e.stored) {
    ByteSpan s = span(e);
    return std::string(reinterpret_cast<const char*>(s.data), s.size);
  }
  Unz unz(*file_);
  if (!unz.get() || unzLocateFile(unz.get(), e.name.c_str(), 1) != UNZ_OK || unzOpenCurrentFile(unz.get()) != UNZ_OK)
    user_error(path(), ": cannot open zip entry '", e.name, "'");
  std::string out(static_cast<size_t>(e.size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(out.size() - got, 1u << 20));
    int n = unzReadCurrentFile(unz.get(), out.data() + got, chunk);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  char extra;
  bool more = unzReadCurrentFile(unz.get(), &extra, 1) > 0;
  int close_rc = unzCloseCurrentFile(unz.get());
  if (got != out.size() || more || close_rc != UNZ_OK)
    user_error(path(), ": zip entry '", e.name, "' is corrupt (size or CRC mismatch)");
  return out;
}

}  // namespace ptc
