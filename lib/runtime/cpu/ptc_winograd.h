// ptc_winograd.h — 3x3 stride-1 convolutions (NCHW) by Winograd's F(2x2, 3x3) algorithm.
//
// Each 2x2 output tile of a channel is A^T [ sum_c (G g_oc G^T) ⊙ (B^T d_c B) ] A, d_c the
// tile's 4x4 input patch of channel c: 16 multiplies per (o, c, tile) instead of 36, i.e. 16
// GEMMs  M_e[O, tiles] = U_e[O, C] x V_e[C, tiles]  (e = one of the 4x4 transformed positions)
// with 2.25x fewer multiply-adds than the direct convolution. The transforms only add and
// subtract (and halve, in G), so the result stays within a few ulps of the direct one.
//
// Fused per block of tile rows, so the transformed tiles stay in cache: each thread takes whole
// blocks (rows of tiles, across images), transforms the input patches of all channels into V
// (16 x C x Tb), runs the 16 GEMMs serially into M (16 x O x Tb), transforms M back into the
// output rows, adds the bias and runs the user's epilogue on each finished output row. The
// transformed weights (U, 16 x O x C, in the GEMMs' packed layout) are prepared once when the
// model is opened (conv2d_prepare, for constant weights) or else per call.
//
// The weight gradient of such a convolution by the transposed algorithm, F(3x3, 2x2): per 2x2
// tile of dy, dw (3x3) += G^T [ (A g A^T) ⊙ (B^T d B) ] G with g the tile of dy and d the same
// 4x4 input patch as the forward's; the sum over tiles is taken before the output transform, so
// it is 16 GEMMs  M_e[O, C] += D_e[O, tiles] x V_e[C, tiles]^T  (4 multiply-adds per (o, c, dy
// element) instead of 9; conv2d_weight_grad_winograd).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <vector>

#include "ptc_gemm.h"
#include "ptc_rt.h"  // Conv2dArgs

namespace ptc_rt {
namespace winograd_detail {

// Whether the weights qualify: 3x3, stride 1, no dilation, no groups, and enough channels for
// the GEMMs' depth and rows.
inline bool kernel_applies(const Conv2dArgs& a) {
  return a.KH == 3 && a.KW == 3 && a.sh == 1 && a.sw == 1 && a.dh == 1 && a.dw == 1 &&
         a.groups == 1 && a.C >= 16 && a.O >= 16;
}

// Whether F(2x2, 3x3) applies and pays off for this call: the weights qualify and there are
// enough tiles for the GEMMs' columns. Weights transformed per call (not prepared: a training
// step's) cost ~20 ns per (O, C) pair, which the GEMMs win back at ~70 ps per (O, C, tile):
// from ~300 tiles on (2 threads: resnet18's layer4 at batch 8, 128 tiles, is faster as an
// implicit GEMM; layer3, 392 tiles, is not).
inline bool applies(const Conv2dArgs& a) {
  if (!kernel_applies(a) || a.OH < 2 || a.OW < 2) return false;
  const int64_t tiles = a.N * ((a.OH + 1) / 2) * ((a.OW + 1) / 2);
  return tiles >= (a.prepared ? 48 : 300);
}

inline int64_t weights_stride(const Conv2dArgs& a) {  // floats per transformed position
  return a.C * gemm_detail::round_up(a.O, gemm_detail::MR);
}

// U_e = (G g G^T)[e], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], each U_e [O, C] written
// straight into the GEMMs' packed-A layout at U + e * ustride, padding rows as zeros. The threads
// take MR-row slivers; per input channel a sliver's MR values of each U_e are one contiguous run
// (a training step transforms its weights every call, so this is on the step's path).
inline void transform_weights(const Conv2dArgs& a, float* U, int64_t ustride) {
  using gemm_detail::MR;
  const int64_t O = a.O, C = a.C, slivers = (O + MR - 1) / MR;
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < slivers; ++s)
    for (int64_t c = 0; c < C; ++c) {
      float* dst = U + gemm_detail::packed_a_index(O, C, s * MR, c);
      float u[16][MR];
      for (int64_t i = 0; i < MR; ++i) {
        const int64_t o = s * MR + i;
        if (o >= O) {
          for (int e = 0; e < 16; ++e) u[e][i] = 0.f;
          continue;
        }
        const float* w = a.w + o * a.ws[0] + c * a.ws[1];
        float g[3][3], t[4][3];
        for (int r = 0; r < 3; ++r)
          for (int q = 0; q < 3; ++q) g[r][q] = w[r * a.ws[2] + q * a.ws[3]];
        for (int q = 0; q < 3; ++q) {  // t = G g
          t[0][q] = g[0][q];
          t[1][q] = 0.5f * (g[0][q] + g[1][q] + g[2][q]);
          t[2][q] = 0.5f * (g[0][q] - g[1][q] + g[2][q]);
          t[3][q] = g[2][q];
        }
        for (int r = 0; r < 4; ++r) {  // u = t G^T
          u[r * 4 + 0][i] = t[r][0];
          u[r * 4 + 1][i] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
          u[r * 4 + 2][i] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
          u[r * 4 + 3][i] = t[r][2];
        }
      }
      for (int e = 0; e < 16; ++e)
        for (int64_t i = 0; i < MR; ++i) dst[e * ustride + i] = u[e][i];
    }
}

struct Geometry {
  int64_t TH, TW;    // tiles per image: rows, columns
  int64_t rows;      // tile rows over all images (N * TH)
  int64_t rpb;       // tile rows per block
  int64_t RW;        // floats of a padded input row: 2 * TW + 2
  int64_t blocks;    // blocks of rpb tile rows
};

// The 2x2 tiles of a's output, in blocks of about target_tiles tiles (whole tile rows, across
// images), as many blocks as spread evenly over the threads.
inline Geometry tile_geometry(const Conv2dArgs& a, int64_t target_tiles) {
  Geometry G{};
  G.TH = (a.OH + 1) / 2;
  G.TW = (a.OW + 1) / 2;
  G.rows = a.N * G.TH;
  G.RW = 2 * G.TW + 2;
  int64_t rpb = std::max<int64_t>(1, (target_tiles + G.TW - 1) / G.TW);
  int64_t blocks = (G.rows + rpb - 1) / rpb;
  const int64_t P = gemm_detail::max_threads();
  if (P > 1 && blocks < 4 * P) blocks = (blocks + P - 1) / P * P;
  rpb = (G.rows + blocks - 1) / blocks;
  G.blocks = (G.rows + rpb - 1) / rpb;
  G.rpb = rpb;
  return G;
}

// V[e][c][j] for the tiles of tile rows [r0, r1) (j counts tiles from r0): B^T d B with
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
inline void transform_input(const Conv2dArgs& a, const Geometry& G, int64_t r0, int64_t r1,
                            int64_t Tb, float* V, float* rowbuf) {
  const int64_t TW = G.TW, RW = G.RW, C = a.C;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / G.TH, th = r % G.TH;
    const int64_t jb = (r - r0) * TW;
    for (int64_t c = 0; c < C; ++c) {
      const float* xc = a.x + n * a.xs[0] + c * a.xs[1];
      // the tile row's 4 input rows, zero-padded: rowbuf[i][q] = x[2 th - ph + i, q - pw]
      for (int i = 0; i < 4; ++i) {
        float* rb = rowbuf + i * RW;
        const int64_t ih = 2 * th - a.ph + i;
        if (ih < 0 || ih >= a.H) {
          for (int64_t q = 0; q < RW; ++q) rb[q] = 0.f;
          continue;
        }
        const float* xr = xc + ih * a.xs[2];
        const int64_t q0 = std::min<int64_t>(a.pw, RW), q1 = std::min<int64_t>(RW, a.pw + a.W);
        for (int64_t q = 0; q < q0; ++q) rb[q] = 0.f;
#pragma omp simd
        for (int64_t q = q0; q < q1; ++q) rb[q] = xr[q - a.pw];
        for (int64_t q = std::max(q0, q1); q < RW; ++q) rb[q] = 0.f;
      }
      const float* d0 = rowbuf;
      const float* d1 = rowbuf + RW;
      const float* d2 = rowbuf + 2 * RW;
      const float* d3 = rowbuf + 3 * RW;
      float* v = V + c * Tb + jb;
      const int64_t es = C * Tb;  // stride between the 16 transformed positions
#pragma omp simd
      for (int64_t tw = 0; tw < TW; ++tw) {
        const int64_t q = 2 * tw;
        float t[4][4];  // t = B^T d (rows), per column k
        for (int k = 0; k < 4; ++k) {
          const float x0 = d0[q + k], x1 = d1[q + k], x2 = d2[q + k], x3 = d3[q + k];
          t[0][k] = x0 - x2;
          t[1][k] = x1 + x2;
          t[2][k] = x2 - x1;
          t[3][k] = x1 - x3;
        }
        for (int i = 0; i < 4; ++i) {  // v = t B
          v[(i * 4 + 0) * es + tw] = t[i][0] - t[i][2];
          v[(i * 4 + 1) * es + tw] = t[i][1] + t[i][2];
          v[(i * 4 + 2) * es + tw] = t[i][2] - t[i][1];
          v[(i * 4 + 3) * es + tw] = t[i][1] - t[i][3];
        }
      }
    }
  }
}

// Output rows of tile rows [r0, r1) from M[e][o][j]: A^T m A with A^T = [1 1 1 0; 0 1 -1 -1],
// plus the bias, then the user's epilogue on each finished output row.
inline void transform_output(const Conv2dArgs& a, const Geometry& G, int64_t r0, int64_t r1,
                             int64_t Tb, const float* M, float* rowbuf) {
  const int64_t TW = G.TW, O = a.O;
  const int64_t es = O * Tb;
  float* y0 = rowbuf;
  float* y1 = rowbuf + G.RW;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / G.TH, th = r % G.TH;
    const int64_t jb = (r - r0) * TW;
    for (int64_t o = 0; o < O; ++o) {
      const float* m = M + o * Tb + jb;
      const float b = a.bias ? a.bias[o * a.bias_stride] : 0.f;
#pragma omp simd
      for (int64_t tw = 0; tw < TW; ++tw) {
        float mm[16];
        for (int e = 0; e < 16; ++e) mm[e] = m[e * es + tw];
        float s[2][4];  // s = A^T m
        for (int k = 0; k < 4; ++k) {
          s[0][k] = mm[k] + mm[4 + k] + mm[8 + k];
          s[1][k] = mm[4 + k] - mm[8 + k] - mm[12 + k];
        }
        y0[2 * tw] = s[0][0] + s[0][1] + s[0][2] + b;
        y0[2 * tw + 1] = s[0][1] - s[0][2] - s[0][3] + b;
        y1[2 * tw] = s[1][0] + s[1][1] + s[1][2] + b;
        y1[2 * tw + 1] = s[1][1] - s[1][2] - s[1][3] + b;
      }
      for (int i = 0; i < 2; ++i) {
        const int64_t oh = 2 * th + i;
        if (oh >= a.OH) break;
        float* out = a.y + ((n * O + o) * a.OH + oh) * a.OW;
        const float* src = i ? y1 : y0;
        std::copy(src, src + a.OW, out);
        if (a.ep.fn) a.ep.fn(a.ep.obj, out, n, o, oh * a.OW, a.OW);
      }
    }
  }
}


// The transformed weights (16 x weights_stride floats, 64-byte aligned, std::free), nullptr if
// out of memory.
inline float* prepare_weights(const Conv2dArgs& a) {
  const size_t n = static_cast<size_t>(16 * weights_stride(a));
  float* U = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
  if (!U) return nullptr;
  transform_weights(a, U, weights_stride(a));  // every float, padding rows included
  return U;
}

// Whether the weight gradient by F(3x3, 2x2) applies and pays off: the forward's conditions, at
// least 256 tiles of dy, and at most 128 x 128 channels (the per-thread accumulators, 16 O C
// floats, within 1 MiB). Measured on 2 threads (Zen 4) against the implicit GEMM at batch 8:
// 64@56x56 11.5 -> 7.6-8.4 ms, 128@28x28 11.1 -> 7.3-8.5 ms, but 256@14x14 10.6 -> 9.8-12.5 ms
// (the GEMMs' depth per block shrinks as the channels grow, and the accumulators leave L2).
inline bool wgrad_applies(const Conv2dArgs& a) {
  if (!kernel_applies(a) || a.OH < 2 || a.OW < 2) return false;
  const int64_t tiles = a.N * ((a.OH + 1) / 2) * ((a.OW + 1) / 2);
  return tiles >= 256 && a.O * a.C <= 128 * 128;
}

// D[e][o][j] for dy's tiles of tile rows [r0, r1) (j counts tiles from r0): A g A^T with
// A = [1 0; 1 1; 1 -1; 0 -1], dy's rows and columns past OH / OW taken as zeros. dy element
// (n, o, oh, ow) is at dy[n sn + o so + oh OW + ow].
inline void transform_dy(const Conv2dArgs& a, const Geometry& G, int64_t r0, int64_t r1, int64_t Tb,
                         const float* dy, int64_t sn, int64_t so, float* D, float* rowbuf) {
  const int64_t TW = G.TW, O = a.O, OW = a.OW, es = O * Tb;
  float* g0 = rowbuf;           // the tile row's two dy rows, 2 TW wide, zero-padded
  float* g1 = rowbuf + 2 * TW;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / G.TH, th = r % G.TH;
    const int64_t jb = (r - r0) * TW;
    for (int64_t o = 0; o < O; ++o) {
      const float* src = dy + n * sn + o * so + 2 * th * OW;
      std::copy(src, src + OW, g0);
      if (2 * th + 1 < a.OH)
        std::copy(src + OW, src + 2 * OW, g1);
      else
        std::fill(g1, g1 + OW, 0.f);
      if (OW % 2) g0[OW] = g1[OW] = 0.f;
      float* d = D + o * Tb + jb;
#pragma omp simd
      for (int64_t tw = 0; tw < TW; ++tw) {
        const float a00 = g0[2 * tw], a01 = g0[2 * tw + 1], a10 = g1[2 * tw], a11 = g1[2 * tw + 1];
        const float t[4][2] = {{a00, a01}, {a00 + a10, a01 + a11}, {a00 - a10, a01 - a11}, {-a10, -a11}};  // A g
        for (int i = 0; i < 4; ++i) {  // (A g) A^T
          d[(i * 4 + 0) * es + tw] = t[i][0];
          d[(i * 4 + 1) * es + tw] = t[i][0] + t[i][1];
          d[(i * 4 + 2) * es + tw] = t[i][0] - t[i][1];
          d[(i * 4 + 3) * es + tw] = -t[i][1];
        }
      }
    }
  }
}

}  // namespace winograd_detail

// The weight gradient dw [O, C, 3, 3] (contiguous, overwritten) of a convolution that
// winograd_detail::wgrad_applies to, by F(3x3, 2x2) (see the top of the file). dy element
// (n, o, oh, ow) is at dy[n sn + o so + oh OW + ow]: [N, O, OH, OW] as the forward wrote it
// (sn = O OH OW, so = OH OW) or regrouped [O, N, OH, OW] (sn = OH OW, so = N OH OW). The threads
// take blocks of tile rows (across images), each summing into its own accumulators M (16 x O x
// C), which are added up and transformed back at the end. False (dw incomplete) only when memory
// could not be allocated.
inline bool conv2d_weight_grad_winograd(const Conv2dArgs& a, const float* dy, int64_t sn, int64_t so, float* dw) {
  using namespace winograd_detail;
  const int64_t O = a.O, C = a.C, OC = O * C;
  // Blocks of as many tiles (the GEMMs' depth) as keep V and D within ~1.5 MiB, in L2 with the
  // GEMMs' panels (larger blocks measured slower, 2 threads: 64 channels 8.3 ms at 1.5 MiB, 12.9
  // at 8 MiB).
  const Geometry G = tile_geometry(a, std::max<int64_t>(32, (3 << 19) / (16 * 4 * (C + O))));
  const int64_t rpb = G.rpb, blocks = G.blocks, Tb = rpb * G.TW;
  const int P = gemm_detail::max_threads();
  const int64_t acc_floats = 16 * OC;
  const int64_t vd_floats = 16 * (C + O) * Tb + 4 * G.RW;
  const int64_t gemm_floats = gemm_detail::per_thread_floats(O, C, Tb);
  std::vector<float*> acc(static_cast<size_t>(P), nullptr);
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(P)
  {
    const int t = gemm_detail::thread_id();
    static thread_local gemm_detail::TlsBuffer buf;
    float* base = buf.get(acc_floats + vd_floats + gemm_floats + 32);
    float* M = base ? gemm_detail::align64(base) : nullptr;
    if (!M) failed.store(true, std::memory_order_relaxed);
    else std::fill(M, M + acc_floats, 0.f);
    acc[static_cast<size_t>(t)] = M;
    float* ws = M ? gemm_detail::align64(M + acc_floats) : nullptr;
    float* V = ws ? ws + gemm_floats : nullptr;
    float* D = V ? V + 16 * C * Tb : nullptr;
    float* rowbuf = D ? D + 16 * O * Tb : nullptr;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      if (!M) continue;
      const int64_t r0 = blk * rpb, r1 = std::min(G.rows, r0 + rpb);
      const int64_t tiles = (r1 - r0) * G.TW;
      transform_input(a, G, r0, r1, Tb, V, rowbuf);
      transform_dy(a, G, r0, r1, Tb, dy, sn, so, D, rowbuf);
      for (int e = 0; e < 16; ++e) {
        GemmArgs g{};
        g.M = O;
        g.N = C;
        g.K = tiles;
        g.A = D + e * O * Tb;  // D_e[o, j]
        g.lda_m = Tb;
        g.lda_k = 1;
        g.B = V + e * C * Tb;  // B[j, c] = V_e[c, j]
        g.ldb_k = 1;
        g.ldb_n = Tb;
        g.C = M + e * OC;
        g.ldc_m = C;
        g.beta = 1.f;
        NoEpilogue none;
        gemm_detail::gemm_block(g, 0, O, 0, C, ws, none);
      }
    }
    // (the implicit barrier: every thread's sums are complete)
    if (!failed.load(std::memory_order_relaxed)) {
#pragma omp for schedule(static)
      for (int64_t oc = 0; oc < OC; ++oc) {
        float m[16];
        for (int e = 0; e < 16; ++e) {
          float v = 0.f;
          for (int q = 0; q < P; ++q)
            if (const float* A = acc[static_cast<size_t>(q)]) v += A[e * OC + oc];  // (fewer threads may have run)
          m[e] = v;
        }
        float s[3][4];  // s = G^T m, G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1]
        for (int k = 0; k < 4; ++k) {
          s[0][k] = m[k] + 0.5f * (m[4 + k] + m[8 + k]);
          s[1][k] = 0.5f * (m[4 + k] - m[8 + k]);
          s[2][k] = 0.5f * (m[4 + k] + m[8 + k]) + m[12 + k];
        }
        float* out = dw + oc * 9;
        for (int i = 0; i < 3; ++i) {  // s G
          out[i * 3 + 0] = s[i][0] + 0.5f * (s[i][1] + s[i][2]);
          out[i * 3 + 1] = 0.5f * (s[i][1] - s[i][2]);
          out[i * 3 + 2] = 0.5f * (s[i][1] + s[i][2]) + s[i][3];
        }
      }
    }
  }
  return !failed.load();
}

// The convolution by F(2x2, 3x3); requires winograd_detail::applies(a). U: prepare_weights'
// result for these weights, or nullptr (then they are transformed here). False (and the output
// incomplete) only when memory could not be allocated.
inline bool conv2d_winograd(const Conv2dArgs& a, const float* U = nullptr) {
  using namespace winograd_detail;
  const int64_t O = a.O, C = a.C;
  // Blocks of ~128 tiles (the GEMMs' columns), fewer when V and M would outgrow ~2 MiB.
  const Geometry G = tile_geometry(a, std::max<int64_t>(64, std::min<int64_t>(128, (2 << 20) / (16 * 4 * (C + O)))));
  const int64_t rpb = G.rpb, blocks = G.blocks, Tb = rpb * G.TW;

  const int64_t ustride = weights_stride(a);
  if (!U) {
    // Transformed per call (a training step's weights) into a buffer the calling thread keeps:
    // fresh pages for it (16.8 MB for 512 x 512 channels) cost more than the transform itself.
    static thread_local gemm_detail::TlsBuffer own;
    float* p = own.get(16 * ustride);
    if (!p) return false;
    transform_weights(a, p, ustride);  // every float, padding rows included
    U = p;
  }
  const float* Up = U;

  const int64_t vm_floats = 16 * (C + O) * Tb + 4 * G.RW;
  const int64_t gemm_floats = gemm_detail::per_thread_floats(O, Tb, C);
  std::atomic<bool> failed{false};
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    static thread_local gemm_detail::TlsBuffer buf;
    float* base = buf.get(vm_floats + gemm_floats + 16);
    if (!base) {
      failed.store(true, std::memory_order_relaxed);
      continue;
    }
    float* ws = gemm_detail::align64(base);
    float* V = ws + gemm_floats;
    float* M = V + 16 * C * Tb;
    float* rowbuf = M + 16 * O * Tb;
    const int64_t r0 = blk * rpb, r1 = std::min(G.rows, r0 + rpb);
    const int64_t tiles = (r1 - r0) * G.TW;
    transform_input(a, G, r0, r1, Tb, V, rowbuf);
    for (int e = 0; e < 16; ++e) {
      GemmArgs g{};
      g.M = O;
      g.N = tiles;
      g.K = C;
      g.A_packed = Up + e * ustride;
      g.B = V + e * C * Tb;
      g.ldb_k = Tb;
      g.ldb_n = 1;
      g.C = M + e * O * Tb;
      g.ldc_m = Tb;
      NoEpilogue none;
      gemm_detail::gemm_block(g, 0, O, 0, tiles, ws, none);
    }
    transform_output(a, G, r0, r1, Tb, M, rowbuf);
  }
  return !failed.load();
}

}  // namespace ptc_rt
