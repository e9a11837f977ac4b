#include "ptc/cache.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "ptc/build.h"
#include "ptc/hash.h"

namespace ptc {
namespace fs = std::filesystem;

namespace {

fs::path entry_dir(const std::string& root, const std::string& kind, const std::string& key) {
  return fs::path(root) / kind / key.substr(0, 2) / key;
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};  // threads of one process storing at the same instant
  return std::to_string(getpid()) + "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "-" +
         std::to_string(counter++);
}

}  // namespace

CompileCache CompileCache::at(const std::string& root) {
  CompileCache c;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || access(root.c_str(), W_OK) != 0) {
    spdlog::warn("compile cache disabled: cannot write {}", root);
    return c;
  }
  c.root_ = root;
  return c;
}

CompileCache CompileCache::open(bool disabled) {
  if (disabled) return {};
  if (ptc_identity().empty()) {  // without it, different ptc builds would share entries
    spdlog::warn("compile cache disabled: cannot identify this ptc binary (/proc/self/exe)");
    return {};
  }
  if (const char* d = std::getenv("PTC_CACHE_DIR"); d && *d) return at(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return at((fs::path(x) / "ptc").string());
  if (const char* h = std::getenv("HOME"); h && *h) return at((fs::path(h) / ".cache" / "ptc").string());
  spdlog::debug("compile cache disabled: neither PTC_CACHE_DIR, XDG_CACHE_HOME nor HOME is set");
  return {};
}

uint64_t CompileCache::max_bytes() const {
  if (const char* m = std::getenv("PTC_CACHE_MAX_MB"); m && *m) {
    char* end = nullptr;
    unsigned long long mb = std::strtoull(m, &end, 10);
    if (end && *end == '\0') return static_cast<uint64_t>(mb) << 20;
    spdlog::warn("PTC_CACHE_MAX_MB={} is not a number of megabytes; using 4096", m);
  }
  return uint64_t{4096} << 20;
}

bool CompileCache::fetch(const std::string& kind, const std::string& key, const Files& to) const {
  if (!enabled()) return false;
  fs::path dir = entry_dir(root_, kind, key);
  std::error_code ec;
  for (const auto& [name, dest] : to)
    if (!fs::is_regular_file(dir / name, ec)) return false;
  for (const auto& [name, dest] : to) {
    std::string tmp = dest + ".tmp" + unique_suffix();
    fs::copy_file(dir / name, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, dest, ec);
    if (ec) {
      fs::remove(tmp, ec);
      spdlog::warn("compile cache: cannot copy {} to {}; compiling instead", (dir / name).string(), dest);
      return false;
    }
  }
  fs::last_write_time(dir, fs::file_time_type::clock::now(), ec);  // recently used: trimmed last
  return true;
}

bool CompileCache::read(const std::string& kind, const std::string& key, const std::string& name, std::string& text) const {
  if (!enabled()) return false;
  std::ifstream f(entry_dir(root_, kind, key) / name, std::ios::binary);
  if (!f) return false;
  text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !f.bad();
}

void CompileCache::store(const std::string& kind, const std::string& key, const Files& from, const Files& texts) const {
  if (!enabled()) return;
  fs::path dir = entry_dir(root_, kind, key);
  std::error_code ec;
  if (fs::exists(dir, ec)) return;
  fs::path tmp = fs::path(root_) / "tmp" / unique_suffix();
  fs::create_directories(tmp, ec);
  for (const auto& [name, src] : from)
    if (!ec) fs::copy_file(src, tmp / name, ec);
  for (const auto& [name, text] : texts) {
    if (ec) break;
    std::ofstream f(tmp / name, std::ios::binary);
    f << text;
    if (!f) ec = std::make_error_code(std::errc::io_error);
  }
  if (!ec) fs::create_directories(dir.parent_path(), ec);
  if (!ec) fs::rename(tmp, dir, ec);  // fails harmlessly when another compile stored it first
  std::error_code ignored;
  if (ec && !fs::exists(dir, ignored)) spdlog::warn("compile cache: cannot store an entry in {}: {}", root_, ec.message());
  fs::remove_all(tmp, ignored);
}

void CompileCache::trim(uint64_t max) const {
  if (!enabled()) return;
  struct Entry {
    fs::file_time_type used;
    uint64_t bytes;
    fs::path dir;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (const char* kind : {"models", "objects"}) {
    fs::path k = fs::path(root_) / kind;
    if (!fs::is_directory(k, ec)) continue;
    for (const auto& shard : fs::directory_iterator(k, ec))
      for (const auto& e : fs::directory_iterator(shard.path(), ec)) {
        uint64_t bytes = 0;
        for (const auto& f : fs::directory_iterator(e.path(), ec)) bytes += f.is_regular_file(ec) ? f.file_size(ec) : 0;
        entries.push_back({fs::last_write_time(e.path(), ec), bytes, e.path()});
        total += bytes;
      }
  }
  // Leftovers of compiles that died while storing (tmp/<pid>-...), once they are an hour old.
  if (fs::is_directory(fs::path(root_) / "tmp", ec))
    for (const auto& t : fs::directory_iterator(fs::path(root_) / "tmp", ec))
      if (fs::file_time_type::clock::now() - t.last_write_time(ec) > std::chrono::hours(1)) fs::remove_all(t.path(), ec);
  if (total <= max) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const auto& e : entries) {
    if (total <= max) break;
    // Renamed away first, so that an interrupted removal never leaves half an entry in place.
    fs::path doomed = fs::path(root_) / "tmp" / ("evict-" + unique_suffix());
    fs::create_directories(doomed.parent_path(), ec);
    fs::rename(e.dir, doomed, ec);
    if (ec) continue;  // another process's entry, or just evicted by one
    fs::remove_all(doomed, ec);
    total -= e.bytes;
    spdlog::debug("compile cache: evicted {}", e.dir.string());
  }
}

const std::string& ptc_identity() {
  // The binary's path, size, inode and modification time stand for its bytes (hashing 70 MB on
  // every compile would cost more than a cache hit should): rebuilding or reinstalling ptc
  // changes them.
  static const std::string id = []() -> std::string {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    struct stat st {};
    if (ec || ::stat(exe.c_str(), &st) != 0) return {};  // unknown: the cache stays off
    std::string s = "ptc " PTC_VERSION "|" + exe.string() + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_ino) +
                    "|" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    return Sha256().update(s).hex();
  }();
  return id;
}

const std::string& tool_identity(const std::string& command) {
  static std::mutex mu;
  static std::map<std::string, std::string> ids;
  std::lock_guard<std::mutex> lock(mu);
  auto it = ids.find(command);
  if (it != ids.end()) return it->second;
  std::string out;
  run_command(command + " --version", out);
  return ids.emplace(command, command + "\n" + out).first->second;
}

const std::string& host_cpu_identity() {
  static const std::string id = [] {
    std::ifstream f("/proc/cpuinfo");
    // x86: "model name" and "flags"; AArch64: "Features", "CPU implementer", "CPU part" (the
    // first processor's lines: the machine's -march=native).
    std::string line, id;
    std::set<std::string> seen;
    while (std::getline(f, line)) {
      const std::string key = line.substr(0, line.find(':'));
      for (const char* want : {"model name", "flags", "Features", "CPU implementer", "CPU part"})
        if (key.rfind(want, 0) == 0 && seen.insert(want).second) id += line + "\n";
    }
    return id;
  }();
  return id;
}

}  // namespace ptc
