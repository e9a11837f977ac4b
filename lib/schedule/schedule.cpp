#include "ptc/schedule.h"

#include "schedule_internal.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace ptc::sched {

std::vector<sym::Expr> loop_vars(const std::vector<sym::Expr>& sizes, size_t n) {
  std::vector<sym::Expr> v;
  for (size_t d = 0; d < n; ++d) v.push_back(loop::loop_var(static_cast<int>(d), sizes[d]));
  return v;
}

sym::Expr row_major_flat(const std::vector<sym::Expr>& idx, const std::vector<sym::Expr>& sizes) {
  sym::Expr flat = 0;
  for (size_t d = 0; d < idx.size(); ++d) flat = flat * sizes[d] + idx[d];
  return flat;
}

namespace {

using loop::Computation;
using loop::ExprRef;
using loop::Op;

struct Load {
  int buffer;
  sym::Expr index;
};

void collect_loads(const ExprRef& e, std::vector<Load>& out, std::set<const loop::Expr*>& seen) {
  if (!seen.insert(e.get()).second) return;
  if (e->op == Op::Load) out.push_back({e->buffer, e->index});
  // A data-dependent position: an index no fusion test can place (never "own element", never
  // provably "same row").
  if (e->op == Op::LoadAt) out.push_back({e->buffer, sym::symbol("indirect")});
  for (const auto& a : e->args) collect_loads(a, out, seen);
}

std::vector<Load> loads_of(const Computation& c) {
  std::vector<Load> out;
  std::set<const loop::Expr*> seen;
  if (c.body) collect_loads(c.body, out, seen);
  return out;
}

std::vector<int> reads_of(const Computation& c) {
  std::vector<int> r;
  for (const auto& l : loads_of(c)) r.push_back(l.buffer);
  for (const auto& v : c.operands) r.push_back(v.buffer);
  return r;
}

bool has_prefix(const std::vector<sym::Expr>& dom, const std::vector<sym::Expr>& prefix) {
  if (dom.size() < prefix.size()) return false;
  for (size_t d = 0; d < prefix.size(); ++d)
    if (!(dom[d] == prefix[d])) return false;
  return true;
}

bool same_index(const sym::Expr& a, const sym::Expr& b) {
  if (a == b) return true;
  try {
    return sym::prove_eq(a, b);  // e.g. a size-1 dimension's variable, which is always 0
  } catch (const std::exception&) {
    return false;
  }
}

// Whether `within`, an offset over the variables of `m` that run inside a row (domain dims from
// `outer` on, and the reduction's), stays in [0, rowsize - 1]: it must not decrease when any of
// them grows by one, so that its extremes are at every variable's 0 and size - 1.
bool within_row(const sym::Expr& within, const Computation& m, size_t outer, const sym::Expr& rowsize) {
  std::map<sym::Expr, sym::Expr> lo, hi;
  auto var = [&](const sym::Expr& v, const sym::Expr& size) {
    if (!sym::prove_ge(sym::substitute(within, {{v, v + 1}}) - within, 0)) return false;
    lo[v] = 0;
    hi[v] = size - 1;
    return true;
  };
  for (size_t d = outer; d < m.domain.size(); ++d)
    if (!var(loop::loop_var(static_cast<int>(d), m.domain[d]), m.domain[d])) return false;
  if (m.kind == Computation::Kind::Reduction)
    for (size_t d = 0; d < m.reduce_domain.size(); ++d)
      if (!var(loop::reduce_var(static_cast<int>(d), m.reduce_domain[d]), m.reduce_domain[d])) return false;
  return sym::prove_ge(sym::substitute(within, lo), 0) && sym::prove_le(sym::substitute(within, hi), rowsize - 1);
}

// Whether a load at `index` of a buffer produced over `producer_domain` (which has prefix
// `outer`) touches only the row of the consumer's current outer index. With the consumer `m`,
// offsets that range bounds alone cannot place (a reduction index over a symbolic row) are
// checked through its loop sizes.
bool same_row(const sym::Expr& index, const std::vector<sym::Expr>& producer_domain, const std::vector<sym::Expr>& outer,
              const Computation* m = nullptr) {
  sym::Expr rowsize = 1;
  for (size_t d = outer.size(); d < producer_domain.size(); ++d) rowsize = rowsize * producer_domain[d];
  sym::Expr within = index - row_major_flat(loop_vars(outer, outer.size()), outer) * rowsize;
  try {
    if (sym::prove_ge(within, 0) && sym::prove_le(within, rowsize - 1)) return true;
    return m && within_row(within, *m, outer.size(), rowsize);
  } catch (const std::exception&) {
    return false;
  }
}

bool fits_row_group(const loop::Program& p, const Computation& c, const std::vector<sym::Expr>& outer,
                    const std::set<int>& group_buffers, const std::vector<std::vector<sym::Expr>>& domain_of) {
  if (c.kind == Computation::Kind::Extern) return false;
  if (!has_prefix(c.domain, outer)) return false;
  if (c.kind == Computation::Kind::Reduction && c.domain.size() != outer.size()) return false;
  for (const auto& l : loads_of(c))
    if (group_buffers.count(l.buffer) && !same_row(l.index, domain_of[l.buffer], outer, &c)) return false;
  (void)p;
  return true;
}

// Whether two row-major domains enumerate the same elements in the same order with the same
// last dimension (e.g. [B, S, N] over a GEMM's [B*S, N]): a computation over one reads the
// other's buffer at its own flat index.
bool same_flat_rows(const std::vector<sym::Expr>& a, const std::vector<sym::Expr>& b) {
  if (a == b) return true;
  if (a.empty() || b.empty() || !(a.back() == b.back())) return false;
  sym::Expr pa = 1, pb = 1;
  for (size_t d = 0; d + 1 < a.size(); ++d) pa = pa * a[d];
  for (size_t d = 0; d + 1 < b.size(); ++d) pb = pb * b[d];
  return pa == pb;
}

bool fits_epilogue(const loop::Program& p, const Computation& gemm, const Computation& e, const std::vector<int>& readers, Epilogues mode,
                   LibraryActs acts) {
  if (mode == Epilogues::None || e.kind != Computation::Kind::Pointwise) return false;
  if (mode == Epilogues::Library && !match_library_epilogue(p, gemm, e, acts)) return false;
  // A convolution's epilogue runs over its [N, O, OH, OW] output rows: the same domain only
  // (likewise a depthwise input gradient's, the CPU's direct kernel, and a max pooling's input
  // gradient, over [N, C, H, W]).
  const bool conv = gemm.extern_kind == loop::ExternKind::Convolution || gemm.extern_kind == loop::ExternKind::ConvInputGrad ||
                    gemm.extern_kind == loop::ExternKind::MaxPoolGrad;
  if (conv ? !(e.domain == gemm.domain) : !same_flat_rows(e.domain, gemm.domain)) return false;
  // float32; or, for a library's epilogue (cuBLASLt's, cuDNN's), bfloat16 / float16 in and out:
  // the library adds bias and residual to its float32 accumulator and rounds once (or a
  // half-precision GEMM writes float32: match_library_epilogue checked it).
  // A half-precision library GEMM with a generated epilogue (the CPU's bf16 linear layers): the
  // epilogue runs on its float32 rows and writes float32 or the GEMM's type.
  const DType dt = p.buffers[gemm.out].dtype, et = p.buffers[e.out].dtype;
  const bool half_gemm = mode == Epilogues::Any && gemm.extern_kind == loop::ExternKind::Gemm && gemm.as<loop::GemmAttrs>().library &&
                         dtype_is_half(dt) && (et == dt || et == DType::Float32);
  if (mode != Epilogues::Library && et != dt && !half_gemm) return false;
  if (!(dt == DType::Float32 || (mode == Epilogues::Library && dtype_is_half(dt)) || half_gemm)) return false;
  // Read elsewhere too: a convolution still runs it (stored as well, Kernel::epilogue_keeps) on
  // the CPU, where the epilogue reads the rows the convolution just wrote, e.g. the batch norm +
  // ReLU after a training forward's convolution, whose output the backward keeps.
  if (readers[gemm.out] != 1 && !(mode == Epilogues::Any && conv)) return false;
  if (p.buffers[e.out].kind == loop::Buffer::Kind::Input || p.buffers[e.out].kind == loop::Buffer::Kind::Weight) return false;
  sym::Expr own = row_major_flat(loop_vars(e.domain, e.domain.size()), e.domain);
  bool reads = false;
  for (const auto& l : loads_of(e)) {
    if (l.buffer == e.out) return false;
    if (l.buffer != gemm.out) continue;
    if (!(l.index == own)) return false;
    reads = true;
  }
  return reads;
}

// How many later computations the horizontal fusion looks at.
constexpr size_t kFuseWindow = 16;

bool fits_horizontal(const Computation& first, const Computation& d, const std::set<int>& produced, const std::set<int>& skipped_out) {
  if (d.kind != Computation::Kind::Pointwise || !(d.domain == first.domain)) return false;
  sym::Expr own = row_major_flat(loop_vars(d.domain, d.domain.size()), d.domain);
  for (const auto& l : loads_of(d)) {
    if (skipped_out.count(l.buffer)) return false;
    if (produced.count(l.buffer) && !same_index(l.index, own)) return false;
  }
  return true;
}

// Whether computation `c` of kernel `k` (at position `pos`) may write its result into the
// storage of temporary `a`: `a` has c's element count and size, nothing reads it after this
// kernel, c reads it only at its own element, members after c do not read it, and members
// before c read it only where c has not written yet (same element in a pointwise kernel, same
// row in a row group).
bool can_overwrite(const loop::Program& p, const Schedule& s, const Kernel& k, size_t pos, int a, const std::vector<int>& last_reader,
                   int kernel_index, const std::vector<std::vector<sym::Expr>>& domain_of) {
  const Computation& c = p.comps[k.comps[pos]];
  const loop::Buffer& ab = p.buffers[a];
  const loop::Buffer& bb = p.buffers[c.out];
  if (ab.kind != loop::Buffer::Kind::Temp || s.elided[a] || a == c.out) return false;
  if (last_reader[a] != kernel_index || dtype_size(ab.dtype) != dtype_size(bb.dtype) || !(ab.numel() == bb.numel())) return false;
  sym::Expr own = row_major_flat(loop_vars(c.domain, c.domain.size()), c.domain);
  for (size_t q = 0; q < k.comps.size(); ++q) {
    const Computation& m = p.comps[k.comps[q]];
    for (const auto& l : loads_of(m)) {
      if (l.buffer != a) continue;
      if (q > pos) return false;
      if (q == pos && !same_index(l.index, own)) return false;
      if (q < pos) {
        if (k.kind == Kernel::Kind::RowGroup) {
          if (!has_prefix(domain_of[a], k.outer) || !same_row(l.index, domain_of[a], k.outer, &m)) return false;
        } else if (!(m.domain == c.domain) || !same_index(l.index, own)) {
          return false;
        }
      }
    }
    for (const auto& v : m.operands)
      if (v.buffer == a) return false;
  }
  return true;
}

void plan_in_place(const loop::Program& p, Schedule& s, const std::vector<std::vector<sym::Expr>>& domain_of) {
  s.alias_of.assign(p.buffers.size(), -1);
  std::vector<int> last_reader(p.buffers.size(), -1);
  for (size_t ki = 0; ki < s.kernels.size(); ++ki)
    for (int ci : s.kernels[ki].comps)
      for (int b : reads_of(p.comps[ci])) last_reader[b] = static_cast<int>(ki);
  for (int o : p.outputs) last_reader[o] = static_cast<int>(s.kernels.size());
  std::vector<bool> reused(p.buffers.size(), false);  // its storage already went to another buffer
  for (size_t ki = 0; ki < s.kernels.size(); ++ki) {
    const Kernel& k = s.kernels[ki];
    if (k.kind != Kernel::Kind::Loop && k.kind != Kernel::Kind::RowGroup) continue;
    for (size_t pos = 0; pos < k.comps.size(); ++pos) {
      const Computation& c = p.comps[k.comps[pos]];
      if (c.kind != Computation::Kind::Pointwise || p.buffers[c.out].kind != loop::Buffer::Kind::Temp) continue;
      for (const auto& l : loads_of(c)) {
        int a = l.buffer;
        if (reused[a] || !can_overwrite(p, s, k, pos, a, last_reader, static_cast<int>(ki), domain_of)) continue;
        s.alias_of[c.out] = s.alias_of[a] >= 0 ? s.alias_of[a] : a;
        reused[a] = true;
        break;
      }
    }
  }
}

// The epilogues extern `c` may take: channels-last convolutions run on a library
// (nhwc_conv_epilogues).
Epilogues extern_epilogue_mode(const Computation& c, const ScheduleOptions& opts) {
  if (opts.extern_epilogues == Epilogues::None) return Epilogues::None;
  const bool nhwc_conv = c.extern_kind == loop::ExternKind::Convolution && c.as<loop::ConvAttrs>().nhwc;
  return nhwc_conv ? opts.nhwc_conv_epilogues : opts.extern_epilogues;
}

}  // namespace

Schedule schedule(const loop::Program& p, const ScheduleOptions& opts) {
  Schedule s;
  s.elided.assign(p.buffers.size(), false);
  std::vector<int> readers(p.buffers.size(), 0);
  for (const auto& c : p.comps) {
    std::vector<int> r = reads_of(c);
    for (int b : std::set<int>(r.begin(), r.end())) readers[b]++;
  }
  for (int o : p.outputs) readers[o]++;
  std::vector<std::vector<sym::Expr>> domain_of(p.buffers.size());
  for (const auto& c : p.comps) domain_of[c.out] = c.domain;

  auto add_origin = [&](Kernel& k, const Computation& c) {
    size_t start = 0;
    while (start < c.origin.size()) {
      size_t comma = c.origin.find(',', start);
      if (comma == std::string::npos) comma = c.origin.size();
      std::string o = c.origin.substr(start, comma - start);
      if (std::find(k.origins.begin(), k.origins.end(), o) == k.origins.end()) k.origins.push_back(o);
      start = comma + 1;
    }
  };
  std::vector<bool> taken(p.comps.size(), false);
  auto next_free = [&](size_t j) {
    while (j < p.comps.size() && taken[j]) ++j;
    return j;
  };
  // A GEMM / convolution whose epilogue candidate (its result's only reader) is not the next
  // computation is deferred to run just before it, when nothing in between writes what it reads:
  // deferred[r] = the extern whose epilogue comp r is (a ResNet downsample block: conv(x), the
  // downsample conv and its bias, then the sum the first conv takes as its epilogue). Until
  // then r is reserved: no other kernel takes it, and what reads r's result waits for it.
  std::map<size_t, size_t> deferred;
  std::vector<bool> reserved(p.comps.size(), false);
  auto defer = [&](size_t i, const Computation& c, Epilogues mode) {
    if (readers[c.out] != 1) return false;
    const std::vector<int> in = reads_of(c);
    for (size_t r = next_free(i + 1), seen = 0; r < p.comps.size() && seen < kFuseWindow; r = next_free(r + 1), ++seen) {
      if (reserved[r]) return false;
      const Computation& d = p.comps[r];
      const std::vector<int> dr = reads_of(d);
      if (std::find(dr.begin(), dr.end(), c.out) != dr.end()) {
        if (seen == 0 || !fits_epilogue(p, c, d, readers, mode, opts.library_gemm_acts)) return false;
        deferred[r] = i;
        reserved[r] = true;
        return true;
      }
      if (std::find(in.begin(), in.end(), d.out) != in.end()) return false;  // (an in-place update of an operand)
    }
    return false;
  };
  size_t i = next_free(0);
  while (i < p.comps.size()) {
    // (a reserved epilogue: its deferred extern runs here, with it)
    const size_t ci = reserved[i] ? deferred.at(i) : i;
    const Computation& c = p.comps[ci];
    Kernel k;
    auto take = [&](size_t j) {
      taken[j] = true;
      k.comps.push_back(static_cast<int>(j));
      add_origin(k, p.comps[j]);
    };
    if (c.kind == Computation::Kind::Extern && !reserved[i]) {
      const Epilogues mode = extern_epilogue_mode(c, opts);
      const size_t j = next_free(i + 1);
      const bool library = c.extern_kind == loop::ExternKind::Gemm || c.extern_kind == loop::ExternKind::Convolution;
      if (library && !(j < p.comps.size() && !reserved[j] && fits_epilogue(p, c, p.comps[j], readers, mode, opts.library_gemm_acts)) &&
          defer(i, c, mode)) {
        i = next_free(i + 1);
        continue;
      }
    }
    take(ci);
    if (c.kind == Computation::Kind::Extern) {
      k.kind = c.extern_kind == loop::ExternKind::Gemm          ? Kernel::Kind::Gemm
               : c.extern_kind == loop::ExternKind::Convolution ||
                       c.extern_kind == loop::ExternKind::ConvWeightGrad || c.extern_kind == loop::ExternKind::ConvInputGrad ||
                       c.extern_kind == loop::ExternKind::MaxPoolGrad
                   ? Kernel::Kind::Conv
               : c.extern_kind == loop::ExternKind::Scatter  ? Kernel::Kind::Scatter
                                                                : Kernel::Kind::Attention;
      const size_t j = ci != i ? i : next_free(i + 1);
      const bool epilogue_kind = c.extern_kind == loop::ExternKind::Gemm || c.extern_kind == loop::ExternKind::Convolution ||
                                 ((c.extern_kind == loop::ExternKind::ConvInputGrad || c.extern_kind == loop::ExternKind::MaxPoolGrad) &&
                                  opts.extern_epilogues == Epilogues::Any);
      const Epilogues mode = extern_epilogue_mode(c, opts);
      if (epilogue_kind && j < p.comps.size() && (ci != i || !reserved[j]) &&
          fits_epilogue(p, c, p.comps[j], readers, mode, opts.library_gemm_acts)) {
        k.epilogue = static_cast<int>(j);
        take(j);
        if (readers[c.out] == 1)
          s.elided[c.out] = true;
        else
          k.epilogue_keeps = true;
      }
    } else if (c.kind == Computation::Kind::Reduction) {
      k.kind = Kernel::Kind::RowGroup;
      k.outer = c.domain;
      std::set<int> produced{c.out};
      for (size_t j = next_free(i + 1); j < p.comps.size() && !reserved[j] && fits_row_group(p, p.comps[j], k.outer, produced, domain_of);
           j = next_free(j + 1)) {
        take(j);
        produced.insert(p.comps[j].out);
      }
    } else {
      // Horizontal fusion: later pointwise computations over the same domain join this loop
      // nest when they depend on nothing computed between here and there, and read what this
      // kernel computes only at their own element.
      std::set<int> produced{c.out}, skipped_out;
      size_t scanned = 0;
      for (size_t j = next_free(i + 1); j < p.comps.size() && scanned < kFuseWindow; j = next_free(j + 1), ++scanned) {
        const Computation& d = p.comps[j];
        if (!reserved[j] && fits_horizontal(c, d, produced, skipped_out)) {
          take(j);
          produced.insert(d.out);
        } else {
          skipped_out.insert(d.out);
        }
      }
    }
    k.name = "k" + std::to_string(s.kernels.size());
    s.kernels.push_back(std::move(k));
    if (ci != i && !taken[i])
      reserved[i] = false;  // (its extern did not take it after all: it runs on its own next)
    else
      i = next_free(i + 1);
  }
  plan_in_place(p, s, domain_of);
  return s;
}

std::string print_schedule(const loop::Program& p, const Schedule& s) {
  std::ostringstream os;
  for (const auto& k : s.kernels) {
    const char* kind = k.kind == Kernel::Kind::Loop ? "loop" : k.kind == Kernel::Kind::RowGroup ? "rows" : k.kind == Kernel::Kind::Gemm ? "gemm" : k.kind == Kernel::Kind::Conv ? "conv" : k.kind == Kernel::Kind::Scatter ? "scatter" : "attention";
    os << k.name << " " << kind << ":";
    for (int c : k.comps) os << " " << p.buffers[p.comps[c].out].name;
    if (k.epilogue >= 0) os << (k.epilogue_keeps ? " (epilogue, result kept)" : " (epilogue)");
    os << "  #";
    for (const auto& o : k.origins) os << " " << o;
    os << "\n";
  }
  return os.str();
}

std::vector<int> kernel_buffers(const loop::Program& p, const Schedule& s, const Kernel& k) {
  std::set<int> bufs;
  for (int ci : k.comps) {
    const Computation& c = p.comps[ci];
    for (int b : reads_of(c)) bufs.insert(b);
    bufs.insert(c.out);
  }
  std::vector<int> out;
  for (int b : bufs)
    if (!s.elided[b]) out.push_back(b);
  return out;
}

std::vector<Lifetime> temp_lifetimes(const loop::Program& p, const Schedule& s) {
  std::vector<int> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
  auto root = [&](int b) { return b < static_cast<int>(s.alias_of.size()) && s.alias_of[b] >= 0 ? s.alias_of[b] : b; };
  for (size_t k = 0; k < s.kernels.size(); ++k)
    for (int ci : s.kernels[k].comps) {
      const Computation& c = p.comps[ci];
      for (int b : reads_of(c)) last[root(b)] = std::max(last[root(b)], static_cast<int>(k));
      int o = root(c.out);
      if (first[o] < 0) first[o] = static_cast<int>(k);
      last[o] = std::max(last[o], static_cast<int>(k));
    }
  std::vector<Lifetime> out;
  std::vector<int> slot(p.buffers.size(), -1);
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].kind == loop::Buffer::Kind::Temp && !s.elided[b] && root(static_cast<int>(b)) == static_cast<int>(b) && first[b] >= 0) {
      slot[b] = static_cast<int>(out.size());
      out.push_back({static_cast<int>(b), first[b], last[b], {}});
    }
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    int r = root(static_cast<int>(b));
    if (r != static_cast<int>(b) && slot[r] >= 0) out[slot[r]].aliases.push_back(static_cast<int>(b));
  }
  return out;
}

}  // namespace ptc::sched
