// The loop IR's reference interpreter: slow, simple, and bounds-checked on every load, so that
// lowering and scheduling can be tested without compiling anything.
#include <cmath>
#include <cstring>
#include <limits>

#include "ptc/error.h"
#include "ptc/lower.h"
#include "runtime/cpu/ptc_half.h"  // the float16 / bfloat16 roundings the generated code does
#include "runtime/cpu/ptc_philox.h"

namespace ptc {
namespace {

using loop::Buffer;
using loop::Computation;
using loop::ExprRef;
using loop::Op;

double round_to(double v, DType dt) {
  if (dt == DType::Float32) return static_cast<float>(v);
  if (dt == DType::Float64) return v;
  if (dt == DType::Float16) return ptc_rt::half_bits_to_float(ptc_rt::float_to_half_bits(static_cast<float>(v)));
  if (dt == DType::BFloat16) return ptc_rt::bfloat16_bits_to_float(ptc_rt::float_to_bfloat16_bits(static_cast<float>(v)));
  if (dt == DType::Bool) return v != 0 ? 1 : 0;
  if (std::isnan(v)) return 0;
  return std::trunc(v);
}

class Interp {
 public:
  Interp(const loop::Program& p, const Graph& g, const std::map<std::string, int64_t>& symbols) : p_(p), g_(g), env_(symbols) {}

  std::vector<std::vector<std::byte>> run(const std::vector<std::vector<std::byte>>& inputs) {
    data_.resize(p_.buffers.size());
    for (size_t b = 0; b < p_.buffers.size(); ++b) {
      const Buffer& buf = p_.buffers[b];
      size_t item = dtype_size(buf.dtype);
      if (buf.kind == Buffer::Kind::Input) {
        const auto& bytes = inputs.at(static_cast<size_t>(buf.io_index));
        size_t n = static_cast<size_t>(eval(buf.numel()));
        if (bytes.size() != n * item) user_error("input ", buf.io_index, " has ", bytes.size(), " bytes, expected ", n * item);
        for (size_t i = 0; i < n; ++i) data_[b].push_back(read_element(bytes.data() + i * item, buf.dtype));
      } else if (buf.kind == Buffer::Kind::Weight || buf.kind == Buffer::Kind::State) {
        const TensorData& td = g_.weights.at(buf.weight);
        for (size_t i = 0; i + item <= td.storage_bytes; i += item) data_[b].push_back(read_element(td.storage + i, buf.dtype));
      } else {
        data_[b].assign(static_cast<size_t>(eval(buf.numel())), std::numeric_limits<double>::quiet_NaN());
      }
    }
    for (const Computation& c : p_.comps) run(c);
    std::vector<std::vector<std::byte>> outs;
    std::vector<int> results = p_.outputs;  // then each state's new contents
    for (size_t k = 0; k < p_.states.size(); ++k) results.push_back(p_.state_next[k] >= 0 ? p_.state_next[k] : p_.states[k]);
    for (int b : results) {
      const Buffer& buf = p_.buffers[b];
      size_t item = dtype_size(buf.dtype);
      std::vector<std::byte> bytes(data_[b].size() * item);
      for (size_t i = 0; i < data_[b].size(); ++i) write_element(bytes.data() + i * item, buf.dtype, data_[b][i]);
      outs.push_back(std::move(bytes));
    }
    return outs;
  }

 private:
  int64_t eval(const sym::Expr& e) { return sym::evaluate(e, env_); }

  // Calls f for every index of `sizes` with loop variables named `prefix`i set in env_.
  template <class F>
  void for_each(const std::vector<sym::Expr>& sizes, char prefix, F&& f) {
    std::vector<int64_t> n;
    for (const auto& s : sizes) n.push_back(eval(s));
    for (int64_t v : n)
      if (v == 0) return;
    std::vector<int64_t> idx(n.size(), 0);
    std::vector<std::string> names;
    for (size_t d = 0; d < n.size(); ++d) names.push_back(prefix + std::to_string(d));
    while (true) {
      for (size_t d = 0; d < n.size(); ++d) env_[names[d]] = idx[d];
      f(idx);
      size_t d = n.size();
      while (d > 0) {
        --d;
        if (++idx[d] < n[d]) break;
        idx[d] = 0;
        if (d == 0) return;
      }
      if (n.empty()) return;
    }
  }

  double value(const ExprRef& e) {
    switch (e->op) {
      case Op::Load: {
        int64_t i = eval(e->index);
        const auto& d = data_.at(static_cast<size_t>(e->buffer));
        PTC_CHECK(i >= 0 && static_cast<size_t>(i) < d.size(), "load of ", p_.buffers[e->buffer].name, "[", i,
                  "] out of range (", d.size(), " elements), index ", e->index.str());
        return d[i];
      }
      case Op::LoadAt: {
        int64_t i = eval(e->index) + static_cast<int64_t>(value(e->args[0]));
        const auto& d = data_.at(static_cast<size_t>(e->buffer));
        PTC_CHECK(i >= 0 && static_cast<size_t>(i) < d.size(), "indirect load of ", p_.buffers[e->buffer].name, "[", i,
                  "] out of range (", d.size(), " elements)");
        return d[i];
      }
      case Op::Const: return e->value;
      case Op::IndexVal: return static_cast<double>(eval(e->index));
      case Op::Where: return value(e->args[0]) != 0 ? value(e->args[1]) : value(e->args[2]);
      case Op::Select: {
        double c = value(e->args[0]), a = value(e->args[1]), b = value(e->args[2]);  // both evaluated
        return c != 0 ? a : b;
      }
      case Op::Cast: return round_to(value(e->args[0]), e->dtype);
      default: break;
    }
    double a = value(e->args[0]);
    if (e->args.size() == 1) {
      switch (e->op) {
        case Op::Neg: return -a;
        case Op::Abs: return std::fabs(a);
        case Op::Exp: return std::exp(a);
        case Op::Log: return std::log(a);
        case Op::Log1p: return std::log1p(a);
        case Op::Sqrt: return std::sqrt(a);
        case Op::Rsqrt: return 1.0 / std::sqrt(a);
        case Op::Sin: return std::sin(a);
        case Op::Cos: return std::cos(a);
        case Op::Tanh: return std::tanh(a);
        case Op::Erf: return std::erf(a);
        case Op::Sigmoid: return 1.0 / (1.0 + std::exp(-a));
        case Op::Relu: return a > 0 ? a : 0;
        case Op::Floor: return std::floor(a);
        case Op::Ceil: return std::ceil(a);
        case Op::Round: return std::nearbyint(a);
        case Op::Sign: return a > 0 ? 1 : a < 0 ? -1 : 0;
        case Op::Reciprocal: return 1.0 / a;
        case Op::Not: return a == 0 ? 1 : 0;
        case Op::IsNan: return std::isnan(a) ? 1 : 0;
        case Op::IsInf: return std::isinf(a) ? 1 : 0;
        default: break;
      }
    }
    double b = value(e->args[1]);
    bool integral = !dtype_is_float(e->args[0]->dtype);
    switch (e->op) {
      case Op::Add: return a + b;
      case Op::Sub: return a - b;
      case Op::Mul: return a * b;
      case Op::Div: return integral && !dtype_is_float(e->dtype) ? std::trunc(a / b) : a / b;
      case Op::Pow: return std::pow(a, b);
      case Op::Max: return (std::isnan(a) || a > b) ? a : b;
      case Op::Min: return (std::isnan(a) || a < b) ? a : b;
      case Op::FloorDiv: return std::floor(a / b);
      case Op::Mod: return a - b * std::floor(a / b);
      case Op::Rand:
        return ptc_rt::philox_uniform(static_cast<uint64_t>(static_cast<int64_t>(a)), static_cast<uint64_t>(static_cast<int64_t>(b)),
                                      static_cast<uint32_t>(e->value));
      case Op::CheckIndex:
        if (!(a >= 0 && a < b))
          user_error("node '", e->origin, "': index ", static_cast<int64_t>(a), " is out of range for a dimension of size ",
                     static_cast<int64_t>(b));
        return a;
      case Op::Eq: return a == b;
      case Op::Ne: return a != b;
      case Op::Lt: return a < b;
      case Op::Le: return a <= b;
      case Op::Gt: return a > b;
      case Op::Ge: return a >= b;
      case Op::And: return (a != 0) && (b != 0);
      case Op::Or: return (a != 0) || (b != 0);
      default: break;
    }
    PTC_CHECK(false, "interpreter: unhandled op ", loop::op_name(e->op));
  }

  // Element (indices) of a strided view.
  double at(const loop::View& v, const std::vector<int64_t>& idx) {
    int64_t off = eval(v.offset);
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * eval(v.strides[d]);
    const auto& data = data_.at(static_cast<size_t>(v.buffer));
    PTC_CHECK(off >= 0 && static_cast<size_t>(off) < data.size(), "extern operand ", p_.buffers[v.buffer].name, " read out of range");
    return data[off];
  }

  void run(const Computation& c) {
    auto& out = data_[c.out];
    DType dt = p_.buffers[c.out].dtype;
    size_t pos = 0;
    switch (c.kind) {
      case Computation::Kind::Pointwise:
        for_each(c.domain, 'x', [&](const std::vector<int64_t>&) { out.at(pos++) = round_to(value(c.body), dt); });
        break;
      case Computation::Kind::Reduction:
        for_each(c.domain, 'x', [&](const std::vector<int64_t>&) {
          double acc = 0, best = 0;
          int64_t arg = 0, k = 0;
          bool first = true;
          switch (c.reduce) {
            case loop::ReduceOp::Max: acc = -std::numeric_limits<double>::infinity(); break;
            case loop::ReduceOp::Min: acc = std::numeric_limits<double>::infinity(); break;
            case loop::ReduceOp::Prod: case loop::ReduceOp::All: acc = 1; break;
            default: break;
          }
          for_each(c.reduce_domain, 'r', [&](const std::vector<int64_t>&) {
            double v = value(c.body);
            switch (c.reduce) {
              case loop::ReduceOp::Sum: acc += v; break;
              case loop::ReduceOp::Max: acc = (std::isnan(v) || v > acc) ? v : acc; break;
              case loop::ReduceOp::Min: acc = (std::isnan(v) || v < acc) ? v : acc; break;
              case loop::ReduceOp::Prod: acc *= v; break;
              case loop::ReduceOp::Any: acc = acc != 0 || v != 0; break;
              case loop::ReduceOp::All: acc = acc != 0 && v != 0; break;
              case loop::ReduceOp::ArgMax: if (first || v > best || (std::isnan(v) && !std::isnan(best))) { best = v; arg = k; } break;
              case loop::ReduceOp::ArgMin: if (first || v < best || (std::isnan(v) && !std::isnan(best))) { best = v; arg = k; } break;
            }
            first = false;
            ++k;
          });
          if (c.reduce == loop::ReduceOp::ArgMax || c.reduce == loop::ReduceOp::ArgMin) acc = static_cast<double>(arg);
          out.at(pos++) = round_to(acc, dt);
        });
        break;
      case Computation::Kind::Extern:
        if (c.extern_kind == loop::ExternKind::Gemm) gemm(c, out, dt);
        else if (c.extern_kind == loop::ExternKind::Attention) attention(c, out, dt);
        else if (c.extern_kind == loop::ExternKind::Scatter) scatter(c, out, dt);
        else if (c.extern_kind == loop::ExternKind::ConvWeightGrad) conv_weight_grad(c, out, dt);
        else if (c.extern_kind == loop::ExternKind::ConvInputGrad) conv_input_grad(c, out, dt);
        else if (c.extern_kind == loop::ExternKind::MaxPoolGrad) max_pool_grad(c, out, dt);
        else conv(c, out, dt);
        break;
    }
  }

  void gemm(const Computation& c, std::vector<double>& out, DType dt) {
    const loop::View& a = c.operands[0];
    const loop::View& b = c.operands[1];
    size_t r = c.domain.size();
    int64_t K = eval(a.sizes[r - 1]);
    size_t pos = 0;
    for_each(c.domain, 'x', [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> ia = idx, ib = idx;
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        ia[r - 1] = k;
        ib[r - 2] = k;
        acc += at(a, ia) * at(b, ib);
      }
      out.at(pos++) = round_to(acc, dt);
    });
  }

  void scatter(const Computation& c, std::vector<double>& out, DType dt) {
    const loop::ScatterAttrs& sa = c.as<loop::ScatterAttrs>();
    const size_t first = sa.in_place ? 0 : 1;
    const loop::View &index = c.operands[first], &src = c.operands[first + 1];
    const size_t dim = static_cast<size_t>(sa.dim);
    std::vector<int64_t> n;
    for (const auto& s : c.domain) n.push_back(eval(s));
    size_t pos = 0;
    if (!sa.in_place) for_each(c.domain, 'x', [&](const std::vector<int64_t>& idx) { out.at(pos++) = at(c.operands[0], idx); });
    for_each(index.sizes, 'x', [&](const std::vector<int64_t>& idx) {
      int64_t k = static_cast<int64_t>(at(index, idx));
      if (k < 0 || k >= (n.empty() ? 1 : n[dim]))
        user_error("node '", c.origin, "': index ", k, " is out of range for a dimension of size ", n.empty() ? 1 : n[dim]);
      int64_t off = 0;
      for (size_t d = 0; d < n.size(); ++d) off = off * n[d] + (d == dim ? k : idx[d]);
      double& o = out.at(static_cast<size_t>(off));
      o = round_to(sa.accumulate ? o + at(src, idx) : at(src, idx), dt);
    });
  }

  void conv(const Computation& c, std::vector<double>& out, DType dt) {
    const loop::View& x = c.operands[0];
    const loop::View& w = c.operands[1];
    int64_t C = eval(x.sizes[1]), H = eval(x.sizes[2]), W = eval(x.sizes[3]);
    int64_t O = eval(w.sizes[0]), Cg = eval(w.sizes[1]), KH = eval(w.sizes[2]), KW = eval(w.sizes[3]);
    const loop::ConvAttrs& a = c.as<loop::ConvAttrs>();
    const int64_t sh = a.stride[0], sw = a.stride[1], ph = a.padding[0], pw = a.padding[1], dh = a.dilation[0], dw = a.dilation[1];
    PTC_CHECK(Cg * a.groups == C, "conv channel mismatch");
    int64_t Og = O / a.groups;
    const bool nhwc = a.nhwc;  // domain [N, OH, OW, O]
    size_t pos = 0;
    for_each(c.domain, 'x', [&](const std::vector<int64_t>& i) {
      int64_t n = i[0], o = nhwc ? i[3] : i[1], oh = nhwc ? i[1] : i[2], ow = nhwc ? i[2] : i[3], g = o / Og;
      double acc = c.operands.size() > 2 ? at(c.operands[2], {o}) : 0;
      for (int64_t ci = 0; ci < Cg; ++ci)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            acc += at(x, {n, g * Cg + ci, ih, iw}) * at(w, {o, ci, kh, kw});
          }
      out.at(pos++) = round_to(acc, dt);
    });
  }

  // dw[o, ci, kh, kw] = sum over n, oh, ow of dy[g, o % Og, n, oh, ow] x[n, g Cg + ci, ih, iw].
  void conv_weight_grad(const Computation& c, std::vector<double>& out, DType dt) {
    const loop::View& x = c.operands[0];
    const loop::View& dy = c.operands[1];
    const int64_t N = eval(x.sizes[0]), H = eval(x.sizes[2]), W = eval(x.sizes[3]);
    const int64_t OH = eval(dy.sizes[3]), OW = eval(dy.sizes[4]), Og = eval(dy.sizes[1]);
    const loop::ConvAttrs& a = c.as<loop::ConvAttrs>();
    const int64_t sh = a.stride[0], sw = a.stride[1], ph = a.padding[0], pw = a.padding[1], dh = a.dilation[0], dw = a.dilation[1];
    const int64_t Cg = eval(c.domain[1]);
    size_t pos = 0;
    for_each(c.domain, 'x', [&](const std::vector<int64_t>& i) {
      const int64_t o = i[0], ci = i[1], kh = i[2], kw = i[3], g = o / Og;
      double acc = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            acc += at(dy, {g, o % Og, n, oh, ow}) * at(x, {n, g * Cg + ci, ih, iw});
          }
      out.at(pos++) = round_to(acc, dt);
    });
  }

  // dx[n, g Cg + ci, ih, iw] = sum over o, kh, kw of dy[g, o, n, oh, ow] w[g Og + o, ci, kh, kw]
  // where ih = oh sh - ph + kh dh and iw = ow sw - pw + kw dw.
  void conv_input_grad(const Computation& c, std::vector<double>& out, DType dt) {
    const loop::View& w = c.operands[0];
    const loop::View& dy = c.operands[1];
    const int64_t Og = eval(dy.sizes[1]), OH = eval(dy.sizes[3]), OW = eval(dy.sizes[4]);
    const int64_t Cg = eval(w.sizes[1]), KH = eval(w.sizes[2]), KW = eval(w.sizes[3]);
    const loop::ConvAttrs& a = c.as<loop::ConvAttrs>();
    const int64_t sh = a.stride[0], sw = a.stride[1], ph = a.padding[0], pw = a.padding[1], dh = a.dilation[0], dw = a.dilation[1];
    size_t pos = 0;
    for_each(c.domain, 'x', [&](const std::vector<int64_t>& i) {
      const int64_t n = i[0], g = i[1] / Cg, ci = i[1] % Cg;
      double acc = 0;
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t th = i[2] + ph - kh * dh, tw = i[3] + pw - kw * dw;
          if (th < 0 || tw < 0 || th % sh || tw % sw || th / sh >= OH || tw / sw >= OW) continue;
          for (int64_t o = 0; o < Og; ++o) acc += at(dy, {g, o, n, th / sh, tw / sw}) * at(w, {g * Og + o, ci, kh, kw});
        }
      out.at(pos++) = round_to(acc, dt);
    });
  }

  // Max pooling's input gradient: each window's dy at its first maximum (the first NaN, if any).
  void max_pool_grad(const Computation& c, std::vector<double>& out, DType dt) {
    const loop::View &x = c.operands[0], &dy = c.operands[1];
    const int64_t N = eval(c.domain[0]), C = eval(c.domain[1]), H = eval(c.domain[2]), W = eval(c.domain[3]);
    const int64_t OH = eval(dy.sizes[2]), OW = eval(dy.sizes[3]);
    const loop::MaxPoolGradAttrs& a = c.as<loop::MaxPoolGradAttrs>();
    const int64_t sh = a.stride[0], sw = a.stride[1], ph = a.padding[0], pw = a.padding[1], dh = a.dilation[0], dw = a.dilation[1];
    const int64_t KH = a.kernel[0], KW = a.kernel[1];
    std::vector<double> acc(out.size(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t best = -1;
            double bv = 0;
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const double v = at(x, {n, ch, ih, iw});
                if (best < 0 || v > bv || (std::isnan(v) && !std::isnan(bv))) {
                  best = ih * W + iw;
                  bv = v;
                }
              }
            if (best >= 0) acc.at(static_cast<size_t>((n * C + ch) * H * W + best)) += at(dy, {n, ch, oh, ow});
          }
    for (size_t i = 0; i < out.size(); ++i) out[i] = round_to(acc[i], dt);
  }

  // softmax(scale * q k^T + mask) v, one query row at a time (AttentionAttrs).
  void attention(const Computation& c, std::vector<double>& out, DType dt) {
    const loop::View &q = c.operands[0], &k = c.operands[1], &v = c.operands[2];
    const size_t r = c.domain.size();
    const int64_t Tk = eval(k.sizes[r - 2]), D = eval(q.sizes[r - 1]);
    const loop::AttentionAttrs& a = c.as<loop::AttentionAttrs>();
    const double scale = a.scale;
    std::vector<double> prob(static_cast<size_t>(Tk));
    size_t pos = 0;
    // heads_inner / time_outer: the output is stored [B, T, H, Dv] / [T, B, H, Dv]; the operands
    // are indexed [B, H, T, .].
    for_each(c.domain, 'x', [&](const std::vector<int64_t>& stored) {
      const std::vector<int64_t> idx = a.heads_inner  ? std::vector<int64_t>{stored[0], stored[2], stored[1], stored[3]}
                                       : a.time_outer ? std::vector<int64_t>{stored[1], stored[2], stored[0], stored[3]}
                                                      : stored;
      if (idx[r - 1] == 0) {  // a new query row: its probabilities
        const int64_t i = idx[r - 2];
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          std::vector<int64_t> iq = idx, ik = idx;
          ik[r - 2] = j;
          if (r == 4) ik[1] /= a.kv_group;  // grouped-query attention: query head h reads key head h / kv_group
          double s = 0;
          for (int64_t d = 0; d < D; ++d) {
            iq[r - 1] = ik[r - 1] = d;
            s += at(q, iq) * at(k, ik);
          }
          s *= scale;
          if (c.operands.size() > 3) {
            std::vector<int64_t> im = idx;
            im[r - 1] = j;
            const double m = at(c.operands[3], im);
            if (a.mask_kind == 3) s += m;
            else if ((m != 0) != (a.mask_kind == 1)) s = -INFINITY;
          }
          if (a.causal && j > i) s = -INFINITY;
          prob[static_cast<size_t>(j)] = s;
          mx = std::max(mx, s);
        }
        double sum = 0;
        for (double& e : prob) sum += (e = mx == -INFINITY ? 0 : std::exp(e - mx));
        for (double& e : prob) e = sum == 0 ? (a.masked_rows_zero ? 0.0 : NAN) : e / sum;
      }
      double acc = 0;
      std::vector<int64_t> iv = idx;
      if (r == 4) iv[1] /= a.kv_group;
      for (int64_t j = 0; j < Tk; ++j) {
        iv[r - 2] = j;
        acc += prob[static_cast<size_t>(j)] * at(v, iv);
      }
      out.at(pos++) = round_to(acc, dt);
    });
  }

  const loop::Program& p_;
  const Graph& g_;
  std::map<std::string, int64_t> env_;
  std::vector<std::vector<double>> data_;
};

}  // namespace

std::vector<std::vector<std::byte>> interpret(const loop::Program& p, const Graph& g,
                                              const std::vector<std::vector<std::byte>>& inputs,
                                              const std::map<std::string, int64_t>& symbols) {
  return Interp(p, g, symbols).run(inputs);
}

}  // namespace ptc
