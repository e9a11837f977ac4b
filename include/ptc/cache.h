// The compile cache: content-addressed entries under $PTC_CACHE_DIR (default
// $XDG_CACHE_HOME/ptc or ~/.cache/ptc).
//
//   models/<key>/   a whole compile's outputs (library, header, weights, report, manifest), keyed
//                   by the model's bytes + the options + this ptc binary + the host compiler
//   objects/<key>/  one translation unit's object file, keyed by its source + flags + compiler
//
// Entries are written to a temporary folder and renamed into place, so concurrent compiles never
// see half an entry. The cache trims itself to $PTC_CACHE_MAX_MB (default 4096), oldest use first.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ptc {

class CompileCache {
 public:
  // The cache at its default place, or a disabled one (`--no-cache`, or no usable folder).
  static CompileCache open(bool disabled);
  static CompileCache at(const std::string& root);
  bool enabled() const { return !root_.empty(); }
  const std::string& root() const { return root_; }

  using Files = std::vector<std::pair<std::string, std::string>>;  // entry file name, path outside
  // On a hit copies each entry file to its path (atomically) and returns true.
  bool fetch(const std::string& kind, const std::string& key, const Files& to) const;
  // The text of one file of an entry; false when the entry or the file is missing.
  bool read(const std::string& kind, const std::string& key, const std::string& name, std::string& text) const;
  // Stores the files (and `texts`: entry file name, contents) as one entry. A failure (disk
  // full, read-only) is logged, never fatal.
  void store(const std::string& kind, const std::string& key, const Files& from, const Files& texts = {}) const;
  // Removes the least recently used entries until the cache holds at most `max_bytes`.
  void trim(uint64_t max_bytes) const;
  uint64_t max_bytes() const;

 private:
  std::string root_;
};

// SHA-256 of the running ptc executable: any change to ptc changes every key.
const std::string& ptc_identity();
// What `command --version` prints (memoized per command): the compiler's identity.
const std::string& tool_identity(const std::string& command);
// The host CPU (model name and feature flags), for code built with -march=native.
const std::string& host_cpu_identity();

}  // namespace ptc
