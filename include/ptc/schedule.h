// The scheduler: groups loop-IR computations into kernels.
//
//   * Row groups: a reduction and the computations after it that share its outer (kept) domain
//     and read each other's results only within the same outer index run as one kernel — one
//     parallel loop over the outer index, the stages in order inside it (layer norm's mean,
//     variance and normalize; softmax's max, sum and divide each become one kernel).
//   * GEMM epilogues: a pointwise computation over a GEMM's result domain that reads the GEMM
//     result only at its own element (bias, activation, residual) runs inside the GEMM's
//     epilogue on each tile while it is in cache, writing the final buffer directly.
//   * Everything else is one kernel per computation.
// Only consecutive computations are grouped, so program order (and with it every dependence)
// is kept. Memory planning is separate (plan_memory).
#pragma once

#include <string>
#include <vector>

#include "ptc/loop.h"

namespace ptc::sched {

struct Kernel {
  enum class Kind : uint8_t { Loop, RowGroup, Gemm, Conv };
  Kind kind = Kind::Loop;
  std::vector<int> comps;          // indices into Program::comps, in execution order
  std::vector<sym::Expr> outer;    // RowGroup: the shared outer domain
  int epilogue = -1;               // Gemm: index of the fused pointwise computation, or -1
  std::string name;                // "k3"
  std::vector<std::string> origins;  // graph nodes whose work the kernel does (deduplicated)
};

struct Schedule {
  std::vector<Kernel> kernels;
  // Buffers no kernel writes any more (a GEMM result consumed by its fused epilogue).
  std::vector<bool> elided;
};

Schedule schedule(const loop::Program& p);
std::string print_schedule(const loop::Program& p, const Schedule& s);

// Liveness of the temporaries over the kernel sequence, for the arena planner: buffer id,
// first kernel writing it, last kernel reading it.
struct Lifetime {
  int buffer;
  int first, last;
};
std::vector<Lifetime> temp_lifetimes(const loop::Program& p, const Schedule& s);

}  // namespace ptc::sched
