// Code generation: loop IR -> C++ source of a standalone library with the C ABI of
// include/ptc/runtime.h. Printers only: no I/O, no compiler runs (lib/build does those).
#pragma once

#include <string>
#include <vector>

#include "ptc/graph.h"
#include "ptc/loop.h"
#include "ptc/schedule.h"

namespace ptc {

// Where each weight storage lives in the weights blob.
struct WeightLayout {
  struct Entry {
    std::string name;     // state-dict name (Graph::weights key)
    size_t offset = 0;    // byte offset in the blob (64-byte aligned)
    size_t bytes = 0;
  };
  std::vector<Entry> entries;
  size_t total_bytes = 0;
  const Entry* find(const std::string& name) const;
};
// Lays out the weights a program reads (storages shared by several names are stored once).
WeightLayout layout_weights(const loop::Program& p, const Graph& g);

struct CpuSource {
  std::string model_cpp;  // kernels + wrapper; includes ptc_support.h, ptc_gemm.h, runtime.h
};
CpuSource generate_cpu(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights);

// C++ text of an integer index expression (int64_t arithmetic; Python floor semantics where a
// dividend may be negative).
std::string cpp_index(const sym::Expr& e);

}  // namespace ptc
