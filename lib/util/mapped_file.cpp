#include "ptc/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ptc/error.h"

namespace ptc {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) user_error(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    user_error(path, ": cannot stat: ", std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    user_error(path, ": is a directory, not a model file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      user_error(path, ": cannot map into memory: ", std::strerror(e));
    }
    f->data_ = static_cast<const std::byte*>(p);
    f->mapped_ = true;
  }
  ::close(fd);
  return f;
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::string bytes, std::string name) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->owned_ = std::move(bytes);
  f->data_ = reinterpret_cast<const std::byte*>(f->owned_.data());
  f->size_ = f->owned_.size();
  f->path_ = std::move(name);
  return f;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace ptc
