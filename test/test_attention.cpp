// The fused flash-style attention of generated CPU code (lib/runtime/cpu/ptc_attention.h)
// against a double-precision softmax(q k^T * scale + mask) v: query and key blocks (Tq > 64,
// Tk > 256), Tq != Tk, causal, bool masks (keep / drop where true), additive float masks,
// broadcast (stride 0) masks, strided q / k / v, rows whose keys are all masked (zeros, as
// torch's scaled_dot_product_attention gives, or NaN, as its fused multi-head attention gives),
// masks that keep a window of keys per row (the key range is narrowed to what a block keeps) and
// grouped-query attention (kv_group), and outputs stored [B, T, H, Dv] or [T, B, H, Dv]. The same
// cases on AMX bf16 tiles (attention_amx), where this CPU has AMX, with float or bf16 buffers, and
// on bf16 buffers widened to the float32 kernel (the path of CPUs without AMX).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/ptc_attention.h"

namespace {

struct Problem {
  int64_t B, H, Tq, Tk, D, Dv;
  int mask_kind;  // ptc_rt::kMask*
  bool causal;
  bool strided;   // q, k, v as [B, T, H, D] buffers viewed as [B, H, T, D]
  int64_t group = 1;    // grouped-query attention: k and v have H / group heads
  bool window = false;  // bool masks keep (drop) a window of keys per row, some rows none
};

enum class Path { F32, Amx, AmxBf16Io, WidenedBf16Io };
enum { kBHTD = 0, kBTHD = 1, kTBHD = 2 };  // o's layouts: contiguous, o_heads_inner, o_time_outer

// max |got - ref| / max |ref|; NaN where the reference is NaN must be NaN.
// Amx: q, k and v hold bf16 values, and the AMX kernel (attention_amx) computes; AmxBf16Io and
// WidenedBf16Io: q, k, v and o are bf16 buffers (AttentionArgs::bf16_io) on the AMX kernel or the
// float32 one on widened operands.
double run(const Problem& p, std::mt19937& rng, bool all_masked_row = false, bool masked_rows_zero = false, Path path = Path::F32,
           int layout = kBHTD) {
  const bool amx = path != Path::F32;
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (auto& e : v) {
      e = dist(rng);
      if (amx) {
        e = ptc_rt::round_bfloat16(e);
      }
    }
  };
  std::vector<float> q, k, v, o(static_cast<size_t>(p.B * p.H * p.Tq * p.Dv), -7.f), fmask;
  std::vector<uint8_t> bmask;
  fill(q, static_cast<size_t>(p.B * p.H * p.Tq * p.D));
  const int64_t Hkv = p.H / p.group;
  fill(k, static_cast<size_t>(p.B * Hkv * p.Tk * p.D));
  fill(v, static_cast<size_t>(p.B * Hkv * p.Tk * p.Dv));
  ptc_rt::AttentionArgs a{};
  auto strides = [&](int64_t T, int64_t D, int64_t H, int64_t* s) {
    if (p.strided) {  // [B, T, H, D]
      s[0] = T * H * D; s[1] = D; s[2] = H * D; s[3] = 1;
    } else {
      s[0] = H * T * D; s[1] = T * D; s[2] = D; s[3] = 1;
    }
  };
  a.q = q.data(); strides(p.Tq, p.D, p.H, a.qs);
  a.k = k.data(); strides(p.Tk, p.D, Hkv, a.ks);
  a.v = v.data(); strides(p.Tk, p.Dv, Hkv, a.vs);
  a.kv_group = p.group;
  a.o = o.data();
  a.o_heads_inner = layout == kBTHD;
  a.o_time_outer = layout == kTBHD;
  a.B = p.B; a.H = p.H; a.Tq = p.Tq; a.Tk = p.Tk; a.D = p.D; a.Dv = p.Dv;
  a.scale = 1.f / std::sqrt(static_cast<float>(p.D));
  a.causal = p.causal;
  a.mask_kind = p.mask_kind;
  a.masked_rows_zero = masked_rows_zero;
  // Masks are [B, 1, Tq, Tk] (broadcast over heads: stride 0).
  a.ms[0] = p.Tq * p.Tk; a.ms[1] = 0; a.ms[2] = p.Tk; a.ms[3] = 1;
  if (p.mask_kind == ptc_rt::kMaskAdd) {
    fill(fmask, static_cast<size_t>(p.B * p.Tq * p.Tk));
    a.mask = fmask.data();
  } else if (p.mask_kind != ptc_rt::kMaskNone) {
    bmask.resize(static_cast<size_t>(p.B * p.Tq * p.Tk));
    for (auto& e : bmask) e = rng() % 4 != 0;  // 3 in 4 true
    if (p.window)  // row i keeps keys [lo, hi) (Drop: drops all but those); every 9th row keeps none
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t i = 0; i < p.Tq; ++i) {
          const int64_t lo = (i * 37) % p.Tk, hi = i % 9 == 4 ? lo : std::min(p.Tk, lo + 1 + (i * 13) % 50);
          for (int64_t j = 0; j < p.Tk; ++j)
            bmask[static_cast<size_t>((b * p.Tq + i) * p.Tk + j)] = (j >= lo && j < hi) == (p.mask_kind == ptc_rt::kMaskKeep);
        }
    if (all_masked_row)  // row 1 of image 0: no key allowed
      for (int64_t j = 0; j < p.Tk; ++j) bmask[static_cast<size_t>(p.Tk + j)] = p.mask_kind == ptc_rt::kMaskKeep ? 0 : 1;
    a.mask = bmask.data();
  }
  std::vector<uint16_t> qh, kh, vh, oh;
  if (path == Path::AmxBf16Io || path == Path::WidenedBf16Io) {
    auto narrow = [](const std::vector<float>& x, std::vector<uint16_t>& h) {
      h.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) h[i] = ptc_rt::float_to_bfloat16_bits(x[i]);
    };
    narrow(q, qh), narrow(k, kh), narrow(v, vh), narrow(o, oh);
    a.q = qh.data(), a.k = kh.data(), a.v = vh.data(), a.o = oh.data();
    a.bf16_io = true;
  }
  if (path == Path::Amx)
    ptc_rt::attention_amx(a);
  else if (path == Path::AmxBf16Io)
    ptc_rt::attention_amx(a);
  else if (path == Path::WidenedBf16Io)
    ptc_rt::attention_detail::attention_widened(a);
  else
    ptc_rt::attention(a);
  if (a.bf16_io)
    for (size_t i = 0; i < o.size(); ++i) o[i] = ptc_rt::bfloat16_bits_to_float(oh[i]);

  double worst = 0, scale = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Tq; ++i) {
        std::vector<double> s(static_cast<size_t>(p.Tk));
        double mx = -INFINITY;
        for (int64_t j = 0; j < p.Tk; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < p.D; ++d)
            acc += double(q[b * a.qs[0] + h * a.qs[1] + i * a.qs[2] + d]) * k[b * a.ks[0] + (h / p.group) * a.ks[1] + j * a.ks[2] + d];
          acc *= a.scale;
          const size_t mi = static_cast<size_t>((b * p.Tq + i) * p.Tk + j);
          if (p.mask_kind == ptc_rt::kMaskAdd) acc += fmask[mi];
          if (p.mask_kind == ptc_rt::kMaskKeep && !bmask[mi]) acc = -INFINITY;
          if (p.mask_kind == ptc_rt::kMaskDrop && bmask[mi]) acc = -INFINITY;
          if (p.causal && j > i) acc = -INFINITY;
          s[static_cast<size_t>(j)] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = mx == -INFINITY ? 0 : std::exp(e - mx));
        for (int64_t d = 0; d < p.Dv; ++d) {
          double ref = 0;
          for (int64_t j = 0; j < p.Tk; ++j)
            ref += s[static_cast<size_t>(j)] * v[b * a.vs[0] + (h / p.group) * a.vs[1] + j * a.vs[2] + d];
          const int64_t at = layout == kBTHD ? ((b * p.Tq + i) * p.H + h) * p.Dv
                             : layout == kTBHD ? ((i * p.B + b) * p.H + h) * p.Dv
                                               : ((b * p.H + h) * p.Tq + i) * p.Dv;
          const float got = o[static_cast<size_t>(at + d)];
          if (sum == 0) {  // a row with no key: zeros (SDPA) or NaN (fused MHA)
            if (masked_rows_zero ? got != 0.f : !std::isnan(got)) return INFINITY;
            continue;
          }
          ref /= sum;
          if (std::isnan(got)) return INFINITY;
          worst = std::max(worst, std::abs(got - ref));
          scale = std::max(scale, std::abs(ref));
        }
      }
  return worst / std::max(scale, 1e-30);
}

}  // namespace

// The cases both kernels run.
static const std::vector<Problem>& cases() {
  static const std::vector<Problem> all = {
      {2, 3, 16, 16, 16, 16, ptc_rt::kMaskNone, false, false},
      {1, 2, 130, 300, 32, 24, ptc_rt::kMaskNone, false, false},   // several query and key blocks, Dv != D
      {2, 2, 100, 100, 16, 16, ptc_rt::kMaskNone, true, false},    // causal across blocks
      {1, 1, 7, 600, 8, 8, ptc_rt::kMaskNone, true, false},        // causal, Tq < Tk (top-left aligned)
      {2, 2, 33, 270, 16, 16, ptc_rt::kMaskKeep, false, false},
      {2, 2, 33, 270, 16, 16, ptc_rt::kMaskDrop, false, true},     // strided q / k / v
      {1, 3, 70, 70, 16, 16, ptc_rt::kMaskAdd, true, true},
      {1, 4, 1, 512, 16, 16, ptc_rt::kMaskKeep, false, false, 2, true},    // a decode step: GQA, one row, a window
      {2, 6, 90, 600, 8, 8, ptc_rt::kMaskKeep, false, true, 3, true},      // windows across query and key blocks
      {1, 2, 70, 300, 8, 8, ptc_rt::kMaskDrop, false, false, 1, true},
      {1, 4, 65, 300, 8, 8, ptc_rt::kMaskNone, true, false, 4, false},     // GQA, causal
  };
  return all;
}

TEST_CASE("fused attention matches softmax(q k^T * scale + mask) v", "[attention]") {
  std::mt19937 rng(5);
  for (const Problem& p : cases()) {
    INFO("B H Tq Tk D Dv = " << p.B << " " << p.H << " " << p.Tq << " " << p.Tk << " " << p.D << " " << p.Dv << ", mask "
                             << p.mask_kind << ", causal " << p.causal << ", strided " << p.strided << ", group " << p.group
                             << ", window " << p.window);
    CHECK(run(p, rng, false, p.window) < 1e-5);
  }
  // A row with every key masked is NaN or zeros (and the other rows are right).
  CHECK(run({1, 2, 5, 300, 8, 8, ptc_rt::kMaskKeep, false, false}, rng, true) < 1e-5);
  CHECK(run({1, 2, 5, 40, 8, 8, ptc_rt::kMaskDrop, false, false}, rng, true) < 1e-5);
  CHECK(run({1, 2, 5, 300, 8, 8, ptc_rt::kMaskKeep, false, false}, rng, true, true) < 1e-5);
  CHECK(run({1, 2, 5, 40, 8, 8, ptc_rt::kMaskDrop, false, false}, rng, true, true) < 1e-5);
}

// --precision bf16 on AMX CPUs (AttentionArgs::bf16_values): the products on bf16 tiles, P rounded
// to bf16 (a relative error of about 2^-9 per weight), against the same double reference.
TEST_CASE("fused attention on AMX bf16 tiles matches softmax(q k^T * scale + mask) v", "[attention][amx]") {
  if (!ptc_rt::amx::ready()) {
    WARN("this CPU (or OS) offers no AMX: the AMX attention path is not exercised here");
    return;
  }
  std::mt19937 rng(7);
  std::vector<Problem> amx_cases = cases();
  amx_cases.push_back({1, 12, 128, 128, 64, 64, ptc_rt::kMaskNone, false, false});  // BERT-base's heads
  amx_cases.push_back({1, 2, 197, 197, 80, 72, ptc_rt::kMaskNone, false, true});    // D, Dv not multiples of 32 / 64, strided
  amx_cases.push_back({2, 2, 40, 50, 7, 5, ptc_rt::kMaskNone, true, false});    // odd D and Dv, causal
  for (const Problem& p : amx_cases) {
    INFO("B H Tq Tk D Dv = " << p.B << " " << p.H << " " << p.Tq << " " << p.Tk << " " << p.D << " " << p.Dv << ", mask "
                             << p.mask_kind << ", causal " << p.causal << ", strided " << p.strided << ", group " << p.group
                             << ", window " << p.window);
    CHECK(run(p, rng, false, p.window, Path::Amx) < 1e-2);
    CHECK(run(p, rng, false, p.window, Path::AmxBf16Io) < 1e-2);  // bf16 buffers (AttentionArgs::bf16_io)
  }
  CHECK(run({1, 2, 5, 300, 8, 8, ptc_rt::kMaskKeep, false, false}, rng, true, false, Path::Amx) < 1e-2);
  CHECK(run({1, 2, 5, 40, 8, 8, ptc_rt::kMaskDrop, false, false}, rng, true, true, Path::Amx) < 1e-2);
  CHECK(run({1, 2, 5, 40, 8, 8, ptc_rt::kMaskDrop, false, false}, rng, true, true, Path::AmxBf16Io) < 1e-2);
}

// Outputs stored [B, T, H, Dv] (o_heads_inner) or [T, B, H, Dv] (o_time_outer: nn.MultiheadAttention's
// layout), on the float32 kernel and, where this CPU has AMX, on the tiles.
TEST_CASE("fused attention writes its output in the three layouts", "[attention]") {
  std::mt19937 rng(9);
  for (int layout : {kBTHD, kTBHD}) {
    INFO("layout " << layout);
    CHECK(run({2, 3, 70, 300, 16, 24, ptc_rt::kMaskNone, false, true}, rng, false, true, Path::F32, layout) < 1e-5);
    CHECK(run({2, 2, 33, 70, 16, 16, ptc_rt::kMaskAdd, true, false}, rng, false, true, Path::F32, layout) < 1e-5);
    CHECK(run({3, 2, 33, 70, 16, 16, ptc_rt::kMaskKeep, false, true}, rng, false, true, Path::WidenedBf16Io, layout) < 1e-2);
    if (ptc_rt::amx::ready()) {
      CHECK(run({2, 3, 70, 300, 16, 24, ptc_rt::kMaskNone, false, true}, rng, false, true, Path::Amx, layout) < 1e-2);
      CHECK(run({2, 3, 130, 197, 64, 64, ptc_rt::kMaskNone, false, true}, rng, false, true, Path::AmxBf16Io, layout) < 1e-2);
    }
  }
}

// bf16 q, k, v and o (AttentionArgs::bf16_io, --precision bf16 on the CPU) on the float32 kernel
// after widening (every CPU without AMX): the same cases.
TEST_CASE("fused attention on bf16 buffers, widened to the float32 kernel, matches the reference", "[attention]") {
  std::mt19937 rng(11);
  for (const Problem& p : cases()) {
    INFO("B H Tq Tk D Dv = " << p.B << " " << p.H << " " << p.Tq << " " << p.Tk << " " << p.D << " " << p.Dv << ", mask "
                             << p.mask_kind << ", causal " << p.causal << ", strided " << p.strided << ", group " << p.group);
    CHECK(run(p, rng, false, p.window, Path::WidenedBf16Io) < 1e-2);
  }
  CHECK(run({1, 2, 5, 300, 8, 8, ptc_rt::kMaskKeep, false, false}, rng, true, false, Path::WidenedBf16Io) < 1e-2);
}
