// CUDA kernel printer: each scheduled kernel becomes a __global__ function (or a library call)
// plus a host launcher `const char* ptc_launch_<k>(const int64_t* sym, void* const* buf,
// cudaStream_t, const ptc_cuda::Ctx&)` returning an error text or nullptr.
//
//   * pointwise kernels: a grid-stride loop over the flattened domain, one element per thread
//     and iteration, every member computed for it;
//   * row groups: one block per outer index (grid-stride over rows); reductions are block
//     reductions (warp shuffles, then one value per warp in shared memory), pointwise members
//     loop over their inner elements with the block's threads, __syncthreads() between members;
//     rows whose reductions are small constant windows (pooling) take one thread per row instead;
//   * GEMM: cuBLASLt (ptc_cuda_rt.h); float32 convolutions and their gradients: cuDNN (the
//     runtime's direct kernel for a forward convolution whose weight is no contiguous view);
//     attention: the runtime's fused flash-style kernel.
#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "../expr_printer.h"
#include "../wrapper/abi_common.h"
#include "cuda_internal.h"
#include "ptc/codegen.h"
#include "ptc/graph.h"
#include "ptc/error.h"

namespace ptc::cuda {

using codegen::ctype;
using codegen::Dialect;
using codegen::ExprPrinter;
using codegen::literal;
using loop::Computation;
using loop::ExprRef;
using loop::Op;

namespace {

constexpr int kBlock = 256;
constexpr int64_t kSmallWindow = 64;
constexpr int64_t kFewRows = 264;  // two blocks per multiprocessor of an H100 / H200

bool read_only(const loop::Program& p, int b) {
  auto k = p.buffers[b].kind;
  return k == loop::Buffer::Kind::Input || k == loop::Buffer::Kind::Weight;
}

std::string ptr_type(const loop::Program& p, int b) {
  return std::string(read_only(p, b) ? "const " : "") + ctype(p.buffers[b].dtype) + "*";
}

// Declares n<from>..: the sizes, and returns their names.
std::vector<std::string> sizes(std::ostream& os, const std::vector<sym::Expr>& dims, const std::string& prefix, const std::string& in) {
  std::vector<std::string> n;
  for (size_t d = 0; d < dims.size(); ++d) {
    n.push_back(prefix + "n" + std::to_string(d));
    os << in << "const int64_t " << n.back() << " = " << cpp_index(dims[d]) << ";\n";
  }
  return n;
}

// Whether every index below the product of `dims` fits 32 bits unsigned for all symbol values
// in range: then a flat index is split with 32-bit divisions (a 64-bit one is a long
// instruction sequence, per element and dimension); the variables stay int64_t.
bool index_fits_32(const std::vector<sym::Expr>& dims) {
  sym::Expr total(1);
  for (const auto& d : dims) total = total * d;
  const sym::Range r = sym::bounds(total);
  return r.bounded_above() && r.hi <= int64_t{0xffffffff};
}

// Declares the variables <var><first>.. of a row-major index `flat` over sizes `n` (`narrow`:
// flat and the sizes fit uint32_t). `folds` (folded_dims, empty for none): a folded dimension's
// variable is 0 and its range joins the next dimension's, so splitting costs one division less.
void decompose_into(std::ostream& os, const std::string& flat, const std::vector<std::string>& n, char var, size_t first,
                    const std::string& in, bool narrow = false, const std::vector<bool>& folds = {}) {
  if (n.empty()) return;
  auto folded = [&](size_t d) { return d + 1 < n.size() && d < folds.size() && folds[d]; };
  std::vector<std::string> group_size;
  std::vector<size_t> group_last;  // the dimension each merged size stands for (its group's last)
  std::string group;
  for (size_t d = 0; d < n.size(); ++d) {
    group = group.empty() ? n[d] : "(" + group + " * " + n[d] + ")";
    if (folded(d)) continue;
    group_size.push_back(group);
    group_last.push_back(d);
    group.clear();
  }
  const std::string T = narrow ? "uint32_t" : "int64_t";
  auto as_t = [&](const std::string& v) { return narrow ? "static_cast<uint32_t>(" + v + ")" : v; };
  const std::string rest = "rest_" + std::string(1, var) + std::to_string(first);
  os << in << T << " " << rest << " = " << as_t(flat) << ";\n";
  for (size_t g = group_size.size(); g-- > 0;) {
    const std::string v = std::string(1, var) + std::to_string(first + group_last[g]);
    if (g == 0)
      os << in << "const int64_t " << v << " = " << rest << ";\n";
    else
      os << in << "const int64_t " << v << " = " << rest << " % " << as_t(group_size[g]) << "; " << rest << " /= " << as_t(group_size[g]) << ";\n";
  }
  for (size_t d = 0; d < n.size(); ++d)
    if (folded(d)) os << in << "const int64_t " << var << first + d << " = 0; (void)" << var << first + d << ";\n";
  os << in << "(void)" << rest << ";\n";
}

struct ReduceSpec {
  std::string init, combine;  // combine(a, b) as a lambda body over a, b
};

DType acc_type(const Computation& c) {
  if (c.reduce == loop::ReduceOp::Any || c.reduce == loop::ReduceOp::All) return DType::Int32;  // shuffles take no bool
  return dtype_compute(c.body->dtype);  // float16 / bfloat16 accumulate in float32
}

ReduceSpec reduce_spec(const Computation& c, DType acc_t) {
  std::string T = ctype(acc_t);
  switch (c.reduce) {
    case loop::ReduceOp::Sum: return {literal(0, acc_t), "return a + b;"};
    case loop::ReduceOp::Prod: return {literal(1, acc_t), "return a * b;"};
    case loop::ReduceOp::Max:
      return {dtype_is_float(acc_t) ? literal(-INFINITY, acc_t) : "std::numeric_limits<" + T + ">::lowest()",
              "return ptc_rt::maxnan(a, b);"};
    case loop::ReduceOp::Min:
      return {dtype_is_float(acc_t) ? literal(INFINITY, acc_t) : "std::numeric_limits<" + T + ">::max()", "return ptc_rt::minnan(a, b);"};
    case loop::ReduceOp::Any: return {literal(0, acc_t), "return a || b;"};
    case loop::ReduceOp::All: return {literal(1, acc_t), "return a && b;"};
    default: user_error("the CUDA backend does not support ", loop::reduce_name(c.reduce), " reductions yet (", c.origin, ")");
  }
}

bool small_window_group(const loop::Program& p, const sched::Kernel& k) {
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    if (!(c.domain == k.outer)) return false;
    if (c.kind != Computation::Kind::Reduction) continue;
    int64_t w = 1;
    for (const auto& r : c.reduce_domain) {
      auto v = r.as_const();
      if (!v) return false;
      w *= *v;
    }
    if (w > kSmallWindow) return false;
  }
  return true;
}

// A serial reduction of `c` into local `acc` (one thread), then stores it at `at`.
void serial_reduction(std::ostream& os, const Computation& c, int id, const std::string& at, const std::string& in) {
  DType acc_t = acc_type(c);
  ReduceSpec rs = reduce_spec(c, acc_t);
  std::string T = ctype(acc_t);
  os << in << "{\n";
  std::string in2 = in + "  ";
  os << in2 << "auto combine = [](" << T << " a, " << T << " b) { " << rs.combine << " };\n";
  os << in2 << T << " acc = " << rs.init << ";\n";
  std::vector<std::string> m = sizes(os, c.reduce_domain, "c" + std::to_string(id) + "_r", in2);
  std::string rin = in2;
  for (size_t d = 0; d < m.size(); ++d) {
    os << rin << "for (int64_t r" << d << " = 0; r" << d << " < " << m[d] << "; ++r" << d << ") {\n";
    rin += "  ";
  }
  ExprPrinter pr(os, rin, Dialect::Cuda);
  std::string v = pr.print(c.body);
  os << rin << "acc = combine(acc, " << v << ");\n";
  for (size_t d = 0; d < m.size(); ++d) {
    rin.resize(rin.size() - 2);
    os << rin << "}\n";
  }
  os << in2 << at << " = acc;\n" << in << "}\n";
}

void emit_params(std::ostream& os, const loop::Program& p, const std::vector<int>& bufs, const std::vector<std::string>& syms) {
  bool first = true;
  for (const auto& s : syms) {
    os << (first ? "" : ", ") << "int64_t " << s;
    first = false;
  }
  // __restrict__ only on what no kernel writes: temporaries may share storage (in-place reuse).
  for (int b : bufs) {
    os << (first ? "" : ", ") << ptr_type(p, b) << (read_only(p, b) ? " __restrict__" : "") << " b" << b;
    first = false;
  }
}

std::string call_args(const loop::Program& p, const std::vector<int>& bufs, const std::vector<std::string>& syms) {
  std::string s;
  for (size_t i = 0; i < syms.size(); ++i) s += (s.empty() ? "" : ", ") + std::string("sym[") + std::to_string(i) + "]";
  for (int b : bufs) s += (s.empty() ? "" : ", ") + std::string("static_cast<") + ptr_type(p, b) + ">(buf[" + std::to_string(b) + "])";
  return s;
}

void emit_sym_locals(std::ostream& os, const std::vector<std::string>& syms, const std::string& in) {
  for (size_t i = 0; i < syms.size(); ++i) os << in << "const int64_t " << syms[i] << " = sym[" << i << "]; (void)" << syms[i] << ";\n";
}

// The index expressions (loads, index values) of the kernel's computations.
void index_exprs(const ExprRef& e, std::vector<sym::Expr>& out, std::set<const loop::Expr*>& seen) {
  if (!e || !seen.insert(e.get()).second) return;
  if (e->op == Op::Load || e->op == Op::LoadAt || e->op == Op::IndexVal) out.push_back(e->index);
  for (const auto& a : e->args) index_exprs(a, out, seen);
}

// Which loop variables fold into the next one (folds[d]: x_d = 0 and x_{d+1} runs over
// n_d * n_{d+1}): where every index expression is affine in x_d and x_{d+1} with x_d's coefficient
// n_{d+1} times x_{d+1}'s, f(x_d, x_{d+1}) = f(0, x_d n_{d+1} + x_{d+1}). A folded dimension costs
// no division when the flat index is split: a division by a size symbol is a long instruction
// sequence per element (GPT-2's [batch, seq, vocab] logits read from a padded GEMM result).
std::vector<bool> folded_dims(const loop::Program& p, const sched::Kernel& k, const std::vector<sym::Expr>& dom) {
  std::vector<bool> folds(dom.size(), false);
  std::vector<sym::Expr> idx;
  std::set<const loop::Expr*> seen;
  for (int ci : k.comps) {
    if (p.comps[ci].kind != Computation::Kind::Pointwise || !(p.comps[ci].domain == dom)) return folds;
    index_exprs(p.comps[ci].body, idx, seen);
  }
  auto linear_coeff = [](const sym::Expr& e, const sym::Expr& x, sym::Expr* c) {
    const sym::Expr e0 = sym::substitute(e, {{x, sym::Expr(0)}});
    *c = sym::substitute(e, {{x, sym::Expr(1)}}) - e0;
    return e - e0 == *c * x && sym::substitute(*c, {{x, sym::Expr(0)}}) == *c;
  };
  for (size_t d = 0; d + 1 < dom.size(); ++d) {
    const sym::Expr xd = loop::loop_var(static_cast<int>(d), dom[d]), xn = loop::loop_var(static_cast<int>(d + 1), dom[d + 1]);
    bool ok = true;
    for (const auto& e : idx) {
      sym::Expr cd, cn;
      try {
        ok = linear_coeff(e, xd, &cd) && linear_coeff(e, xn, &cn) && cd == cn * dom[d + 1];
      } catch (const std::exception&) {
        ok = false;
      }
      if (!ok) break;
    }
    folds[d] = ok;
  }
  return folds;
}

// Vectorization of a pointwise kernel: each thread takes 4 consecutive elements along the last
// dimension. A float32 / float16 / bfloat16 load whose index advances by one with the last loop
// variable from a multiple of 4 there (and which no `where` branch guards) becomes one 16-byte
// (float32) or 8-byte (half) load, each such result one store (ptc_cuda::load4 / store4); the rest
// runs per lane. The launcher takes this version when every pointer it vectorizes is aligned to 4
// elements. A last dimension that is not a multiple of 4 ("ragged": GPT-2's 50257 logits read
// from a GEMM result padded to 50264 columns) is split into chunks of 4 per row: full chunks read
// 4 at a time and store per lane (the output rows are not aligned), the row's last chunk runs
// per lane with a bound check. Only rows of kMinRagged elements or more, and only where some load
// is read 4 at a time.
constexpr int kVec = 4;
constexpr int64_t kMinRagged = 64;

// A `where` condition a load sits under: the load runs where `cond` is `taken`.
struct Guard {
  ExprRef cond;
  bool taken;
};

struct VecPlan {
  std::set<const loop::Expr*> loads;  // the loads read 4 at a time
  // Of those, the ones under `where` branches whose conditions do not depend on the last loop
  // variable (the same for the 4 lanes: a depthwise convolution's padding test over NHWC), with
  // those conditions: read 4 at a time where the conditions hold, zeros elsewhere (unread).
  std::map<const loop::Expr*, std::vector<Guard>> guarded;
  std::set<int> buffers;  // buffers read or written 4 at a time
  bool ragged = false;    // the last dimension is not a multiple of 4
  int rows = 1;           // consecutive values of the next-to-last loop variable per thread (plan_rows)
};

bool vectorizable(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

// The loads of `e` outside `where` branches (which guard what they read).
void unguarded_loads(const ExprRef& e, std::vector<const loop::Expr*>& out, std::set<const loop::Expr*>& seen) {
  if (!seen.insert(e.get()).second) return;
  if (e->op == Op::Load) out.push_back(e.get());
  if (e->op == Op::Where) {
    unguarded_loads(e->args[0], out, seen);
    return;
  }
  for (const auto& a : e->args) unguarded_loads(a, out, seen);
}

// Whether `e` reads or indexes anything that depends on loop variable `x`.
bool depends_on(const ExprRef& e, const sym::Expr& x) {
  std::vector<sym::Expr> idx;
  std::set<const loop::Expr*> seen;
  index_exprs(e, idx, seen);
  for (const auto& i : idx)
    if (!(sym::substitute(i, {{x, sym::Expr(0)}}) == i)) return true;
  return false;
}

// The loads of `e` under `where` branches with the conditions above them, where every one of those
// conditions is independent of `x` (`uniform`: so far); loads reached under other conditions too,
// or under a condition that depends on x, map to nullopt. `seen`: the (node, conditions) pairs
// walked already (expressions share subexpressions).
using GuardedLoads = std::map<const loop::Expr*, std::optional<std::vector<Guard>>>;
using GuardKey = std::pair<const loop::Expr*, std::vector<std::pair<const loop::Expr*, bool>>>;
void uniformly_guarded_loads(const ExprRef& e, std::vector<Guard>& guards, bool uniform, const sym::Expr& x, GuardedLoads& out,
                             std::set<GuardKey>& seen) {
  GuardKey key{e.get(), {}};
  for (const Guard& g : guards) key.second.emplace_back(g.cond.get(), g.taken);
  if (!seen.insert(std::move(key)).second) return;
  if (e->op == Op::Load && !guards.empty()) {
    auto it = out.find(e.get());
    if (!uniform) {
      out[e.get()].reset();
    } else if (it == out.end()) {
      out.emplace(e.get(), guards);
    } else if (it->second) {
      bool same = it->second->size() == guards.size();
      for (size_t i = 0; same && i < guards.size(); ++i)
        same = (*it->second)[i].cond.get() == guards[i].cond.get() && (*it->second)[i].taken == guards[i].taken;
      if (!same) it->second.reset();
    }
  }
  if (e->op == Op::Where) {
    uniformly_guarded_loads(e->args[0], guards, uniform, x, out, seen);
    const bool below = uniform && !depends_on(e->args[0], x);
    for (size_t branch = 1; branch <= 2; ++branch) {
      guards.push_back({e->args[0], branch == 1});
      uniformly_guarded_loads(e->args[branch], guards, below, x, out, seen);
      guards.pop_back();
    }
    return;
  }
  for (const auto& a : e->args) uniformly_guarded_loads(a, guards, uniform, x, out, seen);
}

// Whether every index `index` of buffer `b` takes, over the ranges of the loop variables, lies
// between the buffer's first and last element (its view's, for a strided weight or input): such
// a load may be read whatever `where` condition it sits under (a depthwise convolution's weight
// under its tap's padding test).
bool always_in_bounds(const loop::Program& p, int b, const sym::Expr& index) {
  const loop::Buffer& buf = p.buffers[b];
  sym::Expr first = buf.offset, last = buf.offset, stride(1);
  for (size_t d = buf.sizes.size(); d-- > 0;) {
    const sym::Expr st = buf.strides.empty() ? stride : buf.strides[d];
    stride = stride * buf.sizes[d];
    try {
      if (!sym::prove_ge(st, sym::Expr(0)) || !sym::prove_ge(buf.sizes[d], sym::Expr(1))) return false;
    } catch (const std::exception&) {
      return false;
    }
    last = last + (buf.sizes[d] - sym::Expr(1)) * st;
  }
  try {
    return sym::prove_ge(index, first) && sym::prove_le(index, last);
  } catch (const std::exception&) {
    return false;
  }
}

std::optional<VecPlan> plan_vec4(const loop::Program& p, const sched::Kernel& k) {
  if (k.kind != sched::Kernel::Kind::Loop) return std::nullopt;
  const std::vector<sym::Expr>& dom = p.comps[k.comps.front()].domain;
  if (dom.empty()) return std::nullopt;
  const auto inner = dom.back().as_const();
  if (!inner || (*inner % kVec != 0 && *inner < kMinRagged)) return std::nullopt;
  const sym::Expr xl = loop::loop_var(static_cast<int>(dom.size()) - 1, dom.back());
  VecPlan v;
  v.ragged = *inner % kVec != 0;
  std::set<const loop::Expr*> seen;
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    if (c.kind != Computation::Kind::Pointwise || !(c.domain == dom)) return std::nullopt;
    if (vectorizable(p.buffers[c.out].dtype) && !v.ragged) v.buffers.insert(c.out);
    std::vector<const loop::Expr*> loads;
    unguarded_loads(c.body, loads, seen);
    const std::set<const loop::Expr*> unguarded(loads.begin(), loads.end());
    GuardedLoads guarded;
    std::vector<Guard> guards;
    std::set<GuardKey> walked;
    uniformly_guarded_loads(c.body, guards, true, xl, guarded, walked);
    for (const auto& [l, gs] : guarded)
      if (gs && !unguarded.count(l)) {
        v.guarded[l] = *gs;
        loads.push_back(l);
      }
    for (const loop::Expr* l : loads) {
      if (!vectorizable(l->dtype) || p.buffers[l->buffer].dtype != l->dtype) {
        v.guarded.erase(l);
        continue;
      }
      const sym::Expr at0 = sym::substitute(l->index, {{xl, sym::Expr(0)}});
      bool aligned = false;  // lane 0 provably 16-byte aligned
      try {
        aligned = sym::mod(at0, sym::Expr(kVec)) == sym::Expr(0);
      } catch (const std::exception&) {
      }
      if (!(l->index - at0 == xl) || !aligned) {  // not unit stride along the last dimension, or unaligned
        v.guarded.erase(l);
        continue;
      }
      v.loads.insert(l);
      v.buffers.insert(l->buffer);
      if (v.guarded.count(l) && always_in_bounds(p, l->buffer, l->index)) v.guarded.erase(l);
    }
  }
  if (v.buffers.empty() || (v.ragged && v.loads.empty())) return std::nullopt;
  return v;
}

// The vector loads of `c`'s body (VecPlan::loads) in first-seen order.
std::vector<const loop::Expr*> planned_loads(const ExprRef& body, const VecPlan& v) {
  std::vector<const loop::Expr*> out;
  std::set<const loop::Expr*> seen;
  std::function<void(const ExprRef&)> walk = [&](const ExprRef& e) {
    if (!seen.insert(e.get()).second) return;
    if (v.loads.count(e.get())) out.push_back(e.get());
    for (const auto& a : e->args) walk(a);
  };
  walk(body);
  return out;
}

// `c`'s body for row r of a thread's tile of `rows`: the next-to-last loop variable x_d replaced by
// the tile's first row plus r, a variable of the same name whose range is the first rows' (0 to
// n_d - rows), so padding tests that hold for every tile fold away. `memo` maps the original
// nodes to theirs. Untiled (rows 1): the body itself, an empty memo.
ExprRef row_body(const Computation& c, int r, int rows, std::map<const loop::Expr*, ExprRef>& memo) {
  if (rows == 1) return c.body;
  const size_t d = c.domain.size() - 2;
  const sym::Expr xd = loop::loop_var(static_cast<int>(d), c.domain[d]);
  const sym::Expr first = sym::symbol(xd.name(), {0, *c.domain[d].as_const() - rows});
  return loop::substitute(c.body, {{xd, first + sym::Expr(r)}}, &memo);
}

const loop::Expr* in_row(const loop::Expr* e, const std::map<const loop::Expr*, ExprRef>& memo) {
  auto it = memo.find(e);
  return it == memo.end() ? e : it->second.get();
}

ExprRef in_row(const ExprRef& e, const std::map<const loop::Expr*, ExprRef>& memo) {
  auto it = memo.find(e.get());
  return it == memo.end() ? e : it->second;
}

// Whether comparison `e` of two index values holds for every value of its variables in range.
bool always_true(const ExprRef& e) { return loop::decided_comparison(e) == std::optional<bool>(true); }

// A condition a vector load is read under: `cond`, or its negation.
struct Condition {
  std::string key;  // the printed condition (rows build equal conditions as distinct nodes)
  ExprRef cond;
  bool negate = false;
};

// The conditions a vector load of a row is read under: the conjuncts of its `where` guards in that
// row, less those that hold everywhere (a padding test every tile passes), ordered by their keys.
std::vector<Condition> row_conditions(const loop::Program& p, const loop::Expr* l, const VecPlan& v,
                                      const std::map<const loop::Expr*, ExprRef>& memo) {
  std::vector<Condition> out;
  auto g = v.guarded.find(l);
  if (g == v.guarded.end()) return out;
  std::function<void(const ExprRef&)> conjuncts = [&](const ExprRef& e) {
    if (e->op == Op::And) {
      conjuncts(e->args[0]);
      conjuncts(e->args[1]);
    } else if (!always_true(e)) {
      out.push_back({loop::print_expr(p, e), e, false});
    }
  };
  for (const Guard& c : g->second) {
    const ExprRef cond = in_row(c.cond, memo);
    if (c.taken)
      conjuncts(cond);
    else
      out.push_back({"!" + loop::print_expr(p, cond), cond, true});
  }
  std::sort(out.begin(), out.end(), [](const Condition& a, const Condition& b) { return a.key < b.key; });
  out.erase(std::unique(out.begin(), out.end(), [](const Condition& a, const Condition& b) { return a.key == b.key; }), out.end());
  return out;
}

// What identifies a vector load in a row: its buffer, index and conditions.
std::string load_key(const loop::Program& p, const loop::Expr* l, const VecPlan& v, const std::map<const loop::Expr*, ExprRef>& memo) {
  const loop::Expr* at = in_row(l, memo);
  std::string key = std::to_string(at->buffer) + "@" + at->index.str();
  for (const Condition& c : row_conditions(p, l, v, memo)) key += " if " + c.key;
  return key;
}

// Register tiling of a stencil: each thread of the vector kernel also takes `rows` consecutive
// values of the next-to-last loop variable x_d (rows x 4 outputs) and reads each distinct 4-wide
// load once for all of them. A depthwise convolution over NHWC ([N, OH, OW, C]) is the case:
// output columns next to each other read overlapping input columns and the same weights (a 7x7
// kernel: 70 + 49 loads for 4 columns instead of 4 x 98). Taken where the loads that move with x_d
// overlap between rows (at most 75% of them distinct: a stencil, not a broadcast along x_d), all
// the tile's distinct loads are at most 60% of those of its rows apart, and at most kMaxTileLoads.
constexpr size_t kMaxTileLoads = 128;
int plan_rows(const loop::Program& p, const sched::Kernel& k, const VecPlan& v) {
  const std::vector<sym::Expr>& dom = p.comps[k.comps.front()].domain;
  if (v.ragged || dom.size() < 2 || v.loads.empty()) return 1;
  const auto nd = dom[dom.size() - 2].as_const();
  if (!nd) return 1;
  const sym::Expr xd = loop::loop_var(static_cast<int>(dom.size() - 2), dom[dom.size() - 2]);
  for (int rows : {4, 2}) {
    if (*nd % rows != 0) continue;
    std::set<std::string> all, moving;
    size_t apart = 0, moving_apart = 0;
    for (int r = 0; r < rows; ++r)
      for (int ci : k.comps) {
        const Computation& c = p.comps[ci];
        std::map<const loop::Expr*, ExprRef> memo;
        row_body(c, r, rows, memo);
        std::set<std::string> mine, mine_moving;
        for (const loop::Expr* l : planned_loads(c.body, v)) {
          const std::string key = load_key(p, l, v, memo);
          mine.insert(key);
          all.insert(key);
          if (!(sym::substitute(l->index, {{xd, sym::Expr(0)}}) == l->index)) {
            mine_moving.insert(key);
            moving.insert(key);
          }
        }
        apart += mine.size();
        moving_apart += mine_moving.size();
      }
    if (all.size() <= kMaxTileLoads && all.size() * 10 <= apart * 6 && moving.size() * 4 <= moving_apart * 3) return rows;
  }
  return 1;
}

// Declares the float4 of vector load `l` in a row (`memo`: the row's nodes; empty untiled) unless
// `loaded` has its key already, and returns its name: one 4-wide load, under the conditions it
// sits under (row_conditions; printed by `gp`), zeros where they fail.
std::string read_vector_load(std::ostream& os, const loop::Program& p, const loop::Expr* l, const VecPlan& v,
                             const std::map<const loop::Expr*, ExprRef>& memo, ExprPrinter& gp,
                             std::map<std::string, std::string>& loaded, size_t& next_load, const std::string& in) {
  const std::string key = load_key(p, l, v, memo);
  auto it = loaded.find(key);
  if (it != loaded.end()) return it->second;
  const loop::Expr* at = in_row(l, memo);
  std::string cond;
  for (const Condition& g : row_conditions(p, l, v, memo))
    cond += (cond.empty() ? "" : " && ") + std::string(g.negate ? "!" : "") + "(" + gp.print(g.cond) + ")";
  const std::string name = "v" + std::to_string(next_load++);
  const std::string load = "ptc_cuda::load4(b" + std::to_string(at->buffer) + " + (" + cpp_index(at->index) + "))";
  os << in << "const float4 " << name << " = " << (cond.empty() ? load : "(" + cond + ") ? " + load + " : make_float4(0.f, 0.f, 0.f, 0.f)")
     << ";\n";
  loaded.emplace(key, name);
  return name;
}

// One computation of a tiled vector kernel (VecPlan::rows > 1): rows x 4 lanes of outputs, each
// its own printer over the body with x_d advanced by its row and x_last by its lane. The printers
// advance in lockstep, node by node in the order a printer hoists them, and each 4-wide load is
// read just before its first use by any row: a depthwise convolution then accumulates all its
// outputs tap by tap, with one kernel row's inputs and weights live at a time, instead of holding
// every load of the tile (which makes ptxas spill).
void emit_tile(std::ostream& os, const loop::Program& p, const Computation& c, const VecPlan& v, const std::vector<std::string>& n,
               size_t& next_load, const std::string& in) {
  const int R = v.rows;
  const size_t last = c.domain.size() - 1;
  const sym::Expr lane_var = loop::loop_var(static_cast<int>(last), c.domain[last]);
  std::vector<std::map<const loop::Expr*, ExprRef>> row_memo(R);  // for the loads' keys and conditions
  std::vector<ExprRef> rows(R);
  for (int r = 0; r < R; ++r) rows[r] = row_body(c, r, R, row_memo[r]);
  // Units: (row, lane), each with its body (row substitution, then the lane's).
  struct Unit {
    std::map<const loop::Expr*, ExprRef> memo;  // original node -> the unit's
    std::unique_ptr<ExprPrinter> printer;
  };
  std::vector<Unit> units(static_cast<size_t>(R) * kVec);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kVec; ++j) {
      Unit& u = units[static_cast<size_t>(r) * kVec + j];
      std::map<const loop::Expr*, ExprRef> lane_memo;
      loop::substitute(rows[r], {{lane_var, lane_var + sym::Expr(j)}}, &lane_memo);
      // (row_memo holds every node of the body: substitute records the nodes it leaves alone too)
      for (const auto& [orig, mine] : row_memo[r]) {
        auto it = lane_memo.find(mine.get());
        u.memo[orig] = it == lane_memo.end() ? mine : it->second;
      }
      u.printer = std::make_unique<ExprPrinter>(os, in + "  ", Dialect::Cuda);
      u.printer->prefix("u" + std::to_string(r) + "_" + std::to_string(j) + "_");
    }
  auto unit_node = [&](const Unit& u, const ExprRef& e) {
    auto it = u.memo.find(e.get());
    return it == u.memo.end() ? e : it->second;
  };
  ExprPrinter gp(os, in + "  ", Dialect::Cuda);
  gp.prefix("g");
  std::map<std::string, std::string> loaded;  // load_key -> its float4
  std::set<const loop::Expr*> load_walked;
  // Reads the vector loads in `e`'s subtree not read yet, and binds them in every unit.
  std::function<void(const ExprRef&)> read_loads = [&](const ExprRef& e) {
    if (!load_walked.insert(e.get()).second) return;
    for (const auto& a : e->args) read_loads(a);
    if (!v.loads.count(e.get())) return;
    for (int r = 0; r < R; ++r) {
      const std::string var = read_vector_load(os, p, e.get(), v, row_memo[r], gp, loaded, next_load, in + "  ");
      for (int j = 0; j < kVec; ++j) {
        Unit& u = units[static_cast<size_t>(r) * kVec + j];
        u.printer->bind(unit_node(u, e).get(), var + "." + "xyzw"[j]);
      }
    }
  };
  // The printers' hoisting order: operands first; a `where` hoists its condition, and its
  // branches print inline in it.
  std::set<const loop::Expr*> visited;
  std::function<void(const ExprRef&)> visit = [&](const ExprRef& e) {
    if (!visited.insert(e.get()).second || e->op == Op::Const || e->op == Op::IndexVal) return;
    if (e->op == Op::Where) {
      visit(e->args[0]);
    } else {
      for (const auto& a : e->args) visit(a);
    }
    read_loads(e);
    // A node the same in several units (one that neither the row nor the lane moves) is printed
    // once, by the first of them, and named in the others.
    std::map<const loop::Expr*, std::string> printed;
    for (Unit& u : units) {
      const ExprRef mine = unit_node(u, e);
      auto it = printed.find(mine.get());
      if (it == printed.end())
        printed.emplace(mine.get(), u.printer->print(mine));
      else
        u.printer->bind(mine.get(), it->second);
    }
  };
  os << in << "{\n";
  visit(c.body);
  const bool vstore = v.buffers.count(c.out) > 0;
  for (int r = 0; r < R; ++r) {
    const std::string at = r == 0 ? std::string("i") : "i + " + std::to_string(r) + " * " + n.back();
    std::string val[kVec];
    for (int j = 0; j < kVec; ++j) {
      Unit& u = units[static_cast<size_t>(r) * kVec + j];
      val[j] = u.printer->print(unit_node(u, c.body));
    }
    if (vstore) {
      os << in << "  ptc_cuda::store4(b" << c.out << " + " << at << ", " << val[0] << ", " << val[1] << ", " << val[2] << ", " << val[3] << ");\n";
    } else {
      for (int j = 0; j < kVec; ++j) os << in << "  b" << c.out << "[" << at << " + " << j << "] = " << val[j] << ";\n";
    }
  }
  os << in << "}\n";
}

void emit_elementwise_vec4(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index,
                           const std::vector<std::string>& syms, const std::vector<int>& bufs, const VecPlan& v) {
  const std::vector<sym::Expr>& dom = p.comps[k.comps.front()].domain;
  const size_t last = dom.size() - 1;
  const std::string xl = "x" + std::to_string(last);
  os << "__global__ void __launch_bounds__(" << kBlock << ") ptc_kernel_" << index << "_v4(";
  emit_params(os, p, bufs, syms);
  os << ") {\n";
  std::vector<std::string> n = sizes(os, dom, "", "  ");
  const std::vector<bool> folds = folded_dims(p, k, dom);
  if (v.ragged) {
    // t -> (row, chunk): the rows split over the outer dimensions, the chunk picks x_last
    const std::vector<std::string> outer(n.begin(), n.end() - 1);
    os << "  const int64_t chunks = (" << n.back() << " + " << kVec - 1 << ") / " << kVec << ";\n";
    os << "  const int64_t total = " << (outer.empty() ? std::string("1") : cpp_product(outer)) << " * chunks;\n";
    os << "  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {\n";
    os << "    const int64_t row = t / chunks, " << xl << "_0 = (t - row * chunks) * " << kVec << ";\n";
    os << "    const int64_t i = row * " << n.back() << " + " << xl << "_0;\n";
    decompose_into(os, "row", outer, 'x', 0, "    ", index_fits_32(dom), folds);
    os << "    const int64_t " << xl << " = " << xl << "_0;\n";
  } else if (v.rows > 1) {
    // t -> the tile's first element: x_d runs over n_d / rows tiles, each thread's x_d = tile * rows
    const size_t d = last - 1;
    std::vector<std::string> tiles = n;
    tiles[d] = "(" + n[d] + " / " + std::to_string(v.rows) + ")";
    os << "  const int64_t total = " << cpp_product(tiles) << " / " << kVec << ";\n";
    os << "  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {\n";
    os << "    const int64_t i_t = t * " << kVec << ";\n";
    decompose_into(os, "i_t", tiles, 'y', 0, "    ", index_fits_32(dom));
    std::string flat;
    for (size_t e = 0; e <= last; ++e) {
      os << "    const int64_t x" << e << " = y" << e << (e == d ? " * " + std::to_string(v.rows) : std::string()) << ";\n";
      flat = e == 0 ? "x0" : "(" + flat + ") * " + n[e] + " + x" + std::to_string(e);
    }
    os << "    const int64_t i = " << flat << ";\n";
    os << "    const int64_t " << xl << "_0 = " << xl << ";\n";
  } else {
    os << "  const int64_t total = " << cpp_product(n) << " / " << kVec << ";\n";
    os << "  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {\n";
    os << "    const int64_t i = t * " << kVec << ";\n";
    decompose_into(os, "i", n, 'x', 0, "    ", index_fits_32(dom), folds);
    os << "    const int64_t " << xl << "_0 = " << xl << ";\n";
  }
  // One chunk's computations: `vector` reads the planned loads 4 at a time (a full chunk), else
  // every lane loads on its own, and only lanes inside the row run (the row's ragged end).
  size_t next_load = 0;
  auto chunk = [&](bool vector, const std::string& in) {
    for (int ci : k.comps) {
      const Computation& c = p.comps[ci];
      if (vector && v.rows > 1) {
        emit_tile(os, p, c, v, n, next_load, in);
        continue;
      }
      std::map<const loop::Expr*, std::string> vars;  // the vector loads' float4s
      os << in << "{\n";
      if (vector) {
        // Loads under lane-independent `where` conditions read 4 at a time where the conditions
        // hold (evaluated once, at lane 0), zeros where they do not (the branch is not taken then).
        ExprPrinter gp(os, in + "  ", Dialect::Cuda);
        std::map<std::string, std::string> loaded;  // load_key -> its float4
        const std::map<const loop::Expr*, ExprRef> none;
        for (const loop::Expr* l : planned_loads(c.body, v)) vars[l] = read_vector_load(os, p, l, v, none, gp, loaded, next_load, in + "  ");
      }
      const bool vstore = vector && v.buffers.count(c.out) > 0;
      const std::string T = vstore ? "float" : ctype(p.buffers[c.out].dtype);  // a vector store rounds
      if (vstore) os << in << "  " << T << " r[" << kVec << "];\n";
      for (int j = 0; j < kVec; ++j) {
        os << in << "  " << (vector ? "" : "if (" + xl + "_0 + " + std::to_string(j) + " < " + n.back() + ") ") << "{\n";
        os << in << "    const int64_t " << xl << " = " << xl << "_0 + " << j << "; (void)" << xl << ";\n";
        ExprPrinter pr(os, in + "    ", Dialect::Cuda);
        for (const auto& [l, var] : vars) pr.bind(l, var + "." + "xyzw"[j]);
        std::string val = pr.print(c.body);
        if (vstore)
          os << in << "    r[" << j << "] = " << val << ";\n";
        else
          os << in << "    b" << c.out << "[i + " << j << "] = " << val << ";\n";
        os << in << "  }\n";
      }
      if (vstore) os << in << "  ptc_cuda::store4(b" << c.out << " + i, r[0], r[1], r[2], r[3]);\n";
      os << in << "}\n";
    }
  };
  if (v.ragged) {
    os << "    if (" << xl << "_0 + " << kVec << " <= " << n.back() << ") {\n";
    chunk(true, "      ");
    os << "    } else {\n";
    chunk(false, "      ");
    os << "    }\n";
  } else {
    chunk(true, "    ");
  }
  os << "  }\n}\n\n";
}

// A pointwise kernel, or a row group of small windows: one thread per element of the domain.
void emit_elementwise(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms,
                      const std::vector<int>& bufs) {
  const std::vector<sym::Expr>& dom = p.comps[k.comps.front()].domain;
  os << "__global__ void __launch_bounds__(" << kBlock << ") ptc_kernel_" << index << "(";
  emit_params(os, p, bufs, syms);
  os << ") {\n";
  std::vector<std::string> n = sizes(os, dom, "", "  ");
  os << "  const int64_t total = " << cpp_product(n) << ";\n";
  os << "  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {\n";
  decompose_into(os, "i", n, 'x', 0, "    ", index_fits_32(dom), folded_dims(p, k, dom));
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    std::string at = "b" + std::to_string(c.out) + "[i]";
    if (c.kind == Computation::Kind::Reduction) {
      serial_reduction(os, c, ci, at, "    ");
    } else {
      os << "    {\n";
      ExprPrinter pr(os, "      ", Dialect::Cuda);
      std::string v = pr.print(c.body);
      os << "      " << at << " = " << v << ";\n    }\n";
    }
  }
  os << "  }\n}\n\n";
  std::optional<VecPlan> vec = plan_vec4(p, k);
  if (vec) vec->rows = plan_rows(p, k, *vec);
  if (vec) emit_elementwise_vec4(os, p, k, index, syms, bufs, *vec);
  os << "const char* ptc_launch_" << index << "(const int64_t* sym, void* const* buf, cudaStream_t stream, const ptc_cuda::Ctx&) {\n";
  emit_sym_locals(os, syms, "  ");
  std::vector<std::string> hn = sizes(os, dom, "", "  ");
  os << "  const int64_t total = " << cpp_product(hn) << ";\n  if (total <= 0) return nullptr;\n";
  if (vec) {
    os << "  if (";
    bool first = true;
    for (int b : vec->buffers) {
      os << (first ? "" : " && ") << "reinterpret_cast<uintptr_t>(buf[" << b << "]) % " << kVec * dtype_size(p.buffers[b].dtype) << " == 0";
      first = false;
    }
    const std::string threads = vec->ragged ? "total / " + hn.back() + " * ((" + hn.back() + " + " + std::to_string(kVec - 1) + ") / " + std::to_string(kVec) + ")" : "total / " + std::to_string(kVec * vec->rows);
    os << ") {\n    ptc_kernel_" << index << "_v4<<<ptc_cuda::grid_for(" << threads << ", " << kBlock << "), " << kBlock << ", 0, stream>>>("
       << call_args(p, bufs, syms) << ");\n    return nullptr;\n  }\n";
  }
  os << "  ptc_kernel_" << index << "<<<ptc_cuda::grid_for(total, " << kBlock << "), " << kBlock << ", 0, stream>>>(" << call_args(p, bufs, syms)
     << ");\n  return nullptr;\n}\n\n";
}

// Rows of at most kWarpRowWidth elements, when there are at least kWarpRows of them, take one
// warp each (8 rows per block): warp shuffles and __syncwarp() instead of a block's shared-memory
// reductions and __syncthreads() (ConvNeXt's layer norms over 96 to 384 channels at every
// position: 100352 rows of 96 at batch 32).
constexpr int64_t kWarpRowWidth = 512;
constexpr int64_t kWarpRows = 4096;
constexpr int kRowsPerWarpBlock = kBlock / 32;

// A row group: one block per outer index (`warp`: one warp per outer index).
void emit_row_group_kernel(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms,
                           const std::vector<int>& bufs, int max_block, bool warp) {
  const std::vector<sym::Expr>& outer = k.outer;
  os << "__global__ void __launch_bounds__(" << (warp ? kBlock : max_block) << ") ptc_kernel_" << index << (warp ? "_w" : "") << "(";
  emit_params(os, p, bufs, syms);
  os << ") {\n";
  std::set<DType> acc_types;
  for (int ci : k.comps)
    if (p.comps[ci].kind == Computation::Kind::Reduction) acc_types.insert(acc_type(p.comps[ci]));
  if (!warp)
    for (DType t : acc_types) os << "  __shared__ " << ctype(t) << " smem_" << dtype_name(t) << "[32];\n";
  std::vector<std::string> n = sizes(os, outer, "", "  ");
  os << "  const int64_t rows = " << cpp_product(n) << ";\n";
  const std::string lane = warp ? "lane" : "threadIdx.x", step = warp ? "32" : "blockDim.x";
  if (warp) {
    os << "  const int lane = threadIdx.x & 31;\n";
    os << "  for (int64_t row = blockIdx.x * static_cast<int64_t>(" << kRowsPerWarpBlock << ") + (threadIdx.x >> 5); row < rows; row += static_cast<int64_t>(gridDim.x) * "
       << kRowsPerWarpBlock << ") {\n";
  } else {
    os << "  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {\n";
  }
  decompose_into(os, "row", n, 'x', 0, "    ", index_fits_32(outer));
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    std::string in = "      ";
    os << "    {\n";
    if (c.kind == Computation::Kind::Reduction) {
      DType acc_t = acc_type(c);
      ReduceSpec rs = reduce_spec(c, acc_t);
      std::string T = ctype(acc_t);
      os << in << "auto combine = [](" << T << " a, " << T << " b) { " << rs.combine << " };\n";
      os << in << T << " acc = " << rs.init << ";\n";
      std::vector<std::string> m = sizes(os, c.reduce_domain, "c" + std::to_string(ci) + "_r", in);
      os << in << "for (int64_t j = " << lane << "; j < " << cpp_product(m) << "; j += " << step << ") {\n";
      decompose_into(os, "j", m, 'r', 0, in + "  ", index_fits_32(c.reduce_domain));
      ExprPrinter pr(os, in + "  ", Dialect::Cuda);
      std::string v = pr.print(c.body);
      os << in << "  acc = combine(acc, " << v << ");\n" << in << "}\n";
      if (warp)
        os << in << "acc = ptc_cuda::warp_reduce(acc, combine);\n";
      else
        os << in << "acc = ptc_cuda::block_reduce(acc, combine, smem_" << dtype_name(acc_t) << ");\n";
      os << in << "if (" << lane << " == 0) b" << c.out << "[row] = acc;\n";
    } else {
      std::vector<std::string> m;
      for (size_t d = outer.size(); d < c.domain.size(); ++d) {
        m.push_back("c" + std::to_string(ci) + "_n" + std::to_string(d));
        os << in << "const int64_t " << m.back() << " = " << cpp_index(c.domain[d]) << ";\n";
      }
      os << in << "const int64_t inner = " << cpp_product(m) << ";\n";
      os << in << "for (int64_t j = " << lane << "; j < inner; j += " << step << ") {\n";
      decompose_into(os, "j", m, 'x', outer.size(), in + "  ",
                     index_fits_32(std::vector<sym::Expr>(c.domain.begin() + static_cast<std::ptrdiff_t>(outer.size()), c.domain.end())));
      ExprPrinter pr(os, in + "  ", Dialect::Cuda);
      std::string v = pr.print(c.body);
      os << in << "  b" << c.out << "[row * inner + j] = " << v << ";\n" << in << "}\n";
    }
    // the members after this one read what it stored (a global store ordered by the barrier)
    os << in << (warp ? "__syncwarp();\n" : "__syncthreads();\n") << "    }\n";
  }
  os << "  }\n}\n\n";
}

void emit_row_group(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms,
                    const std::vector<int>& bufs) {
  const std::vector<sym::Expr>& outer = k.outer;
  // Few rows (batch norm's per-channel statistics: 64 rows of N x 112 x 112) would leave most
  // multiprocessors idle and each block a long serial loop: up to 1024 threads per row there.
  sym::Expr rows_expr(1);
  for (const auto& e : outer) rows_expr = rows_expr * e;
  const auto rows_const = rows_expr.as_const();
  const int max_block = rows_const && *rows_const <= kFewRows ? 1024 : kBlock;
  // Each member's row: a reduction's window or a pointwise member's inner elements.
  std::vector<sym::Expr> widths;
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    const std::vector<sym::Expr>& dims = c.kind == Computation::Kind::Reduction ? c.reduce_domain : c.domain;
    sym::Expr w(1);
    for (size_t d = c.kind == Computation::Kind::Reduction ? 0 : outer.size(); d < dims.size(); ++d) w = w * dims[d];
    widths.push_back(w);
  }
  // The warp version, where the rows can be many and short.
  bool warp_version = !(rows_const && *rows_const < kWarpRows);
  for (const sym::Expr& w : widths)
    if (auto c = w.as_const(); c && *c > kWarpRowWidth) warp_version = false;
  emit_row_group_kernel(os, p, k, index, syms, bufs, max_block, false);
  if (warp_version) emit_row_group_kernel(os, p, k, index, syms, bufs, max_block, true);
  os << "const char* ptc_launch_" << index << "(const int64_t* sym, void* const* buf, cudaStream_t stream, const ptc_cuda::Ctx&) {\n";
  emit_sym_locals(os, syms, "  ");
  std::vector<std::string> hn = sizes(os, outer, "", "  ");
  os << "  const int64_t rows = " << cpp_product(hn) << ";\n  if (rows <= 0) return nullptr;\n";
  // Threads per row: the widest member's row (a reduction's window or a pointwise member's inner
  // elements) rounded up to a power of two, 32 to 256 (1024 for few rows) — a 64-element
  // layer-norm row gets 64.
  os << "  int64_t width = 1;\n";
  for (const sym::Expr& w : widths) os << "  width = std::max<int64_t>(width, " << cpp_index(w) << ");\n";
  if (warp_version) {
    os << "  if (width <= " << kWarpRowWidth << " && rows >= " << kWarpRows << ") {\n";
    os << "    const int64_t blocks = (rows + " << kRowsPerWarpBlock - 1 << ") / " << kRowsPerWarpBlock << ";\n";
    os << "    ptc_kernel_" << index << "_w<<<static_cast<unsigned>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20)), " << kBlock
       << ", 0, stream>>>(" << call_args(p, bufs, syms) << ");\n    return nullptr;\n  }\n";
  }
  os << "  const unsigned grid = static_cast<unsigned>(rows < (int64_t{1} << 20) ? rows : (int64_t{1} << 20));\n";
  os << "  int block = 32;\n  while (block < " << max_block << " && block < width) block *= 2;\n";
  os << "  ptc_kernel_" << index << "<<<grid, block, 0, stream>>>(" << call_args(p, bufs, syms) << ");\n  return nullptr;\n}\n\n";
}

// The element type (ptc_cuda::ElemType) of a GEMM's or convolution's buffers: float32, or
// bfloat16 / float16 where the backend computes them natively (Backend::half_native).
std::string elem_type(const loop::Program& p, const Computation& c, const char* what) {
  switch (p.buffers[c.out].dtype) {
    case DType::Float32: return "ptc_cuda::kF32";
    case DType::BFloat16: return "ptc_cuda::kBF16";
    case DType::Float16: return "ptc_cuda::kF16";
    default: user_error("the CUDA ", what, " supports float32, bfloat16 and float16 only (", c.origin, ")");
  }
}
// A pointer to element `offset` of buffer `b`, of its element type.
std::string buffer_ptr(const loop::Program& p, int b, const sym::Expr& offset, bool constant) {
  return std::string("static_cast<") + (constant ? "const " : "") + ctype(p.buffers[b].dtype) + "*>(buf[" + std::to_string(b) + "]) + " +
         cpp_index(offset);
}

// `<var>.bias`, `.residual` and `.act` of a library call's fused epilogue (ptc_cuda::Gemm,
// ptc_cuda::CudnnConv).
void emit_library_epilogue(std::ostream& os, const loop::Program& p, const std::string& var, const sched::LibraryEpilogue& m) {
  if (m.bias >= 0) os << "  " << var << ".bias = " << buffer_ptr(p, m.bias, m.bias_offset, true) << ";\n";
  if (m.residual >= 0) os << "  " << var << ".residual = " << buffer_ptr(p, m.residual, m.residual_offset, true) << ";\n";
  using Act = sched::LibraryEpilogue::Act;
  PTC_CHECK(m.act == Act::None || m.act == Act::Relu || m.act == Act::Relu6 || m.act == Act::GeluTanh,
            "a CUDA library epilogue with an activation cuBLASLt / cuDNN do not run");
  if (m.act != Act::None)
    os << "  " << var << ".act = "
       << (m.act == Act::Relu6 ? "ptc_cuda::kActRelu6" : m.act == Act::GeluTanh ? "ptc_cuda::kActGeluTanh" : "ptc_cuda::kActRelu") << ";\n";
}

void emit_gemm(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms) {
  const Computation& c = p.comps[k.comps.front()];
  const loop::View& A = c.operands[0];
  const loop::View& B = c.operands[1];
  const std::string type = elem_type(p, c, "GEMM");
  size_t r = c.domain.size();
  if (r - 2 > 6) user_error("the CUDA GEMM supports at most 6 batch dimensions (", c.origin, ")");
  os << "const char* ptc_launch_" << index << "(const int64_t* sym, void* const* buf, cudaStream_t stream, const ptc_cuda::Ctx& ctx) {\n";
  emit_sym_locals(os, syms, "  ");
  os << "  ptc_cuda::Gemm g{};\n";
  os << "  g.M = " << cpp_index(c.domain[r - 2]) << "; g.N = " << cpp_index(c.domain[r - 1]) << "; g.K = " << cpp_index(A.sizes[r - 1]) << ";\n";
  os << "  g.type = " << type << ";\n";
  os << "  g.A = " << buffer_ptr(p, A.buffer, A.offset, true) << "; g.lda_m = " << cpp_index(A.strides[r - 2])
     << "; g.lda_k = " << cpp_index(A.strides[r - 1]) << ";\n";
  os << "  g.B = " << buffer_ptr(p, B.buffer, B.offset, true) << "; g.ldb_k = " << cpp_index(B.strides[r - 2])
     << "; g.ldb_n = " << cpp_index(B.strides[r - 1]) << ";\n";
  if (k.epilogue >= 0) {  // cuBLASLt's bias / residual / ReLU (Epilogues::Library)
    const Computation& e = p.comps[k.epilogue];
    std::optional<sched::LibraryEpilogue> m = sched::match_library_epilogue(p, c, e, kCudaGemmActs);
    PTC_CHECK(m.has_value(), "a CUDA GEMM epilogue the schedule took is no library epilogue");
    os << "  g.C = " << buffer_ptr(p, e.out, 0, false) << ";\n";
    PTC_CHECK(m->act != sched::LibraryEpilogue::Act::Relu6, "cuBLASLt has no ReLU6 epilogue");
    emit_library_epilogue(os, p, "g", *m);
    if (m->widens) os << "  g.out_type = ptc_cuda::kF32;\n";  // the float32 accumulator stored as it is
  } else {
    os << "  g.C = " << buffer_ptr(p, c.out, 0, false) << ";\n";
  }
  if (c.as<loop::GemmAttrs>().of_convolution) os << "  g.conv = true;\n";
  os << "  g.nbatch = " << r - 2 << ";\n";
  for (size_t d = 0; d + 2 < r; ++d)
    os << "  g.bsize[" << d << "] = " << cpp_index(c.domain[d]) << "; g.bsa[" << d << "] = " << cpp_index(A.strides[d]) << "; g.bsb[" << d
       << "] = " << cpp_index(B.strides[d]) << ";\n";
  os << "  return ptc_cuda::gemm(ctx, g, stream);\n}\n\n";
}

// A Conv2d / CudnnConv's stride, padding, dilation and groups (the extern's attributes).
void emit_conv_params(std::ostream& os, const Computation& c) { os << " " << wrapper::conv_fields(c) << "\n"; }

// `a.<field> = <pointer>;` and its 4 strides into `a.<field>s`.
void emit_strided(std::ostream& os, const std::string& field, const std::string& pointer, const std::vector<sym::Expr>& strides) {
  os << "  a." << field << " = " << pointer << "; { const int64_t s[4] = {" << index_list(strides) << "}; for (int i = 0; i < 4; ++i) a."
     << field << "s[i] = s[i]; }\n";
}

bool cudnn_kernel(const Computation& c) {
  return c.extern_kind != loop::ExternKind::Convolution || c.operands[1].dense() || c.operands[1].channels_last();
}

// A convolution or one of its gradients through cuDNN (ptc_cuda::cudnn_conv). Gradients read
// grad_output as the view [groups, O/groups, N, OH, OW] of an NCHW tensor: its strides are NCHW
// strides again (n: 2, c: 1, h: 3, w: 4) when the groups merge with the channels.
void emit_cudnn_conv(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms) {
  const Computation& c = p.comps[k.comps.front()];
  const std::string type = elem_type(p, c, "convolution");
  const bool fwd = c.extern_kind == loop::ExternKind::Convolution, filter = c.extern_kind == loop::ExternKind::ConvWeightGrad;
  std::vector<sym::Expr> out_strides = contiguous_strides(c.domain);
  // NHWC (LowerOptions::channels_last): the output buffer is [N, OH, OW, O]; cuDNN gets it as
  // [N, O, OH, OW] with those strides.
  const bool nhwc = fwd && c.as<loop::ConvAttrs>().nhwc;
  std::vector<sym::Expr> y_logical = c.domain;
  if (nhwc) {
    out_strides = {out_strides[0], out_strides[3], out_strides[1], out_strides[2]};
    y_logical = {c.domain[0], c.domain[3], c.domain[1], c.domain[2]};
  }
  auto ptr = [&p](const loop::View& v) { return buffer_ptr(p, v.buffer, v.offset, false); };
  // With a fused epilogue (Epilogues::Library) the convolution writes the epilogue's buffer.
  const int out_buffer = k.epilogue >= 0 ? p.comps[k.epilogue].out : c.out;
  const std::string out = buffer_ptr(p, out_buffer, 0, false);
  os << "const char* ptc_launch_" << index << "(const int64_t* sym, void* const* buf, cudaStream_t stream, const ptc_cuda::Ctx& ctx) {\n";
  emit_sym_locals(os, syms, "  ");
  os << "  ptc_cuda::CudnnConv a{};\n";
  os << "  a.type = " << type << ";\n";
  if (k.epilogue >= 0) {
    std::optional<sched::LibraryEpilogue> m = sched::match_library_epilogue(p, c, p.comps[k.epilogue]);
    PTC_CHECK(m && fwd && m->bias >= 0, "a cuDNN convolution epilogue the schedule took is no library epilogue");
    emit_library_epilogue(os, p, "a", *m);
  }
  std::vector<sym::Expr> x_sizes, w_sizes, y_sizes;
  if (fwd) {
    const loop::View &X = c.operands[0], &W = c.operands[1];
    os << "  a.direction = ptc_cuda::kConvForward;\n";
    emit_strided(os, "x", ptr(X), X.strides);
    os << "  a.w = " << ptr(W) << ";\n";
    // A KRSC filter (channels_last_weights); a 1x1 one is both layouts: NHWC when the output is.
    if (!W.dense() || (nhwc && W.channels_last())) os << "  a.w_nhwc = 1;\n";
    emit_strided(os, "y", out, out_strides);
    x_sizes = X.sizes, w_sizes = W.sizes, y_sizes = y_logical;
  } else {
    const loop::View &A = c.operands[0], &DY = c.operands[1];
    PTC_CHECK(DY.sizes.size() == 5, "a convolution gradient reads grad_output as [groups, O/groups, N, OH, OW]");
    os << "  const int64_t dys[5] = {" << index_list(DY.strides) << "};\n";
    os << "  if (" << c.as<loop::ConvAttrs>().groups << " > 1 && dys[0] != (" << cpp_index(DY.sizes[1]) << ") * dys[1]) return \"" << loop::extern_name(c.extern_kind)
       << ": grad_output's groups and channels do not merge\";\n";
    os << "  a.y = " << ptr(DY) << "; a.ys[0] = dys[2]; a.ys[1] = dys[1]; a.ys[2] = dys[3]; a.ys[3] = dys[4];\n";
    y_sizes = {DY.sizes[2], DY.sizes[0] * DY.sizes[1], DY.sizes[3], DY.sizes[4]};
    if (filter) {
      os << "  a.direction = ptc_cuda::kConvBackwardFilter;\n";
      emit_strided(os, "x", ptr(A), A.strides);
      os << "  a.w = " << out << ";\n";
      x_sizes = A.sizes, w_sizes = c.domain;
    } else {
      os << "  a.direction = ptc_cuda::kConvBackwardData;\n";
      emit_strided(os, "x", out, out_strides);
      os << "  a.w = " << ptr(A) << ";\n";
      x_sizes = c.domain, w_sizes = A.sizes;
    }
  }
  os << "  a.N = " << cpp_index(x_sizes[0]) << "; a.C = " << cpp_index(x_sizes[1]) << "; a.H = " << cpp_index(x_sizes[2]) << "; a.W = " << cpp_index(x_sizes[3])
     << ";\n";
  os << "  a.O = " << cpp_index(w_sizes[0]) << "; a.KH = " << cpp_index(w_sizes[2]) << "; a.KW = " << cpp_index(w_sizes[3]) << "; a.OH = " << cpp_index(y_sizes[2])
     << "; a.OW = " << cpp_index(y_sizes[3]) << ";\n";
  emit_conv_params(os, c);
  os << "  return ptc_cuda::cudnn_conv(ctx, a, stream);\n}\n\n";
}

void emit_conv(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms) {
  const Computation& c = p.comps[k.comps.front()];
  if (cudnn_kernel(c)) return emit_cudnn_conv(os, p, k, index, syms);
  PTC_CHECK(k.epilogue < 0, "a direct CUDA convolution with a fused epilogue");
  const loop::View& X = c.operands[0];
  const loop::View& W = c.operands[1];
  if (p.buffers[c.out].dtype != DType::Float32) user_error("the CUDA convolution supports float32 only so far (", c.origin, ")");
  auto ptr = [](const loop::View& v) { return "static_cast<const float*>(buf[" + std::to_string(v.buffer) + "]) + " + cpp_index(v.offset); };
  os << "const char* ptc_launch_" << index << "(const int64_t* sym, void* const* buf, cudaStream_t stream, const ptc_cuda::Ctx&) {\n";
  emit_sym_locals(os, syms, "  ");
  os << "  ptc_cuda::Conv2d a{};\n";
  emit_strided(os, "x", ptr(X), X.strides);
  emit_strided(os, "w", ptr(W), W.strides);
  if (c.operands.size() > 2)
    os << "  a.bias = static_cast<const float*>(buf[" << c.operands[2].buffer << "]) + " << cpp_index(c.operands[2].offset)
       << "; a.bias_stride = " << cpp_index(c.operands[2].strides[0]) << ";\n";
  os << "  a.y = static_cast<float*>(buf[" << c.out << "]);\n";
  const char* names[] = {"N", "C", "H", "W"};
  for (int i = 0; i < 4; ++i) os << "  a." << names[i] << " = " << cpp_index(X.sizes[i]) << ";\n";
  os << "  a.O = " << cpp_index(W.sizes[0]) << "; a.KH = " << cpp_index(W.sizes[2]) << "; a.KW = " << cpp_index(W.sizes[3])
     << "; a.OH = " << cpp_index(c.domain[2]) << "; a.OW = " << cpp_index(c.domain[3]) << ";\n";
  emit_conv_params(os, c);
  os << "  return ptc_cuda::conv2d(a, stream);\n}\n\n";
}

// Fused attention (ptc_cuda::attention): q, k, v (and the mask) as strided views whose up to two
// leading dimensions are batch and heads; q, k, v and the output of one element type (float32, or
// bfloat16 / float16 where the backend computes attention natively: Backend::half_native).
void emit_attention(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms) {
  const Computation& c = p.comps[k.comps.front()];
  const std::string type = elem_type(p, c, "attention");
  os << "const char* ptc_launch_" << index << "(const int64_t* sym, void* const* buf, cudaStream_t stream, const ptc_cuda::Ctx& ctx) {\n";
  emit_sym_locals(os, syms, "  ");
  os << "  ptc_cuda::Attention a{};\n";
  os << "  a.elem = " << type << ";\n";
  // float32: TF32 tensor cores under tf32, and under bf16 / fp16 where attention stayed float32
  // (autocast rounded q, k and v to the half dtype, whose values TF32 holds exactly, so q.k is the
  // half-precision product with fp32 accumulation).
  os << "  a.tf32 = ctx.math.attention != ptc_rt::MathMode::FP32;\n";
  os << wrapper::attention_fields(c, "  ", [&](size_t i, const loop::View& v) {
    const DType dt = p.buffers[v.buffer].dtype;
    const char* t = i < 3 ? ctype(dt) : dt == DType::Float32 ? "float" : "unsigned char";  // a float32 or bool mask
    return std::string("static_cast<const ") + t + "*>(buf[" + std::to_string(v.buffer) + "])";
  });
  os << "  a.o = static_cast<" << ctype(p.buffers[c.out].dtype) << "*>(buf[" << c.out << "]);\n";
  os << "  return ptc_cuda::attention(a, stream);\n}\n\n";
}

// scatter: out = self (one thread per element; skipped in place, where out already holds self),
// then one thread per index element adds (atomicAdd: several indices may name one position) or
// stores its src element at the indexed position. torch refuses an index larger than self in a
// dimension other than `dim` (checked on the host); an index value out of range is skipped (CUDA
// kernels do not report bad indices yet, as gathers read row 0 for them).
void emit_scatter(std::ostream& os, const loop::Program& p, const sched::Kernel& k, size_t index, const std::vector<std::string>& syms) {
  const Computation& c = p.comps[k.comps.front()];
  const loop::ScatterAttrs& at = c.as<loop::ScatterAttrs>();
  const size_t first = at.in_place ? 0 : 1;
  const loop::View &ix = c.operands[first], &src = c.operands[first + 1];
  const DType dt = p.buffers[c.out].dtype;
  if (at.accumulate && dt != DType::Float32 && dt != DType::Float64)
    user_error("the CUDA scatter_add supports float32 and float64 only so far (", c.origin, ")");
  const size_t r = c.domain.size(), dim = static_cast<size_t>(at.dim);
  std::vector<int> bufs{ix.buffer, src.buffer, c.out};
  if (!at.in_place) bufs.insert(bufs.begin(), c.operands[0].buffer);
  std::vector<int> uniq;
  for (int b : bufs)
    if (std::find(uniq.begin(), uniq.end(), b) == uniq.end()) uniq.push_back(b);
  auto elem = [](const loop::View& v, const std::vector<std::string>& i) { return view_element(v, i); };
  std::vector<std::string> iv;
  for (size_t d = 0; d < r; ++d) iv.push_back("x" + std::to_string(d));
  auto out_at = [&](const std::vector<std::string>& i) { return dense_element(c.out, i); };
  for (int pass = at.in_place ? 1 : 0; pass < 2; ++pass) {
    os << "__global__ void __launch_bounds__(" << kBlock << ") ptc_kernel_" << index << (pass ? "_add" : "_copy") << "(";
    emit_params(os, p, uniq, syms);
    os << ") {\n";
    std::vector<std::string> n = sizes(os, c.domain, "", "  ");
    std::vector<std::string> m = sizes(os, ix.sizes, "m", "  ");
    for (const auto& x : m) os << "  (void)" << x << ";\n";
    os << "  const int64_t total = " << cpp_product(pass ? m : n) << ";\n";
    os << "  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {\n";
    decompose_into(os, "i", pass ? m : n, 'x', 0, "    ");
    if (!pass) {
      os << "    " << out_at(iv) << " = " << elem(c.operands[0], iv) << ";\n";
    } else {
      std::vector<std::string> target = iv;
      if (r > 0) target[dim] = "t";
      os << "    const int64_t t = static_cast<int64_t>(" << elem(ix, iv) << ");\n";
      os << "    if (t < 0 || t >= " << (r > 0 ? n[dim] : std::string("1")) << ") continue;\n";
      if (at.accumulate)
        os << "    atomicAdd(&" << out_at(target) << ", " << elem(src, iv) << ");\n";
      else
        os << "    " << out_at(target) << " = " << elem(src, iv) << ";\n";
    }
    os << "  }\n}\n\n";
  }
  os << "const char* ptc_launch_" << index << "(const int64_t* sym, void* const* buf, cudaStream_t stream, const ptc_cuda::Ctx&) {\n";
  emit_sym_locals(os, syms, "  ");
  std::vector<std::string> hn = sizes(os, c.domain, "", "  ");
  std::vector<std::string> hm = sizes(os, ix.sizes, "m", "  ");
  for (size_t d = 0; d < r; ++d)
    if (d != dim) os << "  if (" << hm[d] << " > " << hn[d] << ") return \"scatter: the index is larger than self in dimension " << d << "\";\n";
  os << "  const int64_t total = " << cpp_product(hn) << ", count = " << cpp_product(hm) << ";\n  (void)total;\n";
  if (!at.in_place)
    os << "  if (total > 0) ptc_kernel_" << index << "_copy<<<ptc_cuda::grid_for(total, " << kBlock << "), " << kBlock << ", 0, stream>>>("
       << call_args(p, uniq, syms) << ");\n";
  os << "  if (total > 0 && count > 0) ptc_kernel_" << index << "_add<<<ptc_cuda::grid_for(count, " << kBlock << "), " << kBlock
     << ", 0, stream>>>(" << call_args(p, uniq, syms) << ");\n  return nullptr;\n}\n\n";
}

}  // namespace

bool uses_cudnn(const loop::Program& p, const sched::Schedule& s) {
  for (const auto& k : s.kernels)
    if (k.kind == sched::Kernel::Kind::Conv && cudnn_kernel(p.comps[k.comps.front()])) return true;
  return false;
}

void emit_kernel(std::ostream& os, const loop::Program& p, const sched::Schedule& s, size_t index, const std::vector<std::string>& syms) {
  const sched::Kernel& k = s.kernels[index];
  os << "// " << wrapper::kernel_summary(p, k) << "\n";
  PTC_CHECK(k.epilogue < 0 || k.kind == sched::Kernel::Kind::Gemm || k.kind == sched::Kernel::Kind::Conv,
            "the CUDA backend fuses epilogues into GEMMs and convolutions only");
  switch (k.kind) {
    case sched::Kernel::Kind::Loop: emit_elementwise(os, p, k, index, syms, sched::kernel_buffers(p, s, k)); break;
    case sched::Kernel::Kind::RowGroup:
      if (small_window_group(p, k))
        emit_elementwise(os, p, k, index, syms, sched::kernel_buffers(p, s, k));
      else
        emit_row_group(os, p, k, index, syms, sched::kernel_buffers(p, s, k));
      break;
    case sched::Kernel::Kind::Gemm: emit_gemm(os, p, k, index, syms); break;
    case sched::Kernel::Kind::Conv:
      PTC_CHECK(p.comps[k.comps.front()].extern_kind != loop::ExternKind::MaxPoolGrad,
                "max pooling's direct input gradient is a CPU kernel (LowerOptions::max_pool_grad_extern is off for CUDA)");
      emit_conv(os, p, k, index, syms);
      break;
    case sched::Kernel::Kind::Attention: emit_attention(os, p, k, index, syms); break;
    case sched::Kernel::Kind::Scatter: emit_scatter(os, p, k, index, syms); break;
  }
}

}  // namespace ptc::cuda
