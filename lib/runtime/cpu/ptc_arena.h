// ptc_arena.h — the workspace planner, shared by ptc (for reports) and generated libraries (at
// run time, once the symbolic sizes are known). C++17, no dependencies.
//
// Buffers with disjoint lifetimes (in kernel steps) share memory. Greedy: largest first, each at
// the lowest 64-byte-aligned offset that does not overlap a placed buffer alive at the same time.
// WorkspacePool keeps a model instance's arenas between runs.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace ptc_rt {

inline size_t plan_arena(int n, const size_t* bytes, const int* first, const int* last, size_t* offset) {
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
  std::vector<int> placed;
  size_t total = 0;
  for (int i : order) {
    size_t need = (bytes[i] + 63) / 64 * 64;
    std::vector<std::pair<size_t, size_t>> busy;  // [start, end) of live overlapping buffers
    for (int j : placed)
      if (!(last[j] < first[i] || last[i] < first[j])) busy.emplace_back(offset[j], offset[j] + (bytes[j] + 63) / 64 * 64);
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [s, e] : busy) {
      if (at + need <= s) break;
      at = std::max(at, e);
    }
    offset[i] = at;
    total = std::max(total, at + need);
    placed.push_back(i);
  }
  return total;
}

// Arenas kept between runs of one model instance, so that a run does not map (and the kernel
// zero) fresh pages for its temporaries each time: a large allocation is an mmap, and touching
// its pages costs more than many kernels. Concurrent runs each take their own arena. A run takes
// the smallest free arena that fits; when none fits it frees the largest free one (outgrown) and
// allocates. At most kKeep free arenas are kept.
class WorkspacePool {
 public:
  struct Block {
    unsigned char* p = nullptr;
    size_t bytes = 0;
  };
  WorkspacePool() = default;
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;
  ~WorkspacePool() {
    for (const Block& b : free_) std::free(b.p);
  }
  // A 64-byte aligned arena of at least `bytes` (p == nullptr: out of memory; bytes == 0: none).
  Block acquire(size_t bytes) {
    if (bytes == 0) return {};
    Block outgrown;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      int best = -1;
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].bytes >= bytes && (best < 0 || free_[i].bytes < free_[static_cast<size_t>(best)].bytes))
          best = static_cast<int>(i);
      if (best >= 0) {
        const Block b = free_[static_cast<size_t>(best)];
        free_.erase(free_.begin() + best);
        return b;
      }
      if (!free_.empty()) {
        auto it = std::max_element(free_.begin(), free_.end(),
                                   [](const Block& a, const Block& b) { return a.bytes < b.bytes; });
        outgrown = *it;
        free_.erase(it);
      }
    }
    std::free(outgrown.p);
    return allocate(bytes);
  }
  // Large arenas are 2 MiB aligned and asked to be backed by transparent huge pages (with the
  // usual THP setting "madvise" they are not otherwise): batched CNN activations stream tens of
  // megabytes per kernel, and 4 KiB pages cost a TLB miss every 4 KiB of that.
  static Block allocate(size_t bytes) {
    constexpr size_t kHuge = size_t{2} << 20;
    if (bytes >= 2 * kHuge) {
      const size_t n = (bytes + kHuge - 1) / kHuge * kHuge;
      void* p = std::aligned_alloc(kHuge, n);
      if (p) madvise(p, n, MADV_HUGEPAGE);  // advice only: failure changes nothing
      return {static_cast<unsigned char*>(p), n};
    }
    const size_t n = (bytes + 63) / 64 * 64;
    return {static_cast<unsigned char*>(std::aligned_alloc(64, n)), n};
  }
  void release(Block b) {
    if (!b.p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(b);
    if (free_.size() > kKeep) {
      auto it = std::min_element(free_.begin(), free_.end(),
                                 [](const Block& x, const Block& y) { return x.bytes < y.bytes; });
      std::free(it->p);
      free_.erase(it);
    }
  }

 private:
  static constexpr size_t kKeep = 4;
  std::mutex mutex_;
  std::vector<Block> free_;
};

}  // namespace ptc_rt
