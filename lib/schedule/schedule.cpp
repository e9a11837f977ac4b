#include "ptc/schedule.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

namespace ptc::sched {
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

bool has_prefix(const std::vector<sym::Expr>& dom, const std::vector<sym::Expr>& prefix) {
  if (dom.size() < prefix.size()) return false;
  for (size_t d = 0; d < prefix.size(); ++d)
    if (!(dom[d] == prefix[d])) return false;
  return true;
}

// Whether a load at `index` of a buffer produced over `producer_domain` (which has prefix
// `outer`) touches only the row of the consumer's current outer index.
bool same_row(const sym::Expr& index, const std::vector<sym::Expr>& producer_domain, const std::vector<sym::Expr>& outer) {
  sym::Expr rowsize = 1;
  for (size_t d = outer.size(); d < producer_domain.size(); ++d) rowsize = rowsize * producer_domain[d];
  sym::Expr within = index - row_major_flat(loop_vars(outer, outer.size()), outer) * rowsize;
  try {
    return sym::prove_ge(within, 0) && sym::prove_le(within, rowsize - 1);
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
    if (group_buffers.count(l.buffer) && !same_row(l.index, domain_of[l.buffer], outer)) return false;
  (void)p;
  return true;
}

bool fits_epilogue(const loop::Program& p, const Computation& gemm, const Computation& e, const std::vector<int>& readers) {
  if (e.kind != Computation::Kind::Pointwise || !(e.domain == gemm.domain)) return false;
  if (p.buffers[gemm.out].dtype != DType::Float32 || p.buffers[e.out].dtype != DType::Float32) return false;
  if (readers[gemm.out] != 1) return false;
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

}  // namespace

Schedule schedule(const loop::Program& p) {
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
  size_t i = 0;
  while (i < p.comps.size()) {
    const Computation& c = p.comps[i];
    Kernel k;
    k.comps.push_back(static_cast<int>(i));
    add_origin(k, c);
    if (c.kind == Computation::Kind::Extern) {
      k.kind = c.extern_kind == loop::ExternKind::Gemm ? Kernel::Kind::Gemm : Kernel::Kind::Conv;
      if (k.kind == Kernel::Kind::Gemm && i + 1 < p.comps.size() && fits_epilogue(p, c, p.comps[i + 1], readers)) {
        k.epilogue = static_cast<int>(i + 1);
        k.comps.push_back(k.epilogue);
        add_origin(k, p.comps[i + 1]);
        s.elided[c.out] = true;
        ++i;
      }
    } else if (c.kind == Computation::Kind::Reduction) {
      k.kind = Kernel::Kind::RowGroup;
      k.outer = c.domain;
      std::set<int> produced{c.out};
      while (i + 1 < p.comps.size() && fits_row_group(p, p.comps[i + 1], k.outer, produced, domain_of)) {
        ++i;
        k.comps.push_back(static_cast<int>(i));
        produced.insert(p.comps[i].out);
        add_origin(k, p.comps[i]);
      }
    }
    k.name = "k" + std::to_string(s.kernels.size());
    s.kernels.push_back(std::move(k));
    ++i;
  }
  return s;
}

std::string print_schedule(const loop::Program& p, const Schedule& s) {
  std::ostringstream os;
  for (const auto& k : s.kernels) {
    const char* kind = k.kind == Kernel::Kind::Loop ? "loop" : k.kind == Kernel::Kind::RowGroup ? "rows" : k.kind == Kernel::Kind::Gemm ? "gemm" : "conv";
    os << k.name << " " << kind << ":";
    for (int c : k.comps) os << " " << p.buffers[p.comps[c].out].name;
    if (k.epilogue >= 0) os << " (epilogue)";
    os << "  #";
    for (const auto& o : k.origins) os << " " << o;
    os << "\n";
  }
  return os.str();
}

std::vector<Lifetime> temp_lifetimes(const loop::Program& p, const Schedule& s) {
  std::vector<int> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
  for (size_t k = 0; k < s.kernels.size(); ++k)
    for (int ci : s.kernels[k].comps) {
      const Computation& c = p.comps[ci];
      for (int b : reads_of(c)) last[b] = static_cast<int>(k);
      if (first[c.out] < 0) first[c.out] = static_cast<int>(k);
      last[c.out] = std::max(last[c.out], static_cast<int>(k));
    }
  std::vector<Lifetime> out;
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].kind == loop::Buffer::Kind::Temp && !s.elided[b] && first[b] >= 0)
      out.push_back({static_cast<int>(b), first[b], last[b]});
  return out;
}

}  // namespace ptc::sched
