// ptc_arena.h — the workspace planner, shared by ptc (for reports) and generated libraries (at
// run time, once the symbolic sizes are known). C++17, no dependencies.
//
// Buffers with disjoint lifetimes (in kernel steps) share memory. Greedy: largest first, each at
// the lowest 64-byte-aligned offset that does not overlap a placed buffer alive at the same time.
#pragma once

#include <algorithm>
#include <cstddef>
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

}  // namespace ptc_rt
