// CPU kernel printer: one loop nest per loop-IR computation, OpenMP over the outer loop, element
// expressions printed with common subexpressions hoisted into locals. (The scheduler that fuses
// computations into fewer kernels and tiles/vectorizes them explicitly builds on this printer.)
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "cpu_internal.h"
#include "../expr_printer.h"
#include "../wrapper/abi_common.h"
#include "ptc/error.h"

namespace ptc::cpu {

using loop::Computation;
using loop::ExprRef;
using loop::Op;

const char* ctype(DType t) { return codegen::ctype(t); }

namespace {

using codegen::ExprPrinter;
using codegen::literal;

// Declares the size names of dims [from, sizes.size()) as `<prefix>n<d>` and returns all names
// (the outer ones named n<d>).
std::vector<std::string> size_names(std::ostream& os, const std::vector<sym::Expr>& sizes, size_t from,
                                    const std::string& prefix, const std::string& indent) {
  std::vector<std::string> n;
  for (size_t d = 0; d < sizes.size(); ++d) {
    n.push_back(d < from ? "n" + std::to_string(d) : prefix + "n" + std::to_string(d));
    if (d >= from) os << indent << "const int64_t " << n.back() << " = " << cpp_index(sizes[d]) << ";\n";
  }
  return n;
}

void open_loops(std::ostream& os, const std::vector<std::string>& n, size_t from, char prefix, std::string& indent) {
  for (size_t d = from; d < n.size(); ++d) {
    os << indent << "for (int64_t " << prefix << d << " = 0; " << prefix << d << " < " << n[d] << "; ++" << prefix << d << ") {\n";
    indent += "  ";
  }
}

void close_loops(std::ostream& os, size_t count, std::string& indent) {
  for (size_t d = 0; d < count; ++d) {
    indent.resize(indent.size() - 2);
    os << indent << "}\n";
  }
}

// Opens the kernel's outer loops over `sizes`: the leading ones that give enough iterations to
// share among threads are collapsed into one OpenMP loop; the rest stay plain nested loops (a
// collapsed index costs a division per dimension per iteration).
void open_parallel(std::ostream& os, const std::vector<std::string>& n, const std::vector<sym::Expr>& sizes,
                   const std::string& work, std::string& indent) {
  size_t count = 0;
  int64_t iters = 1;
  while (count < n.size() && iters < 256) {
    iters *= sizes[count].as_const().value_or(1);  // a symbolic size may be 1 (batch)
    ++count;
  }
  if (count > 0)
    os << indent << "#pragma omp parallel for collapse(" << count << ") schedule(static) if (" << work << " > 32768)\n";
  open_loops(os, n, 0, 'x', indent);
}

std::string out_index(size_t rank, char prefix, const std::vector<std::string>& n) {
  if (rank == 0) return "0";
  std::string s = std::string(1, prefix) + "0";
  for (size_t d = 1; d < rank; ++d) s = "(" + s + ") * " + n[d] + " + " + prefix + std::to_string(d);
  return s;
}

// One computation inside a kernel whose first `outer` domain dims are already open.
void emit_member(std::ostream& os, const Computation& c, size_t outer, const std::vector<std::string>& outer_names,
                 std::string indent, int id) {
  std::string prefix = "c" + std::to_string(id) + "_";
  os << indent << "{\n";
  indent += "  ";
  std::vector<std::string> n = size_names(os, c.domain, outer, prefix, indent);
  for (size_t d = 0; d < outer; ++d) n[d] = outer_names[d];
  if (c.kind == Computation::Kind::Pointwise && n.size() > outer) {
    // The innermost loop gets a simd hint: its iterations are independent.
    std::vector<std::string> head(n.begin(), n.end() - 1);
    open_loops(os, head, outer, 'x', indent);
    os << indent << "#pragma omp simd\n";
    open_loops(os, n, n.size() - 1, 'x', indent);
  } else {
    open_loops(os, n, outer, 'x', indent);
  }
  std::string at = "b" + std::to_string(c.out) + "[" + out_index(n.size(), 'x', n) + "]";
  if (c.kind == Computation::Kind::Pointwise) {
    ExprPrinter pr(os, indent);
    std::string v = pr.print(c.body);
    os << indent << at << " = " << v << ";\n";
    close_loops(os, n.size() - outer, indent);
  } else {
    std::vector<std::string> m = size_names(os, c.reduce_domain, 0, prefix + "r", indent);
    DType acc_t = dtype_compute(c.body->dtype);
    if (c.reduce == loop::ReduceOp::Any || c.reduce == loop::ReduceOp::All) acc_t = DType::Bool;
    const std::string T = ctype(acc_t);
    bool arg = c.reduce == loop::ReduceOp::ArgMax || c.reduce == loop::ReduceOp::ArgMin;
    std::string init;
    switch (c.reduce) {
      case loop::ReduceOp::Sum: case loop::ReduceOp::Any: init = literal(0, acc_t); break;
      case loop::ReduceOp::Prod: case loop::ReduceOp::All: init = literal(1, acc_t); break;
      case loop::ReduceOp::Max: case loop::ReduceOp::ArgMax: init = literal(-INFINITY, acc_t); break;
      case loop::ReduceOp::Min: case loop::ReduceOp::ArgMin: init = literal(INFINITY, acc_t); break;
    }
    if (!dtype_is_float(acc_t) && (c.reduce == loop::ReduceOp::Max || c.reduce == loop::ReduceOp::ArgMax))
      init = "std::numeric_limits<" + T + ">::lowest()";
    if (!dtype_is_float(acc_t) && (c.reduce == loop::ReduceOp::Min || c.reduce == loop::ReduceOp::ArgMin))
      init = "std::numeric_limits<" + T + ">::max()";
    os << indent << T << " acc = " << init << ";\n";
    if (arg) os << indent << "int64_t best = 0, k = 0;\n";
    // Sum reductions of floats vectorize only with reassociation: let OpenMP do it explicitly.
    bool minmax = (c.reduce == loop::ReduceOp::Max || c.reduce == loop::ReduceOp::Min) && dtype_is_float(acc_t);
    // An int flag and the `acc > v ? acc : v` form are what GCC turns into vmaxps (a bool flag or the
    // other operand order leave the loop scalar once it is split at a mask bound: ~7x slower).
    if (minmax) os << indent << "int nan = 0;\n";
    if (c.reduce == loop::ReduceOp::Sum && dtype_is_float(acc_t) && m.size() == 1)
      os << indent << "#pragma omp simd reduction(+:acc)\n";
    if (minmax && m.size() == 1)
      os << indent << "#pragma omp simd reduction(" << (c.reduce == loop::ReduceOp::Max ? "max" : "min") << ":acc) reduction(|:nan)\n";
    int64_t window = 1;
    for (const auto& r : c.reduce_domain) window *= r.as_const().value_or(1 << 20);
    if (window <= 16 && m.size() > 1) {  // pooling windows: let the compiler unroll them
      for (size_t d = 0; d < m.size(); ++d) {
        os << indent << "#pragma GCC unroll 16\n";
        open_loops(os, m, 0, 'r', indent);
        break;
      }
    } else {
      open_loops(os, m, 0, 'r', indent);
    }
    ExprPrinter pr(os, indent);
    std::string v = pr.print(c.body);
    switch (c.reduce) {
      case loop::ReduceOp::Sum: os << indent << "acc += " << v << ";\n"; break;
      case loop::ReduceOp::Prod: os << indent << "acc *= " << v << ";\n"; break;
      case loop::ReduceOp::Max:
        if (minmax) os << indent << "{ const " << T << " v = " << v << "; nan |= v != v; acc = acc > v ? acc : v; }\n";
        else os << indent << "acc = ptc_rt::maxnan(" << v << ", acc);\n";
        break;
      case loop::ReduceOp::Min:
        if (minmax) os << indent << "{ const " << T << " v = " << v << "; nan |= v != v; acc = acc < v ? acc : v; }\n";
        else os << indent << "acc = ptc_rt::minnan(" << v << ", acc);\n";
        break;
      case loop::ReduceOp::Any: os << indent << "acc = acc || " << v << ";\n"; break;
      case loop::ReduceOp::All: os << indent << "acc = acc && " << v << ";\n"; break;
      // torch: a NaN is both the max and the min; the first one wins.
      case loop::ReduceOp::ArgMax: os << indent << "{ const " << T << " v = " << v << "; if (k == 0 || v > acc || (v != v && acc == acc)) { acc = v; best = k; } ++k; }\n"; break;
      case loop::ReduceOp::ArgMin: os << indent << "{ const " << T << " v = " << v << "; if (k == 0 || v < acc || (v != v && acc == acc)) { acc = v; best = k; } ++k; }\n"; break;
    }
    close_loops(os, m.size(), indent);
    if (minmax) os << indent << "if (nan) acc = std::numeric_limits<" << T << ">::quiet_NaN();\n";
    os << indent << at << " = " << (arg ? "best" : "acc") << ";\n";
    close_loops(os, n.size() - outer, indent);
  }
  indent.resize(indent.size() - 2);
  os << indent << "}\n";
}

// Whether a pointwise domain's innermost dim is a constant too short to vectorize (at most 4)
// under a longer one.
bool tiny_inner(const std::vector<sym::Expr>& domain) {
  if (domain.size() < 2) return false;
  const auto last = domain.back().as_const(), prev = domain[domain.size() - 2].as_const();
  return last && *last <= 4 && (!prev || *prev >= 16);
}

// Elements of the innermost dimension one OpenMP iteration of a pointwise kernel covers.
constexpr int64_t kInnerBlock = 1024;

// A pointwise kernel: one or more computations over the same domain. The outer dimensions and
// blocks of the innermost one are collapsed into the parallel loop (a collapsed index costs
// divisions per iteration, so not per element); each member runs a simd loop over the block.
void emit_pointwise(std::ostream& os, const loop::Program& p, const sched::Kernel& k, std::string indent) {
  const std::vector<sym::Expr>& dom = p.comps[k.comps.front()].domain;
  std::vector<std::string> n = size_names(os, dom, 0, "", indent);
  if (dom.empty()) {
    for (int ci : k.comps) emit_member(os, p.comps[ci], 0, n, indent, ci);
    return;
  }
  size_t r = dom.size();
  // The simd loop runs over the innermost dim; over the one above it where the innermost is tiny
  // (an NHWC image's 3 channels: 16 positions a vector instead of 3 lanes), that tiny loop
  // unrolled inside.
  const bool tiny = tiny_inner(dom);
  const size_t sd = tiny ? r - 2 : r - 1;
  auto inner = dom[sd].as_const();
  bool blocked = tiny || !inner || *inner > kInnerBlock;
  std::vector<std::string> par(n.begin(), n.begin() + static_cast<long>(sd));
  if (blocked) os << indent << "const int64_t nb = (" << n[sd] << " + " << kInnerBlock - 1 << ") / " << kInnerBlock << ";\n";
  size_t nloops = par.size() + (blocked ? 1 : 0);
  if (nloops > 0)
    os << indent << "#pragma omp parallel for collapse(" << nloops << ") schedule(static) if (" << cpp_product(n) << " * "
       << k.comps.size() << " > 32768)\n";
  open_loops(os, par, 0, 'x', indent);
  if (blocked) {
    os << indent << "for (int64_t xb = 0; xb < nb; ++xb) {\n";
    indent += "  ";
  }
  std::string lo = "0", hi = n[sd];
  if (blocked) {
    os << indent << "const int64_t lo = xb * " << kInnerBlock << ", hi = std::min<int64_t>(" << n[sd] << ", lo + "
       << kInnerBlock << ");\n";
    lo = "lo";
    hi = "hi";
  }
  const std::string xs = "x" + std::to_string(sd), xi = "x" + std::to_string(r - 1);
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    os << indent << "{\n";
    os << indent << "  #pragma omp simd\n";
    os << indent << "  for (int64_t " << xs << " = " << lo << "; " << xs << " < " << hi << "; ++" << xs << ") {\n";
    std::string in = indent + "    ";
    if (tiny) {
      os << in << "for (int64_t " << xi << " = 0; " << xi << " < " << n[r - 1] << "; ++" << xi << ") {\n";
      in += "  ";
    }
    ExprPrinter pr(os, in);
    std::string v = pr.print(c.body);
    os << in << "b" << c.out << "[" << out_index(r, 'x', n) << "] = " << v << ";\n";
    if (tiny) os << indent << "    }\n";
    os << indent << "  }\n" << indent << "}\n";
  }
  close_loops(os, nloops, indent);
}

// Small constant reduction windows (pooling) and the pointwise steps after them over the same
// domain: vectorized across the innermost output dimension instead of along the window — one
// accumulator per output element of a block, the window's loops outside the simd loop.
constexpr int64_t kWindowMax = 64, kWindowBlock = 64;

bool is_window_group(const loop::Program& p, const sched::Kernel& k) {
  if (k.kind != sched::Kernel::Kind::RowGroup || k.outer.empty()) return false;
  // Too few outputs along the innermost dimension to fill a vector (global pooling: 1): the
  // window's own loop vectorizes better.
  if (auto w = k.outer.back().as_const(); w && *w < 8) return false;
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    if (!(c.domain == k.outer)) return false;
    if (c.kind != Computation::Kind::Reduction) continue;
    if (c.reduce != loop::ReduceOp::Sum && c.reduce != loop::ReduceOp::Max && c.reduce != loop::ReduceOp::Min) return false;
    if (!dtype_is_float(c.body->dtype)) return false;
    int64_t window = 1;
    for (const auto& r : c.reduce_domain) {
      auto v = r.as_const();
      if (!v) return false;
      window *= *v;
    }
    if (window > kWindowMax) return false;
  }
  return true;
}

// Whether `e` depends on the loop variable named `var` (through an index or a nested expression).
bool mentions_var(const ExprRef& e, const std::string& var) {
  auto in = [&](const sym::Expr& x) {
    for (const auto& s : sym::free_symbols(x))
      if (s.name() == var) return true;
    return false;
  };
  if ((e->op == Op::Load || e->op == Op::LoadAt || e->op == Op::IndexVal) && in(e->index)) return true;
  for (const auto& a : e->args)
    if (mentions_var(a, var)) return true;
  return false;
}

void emit_window_group(std::ostream& os, const loop::Program& p, const sched::Kernel& k, std::string indent) {
  const std::vector<sym::Expr>& dom = k.outer;
  size_t r = dom.size();
  std::vector<std::string> n = size_names(os, dom, 0, "", indent);
  os << indent << "const int64_t nb = (" << n.back() << " + " << kWindowBlock - 1 << ") / " << kWindowBlock << ";\n";
  std::vector<std::string> par(n.begin(), n.end() - 1);
  os << indent << "#pragma omp parallel for collapse(" << par.size() + 1 << ") schedule(static) if (" << cpp_product(n) << " * " << kWindowMax
     << " > 32768)\n";
  open_loops(os, par, 0, 'x', indent);
  os << indent << "for (int64_t xb = 0; xb < nb; ++xb) {\n";
  indent += "  ";
  std::string xi = "x" + std::to_string(r - 1);
  os << indent << "const int64_t lo = xb * " << kWindowBlock << ", hi = std::min<int64_t>(" << n.back() << ", lo + " << kWindowBlock
     << ");\n";
  auto simd_loop = [&](const std::string& in) {
    os << in << "#pragma omp simd\n" << in << "for (int64_t " << xi << " = lo; " << xi << " < hi; ++" << xi << ") {\n";
  };
  // A member whose guarded loads (window taps over padding) would be gathers with 64-bit
  // indices runs as two versions: with 32-bit indices when its buffers are small enough, which
  // vectorizes, else as before.
  auto int32_condition = [&](const Computation& c) {
    std::ostringstream sink;
    ExprPrinter probe(sink, "");
    return probe.eager_guards(p, c.body) ? probe.clamps_fit_int32() : std::string();
  };
  auto versions = [&](const std::string& in, const std::string& cond, const std::function<void(const std::string&, bool)>& body) {
    if (cond.empty()) return body(in, false);
    os << in << "if (" << cond << ") {\n";
    body(in + "  ", true);
    os << in << "} else {\n";
    body(in + "  ", false);
    os << in << "}\n";
  };
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    std::string at = "b" + std::to_string(c.out) + "[" + out_index(r, 'x', n) + "]";
    os << indent << "{\n";
    std::string in = indent + "  ";
    if (c.kind == Computation::Kind::Pointwise) {
      versions(in, int32_condition(c), [&](const std::string& vin, bool i32) {
        simd_loop(vin);
        ExprPrinter pr(os, vin + "  ");
        if (i32) {
          pr.eager_guards(p, c.body);
          pr.index32(true);
        }
        std::string v = pr.print(c.body);
        os << vin << "  " << at << " = " << v << ";\n" << vin << "}\n";
      });
    } else {
      const std::string T = ctype(dtype_compute(c.body->dtype));
      std::string init = c.reduce == loop::ReduceOp::Sum ? literal(0, c.body->dtype)
                                                          : literal(c.reduce == loop::ReduceOp::Max ? -INFINITY : INFINITY, c.body->dtype);
      os << in << T << " acc[" << kWindowBlock << "];\n";
      os << in << "for (int64_t j = 0; j < " << kWindowBlock << "; ++j) acc[j] = " << init << ";\n";
      std::vector<std::string> m = size_names(os, c.reduce_domain, 0, "c" + std::to_string(ci) + "_r", in);
      // The taps (unrolled or not) around a simd loop that folds each tap's value into acc;
      // `skip_unless`: a test printed before each tap's simd loop (nullptr: none).
      auto taps = [&](std::string rin, bool unroll, const ExprRef& skip_unless, const std::function<std::string(ExprPrinter&)>& value) {
        for (size_t d = 0; d < m.size(); ++d) {
          if (unroll) os << rin << "#pragma GCC unroll 16\n";
          os << rin << "for (int64_t r" << d << " = 0; r" << d << " < " << m[d] << "; ++r" << d << ") {\n";
          rin += "  ";
        }
        if (skip_unless) {
          ExprPrinter pc(os, rin);
          const std::string inside = pc.print(skip_unless);
          os << rin << "if (!" << inside << ") continue;\n";
        }
        simd_loop(rin);
        ExprPrinter pr(os, rin + "  ");
        const std::string v = value(pr);
        os << rin << "  const " << T << " v = " << v << ";\n";
        os << rin << "  " << T << "& a = acc[" << xi << " - lo];\n";
        switch (c.reduce) {
          case loop::ReduceOp::Sum: os << rin << "  a += v;\n"; break;
          // NaN-propagating: once a is NaN neither test picks v again.
          case loop::ReduceOp::Max: os << rin << "  a = (v != v || v > a) ? v : a;\n"; break;
          default: os << rin << "  a = (v != v || v < a) ? v : a;\n"; break;
        }
        os << rin << "}\n";
        for (size_t d = 0; d < m.size(); ++d) {
          rin.resize(rin.size() - 2);
          os << rin << "}\n";
        }
      };
      // A tap over padding is where(inside, value, the reduction's identity) with `inside` the
      // same for the whole vector of outputs (channels-last pooling: the window's position, not
      // the channel): test it once per tap and skip the tap outside, so that the loads need no
      // guard and stay contiguous vector loads (else clamped indices, i.e. gathers). Not
      // unrolled: each tap is a whole vector loop.
      if (const ExprRef& b = c.body; b->op == Op::Where && b->args[2]->op == Op::Const &&
                                     literal(b->args[2]->value, c.body->dtype) == init && !mentions_var(b->args[0], xi)) {
        taps(in, false, b->args[0], [&](ExprPrinter& pr) { return pr.print(b->args[1]); });
      } else {
        versions(in, int32_condition(c), [&](const std::string& rin, bool i32) {
          taps(rin, true, nullptr, [&](ExprPrinter& pr) {
            pr.eager_guards(p, c.body);
            pr.index32(i32);
            return pr.print(c.body);
          });
        });
      }
      simd_loop(in);
      os << in << "  " << at << " = acc[" << xi << " - lo];\n" << in << "}\n";
    }
    os << indent << "}\n";
  }
  close_loops(os, par.size() + 1, indent);
}

// Whether `e` loads buffer `b`.
bool reads_buffer(const ExprRef& e, int b, std::set<const loop::Expr*>& seen) {
  if (!seen.insert(e.get()).second) return false;
  if ((e->op == Op::Load || e->op == Op::LoadAt) && e->buffer == b) return true;
  for (const auto& a : e->args)
    if (reads_buffer(a, b, seen)) return true;
  return false;
}

// A floating-point sum over the row group's whole outer domain: such members with the same
// reduction domain run in one loop nest (one pass over what they read, not one each).
bool is_row_sum(const Computation& c, size_t outer) {
  return c.kind == Computation::Kind::Reduction && c.reduce == loop::ReduceOp::Sum && c.domain.size() == outer &&
         dtype_is_float(dtype_compute(c.body->dtype)) && !c.reduce_domain.empty();
}

// Consecutive row sums `ids` (is_row_sum, equal reduction domains, none reading another's
// result) in one loop nest with an accumulator each; the innermost loop is an OpenMP simd
// reduction (float sums vectorize only with reassociation), unless it is a short window.
void emit_row_sums(std::ostream& os, const loop::Program& p, const std::vector<int>& ids, size_t outer,
                   const std::vector<std::string>& outer_names, std::string indent) {
  const Computation& first = p.comps[ids.front()];
  std::string prefix = "c" + std::to_string(ids.front()) + "_";
  os << indent << "{\n";
  indent += "  ";
  std::vector<std::string> m = size_names(os, first.reduce_domain, 0, prefix + "r", indent);
  std::string accs;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Computation& c = p.comps[ids[i]];
    const DType t = dtype_compute(c.body->dtype);
    os << indent << ctype(t) << " acc" << i << " = " << literal(0, t) << ";\n";
    accs += (i ? "," : "") + std::string("acc") + std::to_string(i);
  }
  std::vector<std::string> head(m.begin(), m.end() - 1);
  open_loops(os, head, 0, 'r', indent);
  auto inner = first.reduce_domain.back().as_const();
  if (!inner || *inner >= 8) os << indent << "#pragma omp simd reduction(+:" << accs << ")\n";
  open_loops(os, m, m.size() - 1, 'r', indent);
  ExprPrinter pr(os, indent);
  std::vector<std::string> vals;
  for (int id : ids) vals.push_back(pr.print(p.comps[id].body));
  for (size_t i = 0; i < ids.size(); ++i) os << indent << "acc" << i << " += " << vals[i] << ";\n";
  close_loops(os, m.size(), indent);
  for (size_t i = 0; i < ids.size(); ++i)
    os << indent << "b" << p.comps[ids[i]].out << "[" << out_index(outer, 'x', outer_names) << "] = acc" << i << ";\n";
  indent.resize(indent.size() - 2);
  os << indent << "}\n";
}

// A row group (computations sharing an outer domain).
void emit_loops(std::ostream& os, const loop::Program& p, const sched::Kernel& k, std::string indent) {
  const Computation& first = p.comps[k.comps.front()];
  std::vector<sym::Expr> outer = k.kind == sched::Kernel::Kind::RowGroup ? k.outer : first.domain;
  std::vector<std::string> n = size_names(os, outer, 0, "", indent);
  std::string work = cpp_product(n);
  if (first.kind == Computation::Kind::Reduction) {
    std::vector<std::string> r;
    for (const auto& s : first.reduce_domain) r.push_back("(" + cpp_index(s) + ")");
    work += " * " + cpp_product(r) + " * " + std::to_string(k.comps.size());
  }
  open_parallel(os, n, outer, work, indent);
  for (size_t i = 0; i < k.comps.size();) {
    const Computation& c = p.comps[k.comps[i]];
    const bool row_sum = is_row_sum(c, outer.size());
    std::vector<int> sums{k.comps[i]};
    if (row_sum)
      for (size_t j = i + 1; j < k.comps.size(); ++j) {
        const Computation& d = p.comps[k.comps[j]];
        bool independent = true;
        for (int s : sums) {
          std::set<const loop::Expr*> seen;
          independent = independent && !reads_buffer(d.body, p.comps[s].out, seen);
        }
        if (!is_row_sum(d, outer.size()) || !(d.reduce_domain == c.reduce_domain) || !independent) break;
        sums.push_back(k.comps[j]);
      }
    int64_t window = 1;
    for (const auto& r : c.reduce_domain) window *= r.as_const().value_or(1 << 20);
    if (row_sum && window > 16 && (sums.size() > 1 || c.reduce_domain.size() > 1)) {
      emit_row_sums(os, p, sums, outer.size(), n, indent);
      i += sums.size();
    } else {
      emit_member(os, p.comps[k.comps[i]], outer.size(), n, indent, k.comps[i]);
      i += 1;
    }
  }
  close_loops(os, n.size(), indent);
}

// Fused attention (ptc_attention.h): up to two leading dims become (B, H); a missing one has
// size 1 and stride 0. bf16_values (--precision bf16): q, k and v hold bf16 values (autocast
// rounded them), so AMX CPUs may compute on bf16 tiles (AttentionArgs::bf16_values). A bf16
// result (the CPU backend's half_native attention) reads and writes bf16 buffers
// (AttentionArgs::bf16_io).
void emit_attention(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& indent, bool bf16_values) {
  const Computation& c = p.comps[k.comps.front()];
  const DType dt = p.buffers[c.out].dtype;
  if (dt != DType::Float32 && dt != DType::BFloat16) user_error("the CPU attention supports float32 and bfloat16 only (", c.origin, ")");
  for (size_t i = 0; i < 3 && i < c.operands.size(); ++i)
    PTC_CHECK(p.buffers[c.operands[i].buffer].dtype == dt, "attention operands of mixed dtypes (", c.origin, ")");
  os << indent << "{\n" << indent << "  ptc_rt::AttentionArgs a{};\n";
  os << wrapper::attention_fields(c, indent + "  ", [](size_t, const loop::View& v) { return "b" + std::to_string(v.buffer); });
  os << indent << "  a.o = b" << c.out << ";\n";
  if (bf16_values || dt == DType::BFloat16) os << indent << "  a.bf16_values = true;\n";
  if (dt == DType::BFloat16) os << indent << "  a.bf16_io = true;\n";
  os << indent << "  ptc_rt::attention_call(a);\n" << indent << "}\n";
}

// scatter: out = self, then out[.., index[i], ..] += src[i] (or = src[i]) along `dim`; in place,
// out already holds self (a state buffer). The writes are parallel over blocks of the last
// dimension when dim is not the last (no two threads then touch one output element), else over
// the leading dimensions; an index out of range fails the run.
void emit_scatter(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& in) {
  const Computation& c = p.comps[k.comps.front()];
  const loop::ScatterAttrs& at = c.as<loop::ScatterAttrs>();
  const size_t first = at.in_place ? 0 : 1;
  const loop::View &index = c.operands[first], &src = c.operands[first + 1];
  const size_t r = c.domain.size(), dim = static_cast<size_t>(at.dim);
  if (at.accumulate && dtype_compute(p.buffers[c.out].dtype) != p.buffers[c.out].dtype)
    user_error("the CPU scatter_add does not support ", dtype_name(p.buffers[c.out].dtype), " yet (", c.origin, ")");
  const char* op = at.accumulate ? " += " : " = ";
  auto elem = [](const loop::View& v, const std::vector<std::string>& i) { return view_element(v, i); };
  std::vector<std::string> iv;
  for (size_t d = 0; d < r; ++d) iv.push_back("i" + std::to_string(d));
  auto out_elem = [&](const std::vector<std::string>& i) { return dense_element(c.out, i); };
  os << in << "const char* ptc_node = " << wrapper::quote(c.origin) << ";\n";
  for (size_t d = 0; d < r; ++d)
    os << in << "const int64_t n" << d << " = " << cpp_index(c.domain[d]) << ", m" << d << " = " << cpp_index(index.sizes[d])
       << "; (void)n" << d << "; (void)m" << d << ";\n";
  std::string ind = in;
  if (!at.in_place) {  // out = self
    if (r > 0) os << in << "#pragma omp parallel for schedule(static)\n";
    for (size_t d = 0; d < r; ++d) {
      os << ind << "for (int64_t i" << d << " = 0; i" << d << " < n" << d << "; ++i" << d << ")\n";
      ind += "  ";
    }
    os << ind << out_elem(iv) << " = " << elem(c.operands[0], iv) << ";\n";
  }
  if (r == 0) {  // one element: index 0 is the only valid one
    os << in << "(void)ptc_ix(static_cast<int64_t>(" << elem(index, {}) << "), 1, ptc_node);\n"
       << in << out_elem({}) << op << elem(src, {}) << ";\n";
    return;
  }
  // torch's rule: index no larger than self in the other dimensions (else out of bounds).
  for (size_t d = 0; d < r; ++d)
    if (d != dim) os << in << "if (m" << d << " > n" << d << ") return \"scatter: the index is larger than self in dimension " << d << "\";\n";
  std::vector<std::string> target = iv;
  target[dim] = "k";
  if (dim + 1 < r) {
    os << in << "const int64_t nblk = (m" << r - 1 << " + 63) / 64;\n" << in << "#pragma omp parallel for schedule(static)\n"
       << in << "for (int64_t blk = 0; blk < nblk; ++blk) {\n";
    ind = in + "  ";
    for (size_t d = 0; d + 1 < r; ++d) {
      os << ind << "for (int64_t i" << d << " = 0; i" << d << " < m" << d << "; ++i" << d << ")\n";
      ind += "  ";
    }
    os << ind << "for (int64_t i" << r - 1 << " = blk * 64; i" << r - 1 << " < std::min<int64_t>(m" << r - 1 << ", blk * 64 + 64); ++i"
       << r - 1 << ") {\n";
  } else {
    if (r > 1) os << in << "#pragma omp parallel for schedule(static)\n";
    os << in << "for (int64_t i0 = 0; i0 < m0; ++i0) {\n";
    ind = in + "  ";
    for (size_t d = 1; d < r; ++d) {
      os << ind << "for (int64_t i" << d << " = 0; i" << d << " < m" << d << "; ++i" << d << ")\n";
      ind += "  ";
    }
    os << ind << "{\n";
  }
  os << ind << "  const int64_t k = ptc_ix(static_cast<int64_t>(" << elem(index, iv) << "), n" << dim << ", ptc_node);\n"
     << ind << "  " << out_elem(target) << op << elem(src, iv) << ";\n" << ind << "}\n";
  os << in << "}\n";
}

// A GEMM kernel's fused pointwise step as the lambda `epilogue` (ptc_rt::GemmEpilogue): the
// body of `ep` on ncols finished values of C's row `row` of problem `bi`, from column col0, in
// place (the GEMM's own result read as cp[j]). A GEMM of rank above 2 names its rows g.M.
void emit_gemm_epilogue(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const Computation& c, const Computation& ep,
                        const std::string& indent) {
  const size_t r = c.domain.size();
  // (A kernel that checks indices shares its one IndexCheck with the epilogue: by reference.)
  os << indent << "  auto epilogue = [=" << (kernel_checks_indices(p, k) ? ", &ptc_ix" : "")
     << "](float* __restrict cp, int64_t bi, int64_t row, int64_t col0, int64_t ncols) {\n";
  os << indent << "    (void)bi;\n";
  std::string in = indent + "    ";
  // The epilogue's own loop variables: its domain enumerates the GEMM's rows in the same
  // order, possibly with other leading dimensions ([B, S, N] over [B*S, N]).
  size_t er = ep.domain.size();
  for (size_t d = 0; d < er; ++d) os << in << "const int64_t n" << d << " = " << cpp_index(ep.domain[d]) << "; (void)n" << d << ";\n";
  if (ep.domain == c.domain) {
    if (r > 2) {
      os << in << "int64_t rest = bi;\n";
      for (size_t d = r - 2; d-- > 0;) os << in << "const int64_t x" << d << " = rest % n" << d << "; rest /= n" << d << ";\n";
    }
    os << in << "const int64_t x" << r - 2 << " = row;\n";
  } else {
    os << in << "int64_t rest = " << (r > 2 ? "bi * g.M + row" : "row") << ";\n";
    for (size_t d = er - 1; d-- > 0;) os << in << "const int64_t x" << d << " = rest % n" << d << "; rest /= n" << d << ";\n";
  }
  os << in << "#pragma omp simd\n" << in << "for (int64_t j = 0; j < ncols; ++j) {\n";
  os << in << "  const int64_t x" << er - 1 << " = col0 + j;\n";
  ExprPrinter pr(os, in + "  ");
  pr.override_load(c.out, "cp[j]");
  std::string v = pr.print(ep.body);
  os << in << "  cp[j] = " << v << ";\n" << in << "}\n";
  os << indent << "  };\n";
}

void emit_gemm_own(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& indent) {
  const Computation& c = p.comps[k.comps.front()];
  const loop::View& A = c.operands[0];
  const loop::View& B = c.operands[1];
  if (p.buffers[c.out].dtype != DType::Float32) user_error("the CPU GEMM supports float32 only so far (", c.origin, ")");
  const Computation* ep = k.epilogue >= 0 ? &p.comps[k.epilogue] : nullptr;
  int out = ep ? ep->out : c.out;
  size_t r = c.domain.size();
  os << indent << "{\n";
  os << indent << "  ptc_rt::GemmArgs g{};\n";
  os << indent << "  g.M = " << cpp_index(c.domain[r - 2]) << "; g.N = " << cpp_index(c.domain[r - 1]) << "; g.K = " << cpp_index(A.sizes[r - 1]) << ";\n";
  os << indent << "  g.A = b" << A.buffer << " + " << cpp_index(A.offset) << "; g.lda_m = " << cpp_index(A.strides[r - 2]) << "; g.lda_k = " << cpp_index(A.strides[r - 1]) << ";\n";
  os << indent << "  g.B = b" << B.buffer << " + " << cpp_index(B.offset) << "; g.ldb_k = " << cpp_index(B.strides[r - 2]) << "; g.ldb_n = " << cpp_index(B.strides[r - 1]) << ";\n";
  os << indent << "  g.C = b" << out << "; g.ldc_m = g.N;\n";
  std::vector<std::string> bs;
  for (size_t d = 0; d + 2 < r; ++d) bs.push_back("(" + cpp_index(c.domain[d]) + ")");
  if (r > 2) os << indent << "  const int64_t batch = " << cpp_product(bs) << ";\n";
  // The epilogue: the fused pointwise body on each finished tile row segment, in place.
  std::string ep_name = "ptc_rt::GemmEpilogue{}";
  if (ep) {
    ep_name = "ptc_rt::epilogue_ref(epilogue)";
    emit_gemm_epilogue(os, p, k, c, *ep, indent);
  }
  if (r == 2) {
    os << indent << "  ptc_rt::gemm_call(g, 1, ptc_rt::GemmOffsets{}, " << ep_name << ");\n";
  } else {
    os << indent << "  auto offsets = [&](int64_t bi, int64_t* oa, int64_t* ob, int64_t* oc) {\n";
    os << indent << "    *oc = bi * g.M * g.N; *oa = 0; *ob = 0; int64_t rest = bi;\n";
    for (size_t d = r - 2; d-- > 0;) {
      os << indent << "    { const int64_t i = rest % " << bs[d] << "; rest /= " << bs[d] << ";\n";
      os << indent << "      *oa += i * " << cpp_index(A.strides[d]) << "; *ob += i * " << cpp_index(B.strides[d]) << "; }\n";
    }
    os << indent << "  };\n";
    os << indent << "  ptc_rt::gemm_call(g, batch, ptc_rt::offsets_ref(offsets), " << ep_name << ");\n";
  }
  os << indent << "}\n";
}

// The activations oneDNN's matmul runs as eltwise post-ops.
constexpr sched::LibraryActs kOneDnnGemmActs = sched::LibraryEpilogue::act_bit(sched::LibraryEpilogue::Act::Gelu) |
                                               sched::LibraryEpilogue::act_bit(sched::LibraryEpilogue::Act::GeluTanh) |
                                               sched::LibraryEpilogue::act_bit(sched::LibraryEpilogue::Act::Silu);

// A linear layer's GEMM (GemmAttrs::library) on oneDNN's matmul through matmul_call, with the
// fused epilogue as its bias and post-ops. Products too small to repay oneDNN's per-call cost
// (ptc_rt::matmul_runs), and any call oneDNN cannot make, run on ptc's own GEMM.
void emit_gemm(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& indent, const std::string& prepared,
               bool bf16_values) {
  if (!kernel_on_onednn(p, k)) return emit_gemm_own(os, p, k, indent);
  PTC_CHECK(!prepared.empty(), "a oneDNN CPU GEMM without its call site");
  const Computation& c = p.comps[k.comps.front()];
  const loop::View &A = c.operands[0], &B = c.operands[1];
  const Computation* ep = k.epilogue >= 0 ? &p.comps[k.epilogue] : nullptr;
  // bfloat16 operands and result (MatmulArgs::bf16_io; the result float32 where the epilogue
  // widens it): only oneDNN's call, which also serves the sizes ptc's own GEMM takes in float32.
  const bool bf16_io = p.buffers[c.out].dtype == DType::BFloat16;
  if (bf16_io && (p.buffers[A.buffer].dtype != DType::BFloat16 || p.buffers[B.buffer].dtype != DType::BFloat16))
    user_error("the CPU's bfloat16 linear layer needs bfloat16 operands (", c.origin, ")");
  os << indent << "{\n" << indent << "  ptc_rt::MatmulArgs a{};\n";
  os << indent << "  a.M = " << cpp_index(c.domain[0]) << "; a.N = " << cpp_index(c.domain[1]) << "; a.K = " << cpp_index(A.sizes[1]) << ";\n";
  os << indent << "  a.a = b" << A.buffer << " + " << cpp_index(A.offset) << "; a.lda_m = " << cpp_index(A.strides[0]) << "; a.lda_k = "
     << cpp_index(A.strides[1]) << ";\n";
  os << indent << "  a.w = b" << B.buffer << " + " << cpp_index(B.offset) << "; a.ldw_k = " << cpp_index(B.strides[0]) << "; a.ldw_n = "
     << cpp_index(B.strides[1]) << ";\n";
  os << indent << "  a.weight_constant = true;\n";
  if (bf16_values) os << indent << "  a.bf16_values = true;\n";
  if (bf16_io) os << indent << "  a.bf16_io = true;\n";
  std::optional<sched::LibraryEpilogue> m = ep ? sched::match_library_epilogue(p, c, *ep, kOneDnnGemmActs) : std::nullopt;
  if (bf16_io && ep && p.buffers[ep->out].dtype == DType::Float32) os << indent << "  a.y_f32 = true;\n";
  if (ep && !m) {
    // Not bias / residual / activation alone: the whole step runs on the product's rows after it.
    PTC_CHECK(!k.epilogue_keeps, "a oneDNN CPU GEMM whose general epilogue keeps the product");
    emit_gemm_epilogue(os, p, k, c, *ep, indent);
    os << indent << "  a.ep = ptc_rt::epilogue_ref(epilogue);\n";
  } else if (ep) {
    if (m->bias >= 0) os << indent << "  a.bias = b" << m->bias << " + " << cpp_index(m->bias_offset) << ";\n";
    if (m->residual >= 0) os << indent << "  a.residual = b" << m->residual << " + " << cpp_index(m->residual_offset) << ";\n";
    using Act = sched::LibraryEpilogue::Act;
    const char* act = m->act == Act::Relu       ? "ptc_rt::kMatmulActRelu"
                      : m->act == Act::Gelu     ? "ptc_rt::kMatmulActGelu"
                      : m->act == Act::GeluTanh ? "ptc_rt::kMatmulActGeluTanh"
                      : m->act == Act::Silu     ? "ptc_rt::kMatmulActSilu"
                                                : nullptr;
    PTC_CHECK(m->act == Act::None || act, "a oneDNN CPU GEMM with an activation oneDNN does not run");
    if (act) os << indent << "  a.act = " << act << ";\n";
  }
  os << indent << "  a.y = b" << (ep ? ep->out : c.out) << ";\n";
  if (bf16_io) {
    os << indent << "  if (const char* e = ptc_rt::matmul_call(" << prepared << ", a)) return e;\n" << indent << "}\n";
    return;
  }
  os << indent << "  if (!ptc_rt::matmul_runs(a.M, a.N, a.K) || ptc_rt::matmul_call(" << prepared << ", a) != nullptr)\n";
  emit_gemm_own(os, p, k, indent + "  ");
  os << indent << "}\n";
}

// Whether C++ text names the identifier `word` (not as part of a longer identifier).
bool mentions_word(const std::string& text, const std::string& word) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1))
    if ((at == 0 || !ident(text[at - 1])) && (at + word.size() == text.size() || !ident(text[at + word.size()]))) return true;
  return false;
}

// Conv2dArgs' stride, padding, dilation and groups (the extern's attributes).
void emit_conv_params(std::ostream& os, const Computation& c, const std::string& indent) {
  os << indent << " " << wrapper::conv_fields(c) << "\n";
}

// Conv2dArgs' input pointer and strides.
void emit_conv_input(std::ostream& os, const loop::View& X, const std::string& indent) {
  os << indent << "  a.x = b" << X.buffer << " + " << cpp_index(X.offset) << "; { const int64_t s[4] = {" << index_list(X.strides)
     << "}; std::memcpy(a.xs, s, sizeof s); }\n";
}

// The weight-side fields of a convolution's Conv2dArgs `a` (weight, its strides, O, C, KH, KW,
// strides, padding, dilation, groups).
void emit_conv_weight_args(std::ostream& os, const Computation& c, const std::string& indent) {
  const loop::View& X = c.operands[0];
  const loop::View& W = c.operands[1];
  os << indent << "  a.w = b" << W.buffer << " + " << cpp_index(W.offset) << "; { const int64_t s[4] = {" << index_list(W.strides)
     << "}; std::memcpy(a.ws, s, sizeof s); }\n";
  os << indent << "  a.C = " << cpp_index(X.sizes[1]) << ";\n";
  os << indent << "  a.O = " << cpp_index(W.sizes[0]) << "; a.KH = " << cpp_index(W.sizes[2]) << "; a.KW = " << cpp_index(W.sizes[3]) << ";\n";
  emit_conv_params(os, c, indent);
}

// A convolution's weight gradient (ExternKind::ConvWeightGrad): the implicit GEMM of
// ptc_conv.h's conv2d_weight_grad over the input and the regrouped output gradient.
void emit_conv_weight_grad(std::ostream& os, const loop::Program& p, const Computation& c, const std::string& indent) {
  const loop::View& X = c.operands[0];
  const loop::View& G = c.operands[1];  // [groups, O/groups, N, OH, OW], contiguous
  if (p.buffers[c.out].dtype != DType::Float32 || p.buffers[X.buffer].dtype != DType::Float32)
    user_error("the CPU convolution weight gradient supports float32 only so far (", c.origin, ")");
  PTC_CHECK(G.sizes.size() == 5, "conv_weight_grad: grad_output must be [groups, O/groups, N, OH, OW]");
  // Ungrouped, dy as the forward wrote it: the [1, O, N, OH, OW] view of an [N, O, OH, OW] buffer.
  const bool nchw = !G.dense() && G.nchw_as_one_group();
  PTC_CHECK(nchw || G.dense(), "conv_weight_grad: grad_output must be regrouped densely");
  os << indent << "{\n" << indent << "  ptc_rt::Conv2dArgs a{};\n";
  emit_conv_input(os, X, indent);
  os << indent << "  a.N = " << cpp_index(X.sizes[0]) << "; a.C = " << cpp_index(X.sizes[1]) << "; a.H = " << cpp_index(X.sizes[2])
     << "; a.W = " << cpp_index(X.sizes[3]) << ";\n";
  os << indent << "  a.O = " << cpp_index(c.domain[0]) << "; a.KH = " << cpp_index(c.domain[2]) << "; a.KW = " << cpp_index(c.domain[3])
     << "; a.OH = " << cpp_index(G.sizes[3]) << "; a.OW = " << cpp_index(G.sizes[4]) << ";\n";
  emit_conv_params(os, c, indent);
  os << indent << "  ptc_rt::conv2d_weight_grad" << (nchw ? "_nchw" : "") << "_call(a, b" << G.buffer << " + " << cpp_index(G.offset) << ", b" << c.out
     << ");\n" << indent << "}\n";
}

// A convolution kernel's fused pointwise step (Kernel::epilogue), as the lambda `epilogue` that
// the runtime calls on `count` final outputs of (image, channel) from p0 = oh*OW+ow: runs of one
// output row each, so that (x2, x3) need no division per element.
void emit_conv_epilogue(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const Computation& c, const Computation& ep,
                        bool keeps, const std::string& indent) {
  std::string in = indent + "    ";
  // (A kernel that checks indices shares its one IndexCheck with the epilogue: by reference.)
  os << indent << "  auto epilogue = [=" << (kernel_checks_indices(p, k) ? ", &ptc_ix" : "")
     << "](float* __restrict cp, int64_t bi, int64_t row, int64_t col0, int64_t ncols) {\n";
  for (size_t d = 0; d < 4; ++d) os << in << "const int64_t n" << d << " = " << cpp_index(ep.domain[d]) << "; (void)n" << d << ";\n";
  os << in << "const int64_t x0 = bi, x1 = row;\n";
  os << in << (keeps ? "float* __restrict dp = b" + std::to_string(ep.out) + " + (cp - b" + std::to_string(c.out) + ")" : "float* const dp = cp")
     << ";\n";
  // A step that reads nothing by output position (an activation, a per-channel scale) is one
  // flat pass over the outputs: per-row runs cost more than the convolution itself on 14x14
  // and 7x7 planes (mobilenet_v2's depthwise ones).
  {
    std::ostringstream flat;
    ExprPrinter fp(flat, in + "  ");
    fp.override_load(c.out, "cp[q]");
    const std::string fv = fp.print(ep.body);
    if (!mentions_word(flat.str() + fv, "x2") && !mentions_word(flat.str() + fv, "x3")) {
      os << in << "#pragma omp simd\n" << in << "for (int64_t q = 0; q < ncols; ++q) {\n" << flat.str() << in << "  dp[q] = " << fv
         << ";\n" << in << "}\n" << indent << "  };\n" << indent << "  a.ep = ptc_rt::epilogue_ref(epilogue);\n";
      return;
    }
  }
  os << in << "int64_t x2 = col0 / n3, start = col0 % n3;\n";
  os << in << "for (int64_t j = 0; j < ncols; ++x2, start = 0) {\n";
  os << in << "  const int64_t run = std::min<int64_t>(ncols - j, n3 - start);\n";
  os << in << "  float* __restrict cq = cp + j - start;\n";
  if (keeps) os << in << "  float* __restrict dq = dp + j - start;\n";
  os << in << "  #pragma omp simd\n";
  os << in << "  for (int64_t x3 = start; x3 < start + run; ++x3) {\n";
  ExprPrinter pr(os, in + "    ");
  pr.override_load(c.out, "cq[x3]");
  std::string v = pr.print(ep.body);
  os << in << "    " << (keeps ? "dq" : "cq") << "[x3] = " << v << ";\n" << in << "  }\n" << in << "  j += run;\n" << in << "}\n";
  os << indent << "  };\n";
  os << indent << "  a.ep = ptc_rt::epilogue_ref(epilogue);\n";
}

// A depthwise convolution's input gradient (ExternKind::ConvInputGrad; the CPU lowers the
// others to GEMMs): ptc_conv.h's conv2d_depthwise_input_grad over the weight [C, 1, KH, KW] and
// dy viewed [C, 1, N, OH, OW], into dx [N, C, H, W].
void emit_conv_input_grad(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& indent) {
  const Computation& c = p.comps[k.comps.front()];
  const Computation* ep = k.epilogue >= 0 ? &p.comps[k.epilogue] : nullptr;
  const bool keeps = ep && k.epilogue_keeps;
  const loop::View& W = c.operands[0];
  const loop::View& G = c.operands[1];
  if (p.buffers[c.out].dtype != DType::Float32 || p.buffers[W.buffer].dtype != DType::Float32 || p.buffers[G.buffer].dtype != DType::Float32)
    user_error("the CPU convolution input gradient supports float32 only so far (", c.origin, ")");
  PTC_CHECK(G.sizes.size() == 5 && W.sizes.size() == 4, "conv_input_grad: dy must be [groups, O/groups, N, OH, OW]");
  os << indent << "{\n" << indent << "  ptc_rt::Conv2dArgs a{};\n";
  os << indent << "  a.x = b" << G.buffer << " + " << cpp_index(G.offset) << "; { const int64_t s[4] = {" << cpp_index(G.strides[2]) << ", "
     << cpp_index(G.strides[0]) << ", " << cpp_index(G.strides[3]) << ", " << cpp_index(G.strides[4]) << "}; std::memcpy(a.xs, s, sizeof s); }\n";
  os << indent << "  a.w = b" << W.buffer << " + " << cpp_index(W.offset) << "; { const int64_t s[4] = {" << index_list(W.strides)
     << "}; std::memcpy(a.ws, s, sizeof s); }\n";
  os << indent << "  a.y = b" << (ep && !keeps ? ep->out : c.out) << ";\n";
  os << indent << "  a.N = " << cpp_index(c.domain[0]) << "; a.C = " << cpp_index(c.domain[1]) << "; a.H = " << cpp_index(c.domain[2])
     << "; a.W = " << cpp_index(c.domain[3]) << ";\n";
  os << indent << "  a.O = " << cpp_index(W.sizes[0]) << "; a.KH = " << cpp_index(W.sizes[2]) << "; a.KW = " << cpp_index(W.sizes[3])
     << "; a.OH = " << cpp_index(G.sizes[3]) << "; a.OW = " << cpp_index(G.sizes[4]) << ";\n";
  emit_conv_params(os, c, indent);
  if (ep) emit_conv_epilogue(os, p, k, c, *ep, keeps, indent);
  os << indent << "  ptc_rt::conv2d_depthwise_input_grad_call(a);\n" << indent << "}\n";
}

// Max pooling's input gradient (ExternKind::MaxPoolGrad): ptc_pool.h's max_pool2d_backward over
// x and dy [N, C, OH, OW] into dx [N, C, H, W], the epilogue on each final dx row.
void emit_max_pool_grad(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& indent) {
  const Computation& c = p.comps[k.comps.front()];
  const Computation* ep = k.epilogue >= 0 ? &p.comps[k.epilogue] : nullptr;
  const bool keeps = ep && k.epilogue_keeps;
  const loop::View &X = c.operands[0], &G = c.operands[1];
  PTC_CHECK(X.sizes.size() == 4 && G.sizes.size() == 4, "max_pool_grad: 4-d x and dy");
  const loop::MaxPoolGradAttrs& pool = c.as<loop::MaxPoolGradAttrs>();
  if (p.buffers[c.out].dtype != DType::Float32 || p.buffers[X.buffer].dtype != DType::Float32 || p.buffers[G.buffer].dtype != DType::Float32)
    user_error("the CPU max pooling gradient supports float32 only so far (", c.origin, ")");
  os << indent << "{\n" << indent << "  ptc_rt::MaxPoolGradArgs a{};\n";
  emit_conv_input(os, X, indent);
  os << indent << "  a.dy = b" << G.buffer << " + " << cpp_index(G.offset) << "; { const int64_t s[4] = {" << index_list(G.strides)
     << "}; std::memcpy(a.dys, s, sizeof s); }\n";
  os << indent << "  a.y = b" << (ep && !keeps ? ep->out : c.out) << ";\n";
  os << indent << "  a.N = " << cpp_index(c.domain[0]) << "; a.C = " << cpp_index(c.domain[1]) << "; a.H = " << cpp_index(c.domain[2])
     << "; a.W = " << cpp_index(c.domain[3]) << ";\n";
  os << indent << "  a.OH = " << cpp_index(G.sizes[2]) << "; a.OW = " << cpp_index(G.sizes[3]) << "; a.KH = " << pool.kernel[0]
     << "; a.KW = " << pool.kernel[1] << ";\n";
  emit_conv_params(os, c, indent);
  if (ep) emit_conv_epilogue(os, p, k, c, *ep, keeps, indent);
  os << indent << "  ptc_rt::max_pool2d_backward_call(a);\n" << indent << "}\n";
}

// A channels-last forward convolution (ConvAttrs::nhwc): oneDNN through conv2d_nhwc_call, with the
// bias, residual and activation the schedule fused (Epilogues::Library) as its post-ops.
void emit_conv_nhwc(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& indent,
                    const std::string& prepared, bool bf16_values) {
  const Computation& c = p.comps[k.comps.front()];
  const loop::View &X = c.operands[0], &W = c.operands[1];
  const Computation* ep = k.epilogue >= 0 ? &p.comps[k.epilogue] : nullptr;
  // float32 throughout, or bfloat16 throughout (ConvNhwcArgs::bf16_io)
  const DType dt = p.buffers[c.out].dtype;
  if ((dt != DType::Float32 && dt != DType::BFloat16) || p.buffers[X.buffer].dtype != dt || p.buffers[W.buffer].dtype != dt ||
      (ep && p.buffers[ep->out].dtype != dt))
    user_error("the CPU's channels-last convolution supports float32 or bfloat16 throughout only (", c.origin, ")");
  PTC_CHECK(!prepared.empty(), "a channels-last CPU convolution without its call site");
  os << indent << "{\n" << indent << "  ptc_rt::ConvNhwcArgs a{};\n";
  emit_conv_input(os, X, indent);
  emit_conv_weight_args(os, c, indent);
  if (p.buffers[W.buffer].kind == loop::Buffer::Kind::Weight) os << indent << "  a.weight_constant = true;\n";
  if (bf16_values) os << indent << "  a.bf16_values = true;\n";
  if (dt == DType::BFloat16) os << indent << "  a.bf16_io = true;\n";
  if (ep) {
    std::optional<sched::LibraryEpilogue> m = sched::match_library_epilogue(p, c, *ep);
    PTC_CHECK(m, "a channels-last CPU convolution's epilogue is no library epilogue");
    if (m->bias >= 0) os << indent << "  a.bias = b" << m->bias << " + " << cpp_index(m->bias_offset) << ";\n";
    if (m->residual >= 0) os << indent << "  a.residual = b" << m->residual << " + " << cpp_index(m->residual_offset) << ";\n";
    if (m->act != sched::LibraryEpilogue::Act::None)
      os << indent << "  a.act = " << (m->act == sched::LibraryEpilogue::Act::Relu6 ? "ptc_rt::kConvActRelu6" : "ptc_rt::kConvActRelu") << ";\n";
  }
  os << indent << "  a.y = b" << (ep ? ep->out : c.out) << ";\n";
  os << indent << "  a.N = " << cpp_index(X.sizes[0]) << "; a.H = " << cpp_index(X.sizes[2]) << "; a.W = " << cpp_index(X.sizes[3])
     << "; a.OH = " << cpp_index(c.domain[1]) << "; a.OW = " << cpp_index(c.domain[2]) << ";\n";
  os << indent << "  if (const char* e = ptc_rt::conv2d_nhwc_call(" << prepared << ", a)) return e;\n";
  os << indent << "}\n";
}

void emit_conv(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& indent,
               const std::string& prepared, bool conv_bf16) {
  const Computation& c = p.comps[k.comps.front()];
  if (kernel_on_onednn(p, k)) return emit_conv_nhwc(os, p, k, indent, prepared, conv_bf16);
  if (c.extern_kind == loop::ExternKind::ConvWeightGrad) return emit_conv_weight_grad(os, p, c, indent);
  if (c.extern_kind == loop::ExternKind::ConvInputGrad) return emit_conv_input_grad(os, p, k, indent);
  if (c.extern_kind == loop::ExternKind::MaxPoolGrad) return emit_max_pool_grad(os, p, k, indent);
  PTC_CHECK(c.extern_kind == loop::ExternKind::Convolution, "a CPU convolution kernel of an unknown kind");
  const Computation* ep = k.epilogue >= 0 ? &p.comps[k.epilogue] : nullptr;
  const loop::View& X = c.operands[0];
  if (p.buffers[c.out].dtype != DType::Float32) user_error("the CPU convolution supports float32 only so far (", c.origin, ")");
  os << indent << "{\n" << indent << "  ptc_rt::Conv2dArgs a{};\n";
  emit_conv_input(os, X, indent);
  emit_conv_weight_args(os, c, indent);
  if (!prepared.empty()) os << indent << "  a.prepared = " << prepared << ";\n";
  if (c.operands.size() > 2)
    os << indent << "  a.bias = b" << c.operands[2].buffer << " + " << cpp_index(c.operands[2].offset) << "; a.bias_stride = "
       << cpp_index(c.operands[2].strides[0]) << ";\n";
  // (Kernel::epilogue_keeps: the convolution writes its own result and the epilogue its buffer
  // at the same flat positions, dp; else the epilogue rewrites the rows in place.)
  const bool keeps = ep && k.epilogue_keeps;
  os << indent << "  a.y = b" << (ep && !keeps ? ep->out : c.out) << ";\n";
  os << indent << "  a.N = " << cpp_index(X.sizes[0]) << "; a.H = " << cpp_index(X.sizes[2]) << "; a.W = " << cpp_index(X.sizes[3])
     << "; a.OH = " << cpp_index(c.domain[2]) << "; a.OW = " << cpp_index(c.domain[3]) << ";\n";
  if (ep) emit_conv_epilogue(os, p, k, c, *ep, keeps, indent);
  os << indent << "  ptc_rt::conv2d_call(a);\n";
  os << indent << "}\n";
}

}  // namespace


std::string kernel_function_name(size_t index) { return "ptc_kernel_" + std::to_string(index); }

bool kernel_checks_indices(const loop::Program& p, const sched::Kernel& k) {
  std::set<const loop::Expr*> seen;
  std::function<bool(const loop::ExprRef&)> has = [&](const loop::ExprRef& e) {
    if (!e || !seen.insert(e.get()).second) return false;
    if (e->op == loop::Op::CheckIndex) return true;
    for (const auto& a : e->args)
      if (has(a)) return true;
    return false;
  };
  if (k.kind == sched::Kernel::Kind::Scatter) return true;  // its indices are data
  for (int ci : k.comps)
    if (has(p.comps[ci].body)) return true;
  return false;
}

sched::LibraryActs onednn_gemm_acts() { return kOneDnnGemmActs; }

bool kernel_on_onednn(const loop::Program& p, const sched::Kernel& k) {
  const Computation& c = p.comps[k.comps.front()];
  if (k.kind == sched::Kernel::Kind::Gemm) {
    if (c.extern_kind != loop::ExternKind::Gemm || !c.as<loop::GemmAttrs>().library || c.domain.size() != 2) return false;
    // (An epilogue oneDNN's post-ops cannot run follows the product on its rows, in place: not
    // where the kernel also keeps the product itself.)
    return k.epilogue < 0 || !k.epilogue_keeps || sched::match_library_epilogue(p, c, p.comps[k.epilogue], kOneDnnGemmActs).has_value();
  }
  if (k.kind != sched::Kernel::Kind::Conv) return false;
  return c.extern_kind == loop::ExternKind::Convolution && c.as<loop::ConvAttrs>().nhwc;
}

std::string prepare_function_name(size_t index) { return "ptc_prepare_" + std::to_string(index); }

bool kernel_prepares(const loop::Program& p, const sched::Kernel& k) {
  if (kernel_on_onednn(p, k)) return true;  // oneDNN's call site (its primitives per shape)
  if (k.kind != sched::Kernel::Kind::Conv) return false;
  const Computation& c = p.comps[k.comps.front()];
  if (c.extern_kind != loop::ExternKind::Convolution) return false;
  const loop::View& W = c.operands[1];
  if (p.buffers[W.buffer].kind != loop::Buffer::Kind::Weight || p.buffers[c.out].dtype != DType::Float32) return false;
  // what conv2d_prepare reads must not depend on the sizes of the inputs
  std::vector<sym::Expr> fixed = W.sizes;
  fixed.insert(fixed.end(), W.strides.begin(), W.strides.end());
  fixed.push_back(W.offset);
  fixed.push_back(c.operands[0].sizes[1]);
  for (const auto& e : fixed)
    if (!e.is_const()) return false;
  return W.sizes[2].as_const() == 3 && W.sizes[3].as_const() == 3;  // Winograd candidates
}

void emit_prepare_function(std::ostream& os, const loop::Program& p, const sched::Schedule& s, size_t index) {
  const sched::Kernel& k = s.kernels[index];
  const Computation& c = p.comps[k.comps.front()];
  if (kernel_on_onednn(p, k)) {
    os << "void* " << prepare_function_name(index) << "(void* const*) { return ptc_rt::"
       << (k.kind == sched::Kernel::Kind::Gemm ? "matmul_prepare" : "conv2d_nhwc_prepare") << "(); }\n\n";
    return;
  }
  const int wb = c.operands[1].buffer;
  os << "void* " << prepare_function_name(index) << "(void* const* buf) {\n";
  os << "  const float* b" << wb << " = static_cast<const float*>(buf[" << wb << "]);\n";
  os << "  ptc_rt::Conv2dArgs a{};\n";
  emit_conv_weight_args(os, c, "");
  os << "  return ptc_rt::conv2d_prepare(a);\n}\n\n";
}

void emit_kernel_function(std::ostream& os, const loop::Program& p, const sched::Schedule& s, size_t index,
                          const std::vector<std::string>& sym_names, const MathModes& math) {
  const sched::Kernel& k = s.kernels[index];
  std::vector<int> bufs = sched::kernel_buffers(p, s, k);
  const bool checks = kernel_checks_indices(p, k);
  os << "const char* " << kernel_function_name(index) << "(const int64_t* sym, void* const* buf) {\n";
  if (checks) os << "  ptc_rt::IndexCheck ptc_ix;\n";
  for (size_t i = 0; i < sym_names.size(); ++i) os << "  const int64_t " << sym_names[i] << " = sym[" << i << "]; (void)" << sym_names[i] << ";\n";
  for (int b : bufs) {  // (an epilogue's GEMM result is elided: read through the tile pointer)
    const loop::Buffer& bb = p.buffers[b];
    bool ro = bb.kind == loop::Buffer::Kind::Input || bb.kind == loop::Buffer::Kind::Weight;
    std::string T = std::string(ro ? "const " : "") + ctype(bb.dtype);
    os << "  " << T << "* b" << b << " = static_cast<" << T << "*>(buf[" << b << "]);\n";
  }
  std::string prepared;
  if (kernel_prepares(p, k)) prepared = "buf[" + std::to_string(p.buffers.size() + index) + "]";
  emit_kernel(os, p, k, prepared, math);
  os << (checks ? "  return ptc_ix.error();\n" : "  return nullptr;\n") << "}\n\n";
  if (!prepared.empty()) emit_prepare_function(os, p, s, index);
}

void emit_kernel(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& prepared, const MathModes& math) {
  os << "  { // " << wrapper::kernel_summary(p, k) << "\n";
  switch (k.kind) {
    case sched::Kernel::Kind::Loop: emit_pointwise(os, p, k, "    "); break;
    case sched::Kernel::Kind::RowGroup:
      if (is_window_group(p, k))
        emit_window_group(os, p, k, "    ");
      else
        emit_loops(os, p, k, "    ");
      break;
    case sched::Kernel::Kind::Gemm: emit_gemm(os, p, k, "    ", prepared, math.gemm == MathMode::BF16); break;
    case sched::Kernel::Kind::Conv: emit_conv(os, p, k, "    ", prepared, math.conv == MathMode::BF16); break;
    case sched::Kernel::Kind::Attention: emit_attention(os, p, k, "    ", math.attention == MathMode::BF16); break;
    case sched::Kernel::Kind::Scatter: emit_scatter(os, p, k, "    "); break;
  }
  os << "  }\n";
}

}  // namespace ptc::cpu
