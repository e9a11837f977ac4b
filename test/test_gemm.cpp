// Tests for the generated code's fp32 GEMM (lib/runtime/cpu/ptc_gemm.h) against a naive
// double-precision reference: shapes (tiny, skinny, odd, large), layouts (A row/column-major,
// B [K,N] / weight [N,K], padded leading dimensions, general strides), alpha/beta, epilogues,
// batched variants and caller workspaces. Passes with and without -fopenmp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/cpu/ptc_gemm.h"

namespace {

using ptc_rt::GemmArgs;

struct Mat {  // a strided matrix in its own buffer, padding filled with NaN
  int64_t rows = 0, cols = 0, s_row = 0, s_col = 0;
  std::vector<float> buf;
  float& at(int64_t r, int64_t c) { return buf[r * s_row + c * s_col]; }
  float at(int64_t r, int64_t c) const { return buf[r * s_row + c * s_col]; }
};

// rows x cols; col_major: stored transposed; pad: extra elements per leading dimension.
Mat make_mat(int64_t rows, int64_t cols, bool col_major, int64_t pad, std::mt19937& rng) {
  Mat m;
  m.rows = rows;
  m.cols = cols;
  if (col_major) {
    m.s_col = rows + pad;
    m.s_row = 1;
  } else {
    m.s_row = cols + pad;
    m.s_col = 1;
  }
  const int64_t n = col_major ? m.s_col * cols : m.s_row * rows;
  m.buf.assign(static_cast<size_t>(std::max<int64_t>(n, 1)), std::nanf(""));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m.at(r, c) = d(rng);
  return m;
}

// Double-precision reference: sum[m*N+n] = sum_k A[m,k] B[k,n], mag[m*N+n] = sum_k |A[m,k] B[k,n]|
// (dense double copies first, so that it stays quick in unoptimised sanitizer builds).
void reference(const Mat& A, const Mat& B, std::vector<double>& sum, std::vector<double>& mag) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  std::vector<double> a(M * K), bt(N * K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[m * K + k] = A.buf[m * A.s_row + k * A.s_col];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) bt[n * K + k] = B.buf[k * B.s_row + n * B.s_col];
  sum.assign(M * N, 0.0);
  mag.assign(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m) {
    const double* ar = a.data() + m * K;
    for (int64_t n = 0; n < N; ++n) {
      const double* br = bt.data() + n * K;
      double s = 0, g = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = ar[k] * br[k];
        s += p;
        g += p < 0 ? -p : p;
      }
      sum[m * N + n] = s;
      mag[m * N + n] = g;
    }
  }
}

enum class Ep { None, BiasRelu };

struct Case {
  int64_t M, N, K;
  bool a_trans = false;   // A stored column-major (A^T row-major)
  bool b_weight = false;  // B given as W[N, K]
  int64_t pad = 0;        // leading-dimension padding for A, B and C
  float alpha = 1.f, beta = 0.f;
  Ep ep = Ep::None;
  bool packed = false;  // B pre-packed with gemm_pack_b
};

// Runs one case and checks every element against a double reference.
void check_case(const Case& t, std::mt19937& rng, void* ws = nullptr, size_t ws_bytes = 0) {
  INFO("M=" << t.M << " N=" << t.N << " K=" << t.K << " a_trans=" << t.a_trans
            << " b_weight=" << t.b_weight << " pad=" << t.pad << " alpha=" << t.alpha
            << " beta=" << t.beta << " ep=" << static_cast<int>(t.ep) << " packed=" << t.packed);
  const Mat A = make_mat(t.M, t.K, t.a_trans, t.pad, rng);
  // B[k, n]; weight layout W[N, K] is B stored column-major.
  const Mat B = make_mat(t.K, t.N, t.b_weight, t.pad, rng);
  Mat C = make_mat(t.M, t.N, false, t.pad, rng);
  if (t.beta == 0.f)  // beta == 0 must not read C: poison it
    for (int64_t r = 0; r < t.M; ++r)
      for (int64_t c = 0; c < t.N; ++c) C.at(r, c) = std::nanf("");
  const Mat C0 = C;
  std::vector<float> bias(static_cast<size_t>(t.N));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& b : bias) b = d(rng);

  GemmArgs g{t.M, t.N, t.K, A.buf.data(), A.s_row, A.s_col, B.buf.data(), B.s_row, B.s_col,
             C.buf.data(), C.s_row};
  g.alpha = t.alpha;
  g.beta = t.beta;
  std::vector<float> packed;
  if (t.packed) {
    packed.assign(ptc_rt::gemm_packed_b_floats(t.K, t.N), std::nanf(""));
    ptc_rt::gemm_pack_b(t.K, t.N, B.buf.data(), B.s_row, B.s_col, packed.data());
    g.B = nullptr;
    g.B_packed = packed.data();
  }
  bool ok;
  if (t.ep == Ep::None)
    ok = ptc_rt::gemm(g, ptc_rt::NoEpilogue{}, ws, ws_bytes);
  else
    ok = ptc_rt::gemm(g, ptc_rt::BiasColEpilogue<ptc_rt::Act::Relu>{bias.data(), 1}, ws, ws_bytes);
  CHECK(ok);

  std::vector<double> sum, mags;
  reference(A, B, sum, mags);
  int64_t bad = 0;
  for (int64_t m = 0; m < t.M; ++m) {
    for (int64_t n = 0; n < t.N; ++n) {
      double ref = t.alpha * sum[m * t.N + n];
      double mag = std::fabs(t.alpha) * mags[m * t.N + n];
      if (t.beta != 0.f) {
        ref += t.beta * static_cast<double>(C0.at(m, n));
        mag += std::fabs(t.beta * static_cast<double>(C0.at(m, n)));
      }
      if (t.ep == Ep::BiasRelu) {
        ref += bias[n];
        mag += std::fabs(bias[n]);
        ref = ref > 0 ? ref : 0;
      }
      const double tol = 1e-6 * (4.0 + std::sqrt(static_cast<double>(t.K))) * (mag + 1e-30) + 1e-30;
      const double got = C.at(m, n);
      if (!(std::fabs(got - ref) <= tol)) {
        if (bad < 5) UNSCOPED_INFO("C[" << m << "," << n << "] = " << got << ", expected " << ref);
        ++bad;
      }
    }
  }
  CHECK(bad == 0);
  // padding of C untouched
  if (t.pad > 0)
    for (int64_t m = 0; m < t.M; ++m)
      for (int64_t p = 0; p < t.pad; ++p) CHECK(std::isnan(C.buf[m * C.s_row + t.N + p]));
}

}  // namespace

TEST_CASE("gemm: tiny and skinny shapes", "[gemm]") {
  std::mt19937 rng(1);
  const int64_t dims[] = {1, 2, 3, 5, 17, 100};
  for (int64_t M : dims)
    for (int64_t N : dims)
      for (int64_t K : dims) check_case({M, N, K}, rng);
  check_case({1, 1, 1}, rng);
  check_case({1, 3072, 768, false, true}, rng);  // GEMV against a weight
  check_case({1, 300, 500}, rng);
  check_case({400, 1, 300, true, false}, rng);
  check_case({400, 1, 300, false, true}, rng);
  check_case({3, 700, 64, true, true, 5}, rng);
  check_case({4, 300, 50}, rng);  // direct axpy form: 4 rows, a partial last chunk
  check_case({4, 1000, 33, true, false, 1, 2.f, -1.f, Ep::BiasRelu}, rng);
  check_case({3, 257, 40, false, false, 0, 1.f, 0.f, Ep::BiasRelu}, rng);
  check_case({2, 512, 40}, rng);
}

TEST_CASE("gemm: odd sizes in all combinations", "[gemm]") {
  std::mt19937 rng(2);
  const int64_t dims[] = {1, 7, 13, 31, 67, 129, 257};
  for (int64_t M : dims)
    for (int64_t N : dims)
      for (int64_t K : dims) {
        // vary the layout with the shape, so that each layout sees many shapes
        const int sel = static_cast<int>((M + 3 * N + 7 * K) % 4);
        check_case({M, N, K, (sel & 1) != 0, (sel & 2) != 0}, rng);
      }
}

TEST_CASE("gemm: every layout combination with padding, alpha/beta, epilogue", "[gemm]") {
  std::mt19937 rng(3);
  const int64_t shapes[][3] = {{67, 129, 31}, {129, 67, 257}, {31, 257, 300}, {200, 45, 513}};
  for (auto& s : shapes)
    for (int at = 0; at < 2; ++at)
      for (int bw = 0; bw < 2; ++bw)
        for (int64_t pad : {0, 3}) {
          if (pad == 0) {
            check_case({s[0], s[1], s[2], at != 0, bw != 0, pad}, rng);
            check_case({s[0], s[1], s[2], at != 0, bw != 0, pad, 0.5f, 0.f, Ep::BiasRelu}, rng);
          } else {
            check_case({s[0], s[1], s[2], at != 0, bw != 0, pad, -1.5f, 0.25f}, rng);
            check_case({s[0], s[1], s[2], at != 0, bw != 0, pad, 1.f, 1.f, Ep::BiasRelu}, rng);
          }
        }
}

TEST_CASE("gemm: large rectangular", "[gemm]") {
  std::mt19937 rng(4);
  check_case({512, 64, 1000}, rng);
  check_case({512, 64, 1000, true, true, 1}, rng);
  check_case({64, 512, 1000, false, true}, rng);
  check_case({250, 1100, 300, false, true, 0, 1.f, 0.f, Ep::BiasRelu}, rng);  // several NC/MC blocks
  check_case({700, 300, 17, true, false}, rng);
  // several K blocks (KC is up to 1024), with beta and epilogue applied once
  check_case({50, 600, 2100, false, true, 0, 1.f, 0.5f, Ep::BiasRelu}, rng);
  check_case({70, 530, 1500, true, false, 2, -0.5f, 1.f}, rng);
}

TEST_CASE("gemm: pre-packed B", "[gemm]") {
  std::mt19937 rng(9);
  // incl. several K blocks (KC <= 1024), N panels (NC >= 512) and M blocks (MC >= 112)
  const int64_t shapes[][3] = {{1, 1, 1},     {1, 3072, 768},  {3, 5, 7},
                               {67, 129, 31}, {129, 67, 257},  {31, 257, 1100},
                               {40, 600, 1100}, {250, 700, 90}};
  for (auto& s : shapes)
    for (int bw = 0; bw < 2; ++bw) {
      Case c{s[0], s[1], s[2], false, bw != 0};
      c.packed = true;
      check_case(c, rng);
      c.a_trans = true;
      c.pad = 2;
      c.ep = Ep::BiasRelu;
      c.beta = 0.5f;
      check_case(c, rng);
    }
}

TEST_CASE("gemm: K = 0 gives beta * C, then the epilogue", "[gemm]") {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  GemmArgs g{2, 3, 0, nullptr, 0, 1, nullptr, 3, 1, c.data(), 3};
  g.beta = 2.f;
  ptc_rt::gemm(g);
  CHECK(c == std::vector<float>{2, 4, 6, 8, 10, 12});
  g.beta = 0.f;
  const float bias[3] = {-1.f, 0.5f, 2.f};
  ptc_rt::gemm(g, ptc_rt::BiasColEpilogue<ptc_rt::Act::Relu>{bias, 1});
  CHECK(c == std::vector<float>{0, 0.5f, 2, 0, 0.5f, 2});
}

TEST_CASE("gemm: epilogue sees every element once with its coordinates", "[gemm]") {
  for (auto shp : {std::vector<int64_t>{5, 7, 3}, std::vector<int64_t>{130, 70, 40}}) {
    const int64_t M = shp[0], N = shp[1], K = shp[2];
    std::vector<float> a(M * K, 0.f), b(K * N, 0.f), c(M * N, -1.f);
    std::vector<int> seen(M * N, 0);
    GemmArgs g{M, N, K, a.data(), K, 1, b.data(), N, 1, c.data(), N};
    bool ptr_ok = true;
    ptc_rt::gemm(g, [&](float* cp, int64_t row, int64_t col0, int64_t n) {
      if (cp != c.data() + row * N + col0) ptr_ok = false;
      for (int64_t j = 0; j < n; ++j) {
        if (cp[j] != 0.f) ptr_ok = false;  // the finished value (all-zero inputs)
#ifdef _OPENMP
#pragma omp atomic
#endif
        ++seen[row * N + col0 + j];
      }
    });
    CHECK(ptr_ok);
    int wrong = 0;
    for (int s : seen) wrong += s != 1;
    CHECK(wrong == 0);
  }
}

TEST_CASE("gemm: GELU epilogues", "[gemm]") {
  const float v[6] = {-3.f, -0.5f, 0.f, 0.5f, 1.f, 3.f};
  for (float x : v) {
    const double ge = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    const double k = 0.7978845608028654;  // sqrt(2 / pi)
    const double gt = 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
    CHECK(ptc_rt::apply_act<ptc_rt::Act::Gelu>(x) == Approx(ge).margin(1e-6));
    CHECK(ptc_rt::apply_act<ptc_rt::Act::GeluTanh>(x) == Approx(gt).margin(1e-6));
  }
}

TEST_CASE("gemm: caller workspace", "[gemm]") {
  std::mt19937 rng(5);
  const Case cases[] = {{129, 257, 300}, {512, 64, 1000, true, true}, {7, 13, 31}};
  for (const Case& t : cases) {
    const size_t bytes = ptc_rt::gemm_workspace_bytes(t.M, t.N, t.K, 4);
    std::vector<char> ws(bytes + 1);
    check_case(t, rng, ws.data() + 1, bytes);  // misaligned on purpose
    // room for one thread only: still correct (runs on fewer threads)
    const size_t one = ptc_rt::gemm_workspace_bytes(t.M, t.N, t.K, 1);
    check_case(t, rng, ws.data(), one);
  }
}

namespace {
void check_batched(int64_t batch, int64_t M, int64_t N, int64_t K, bool a_trans, bool b_weight,
                   bool b_broadcast, bool ep, std::mt19937& rng, bool packed_b = false) {
  INFO("batch=" << batch << " M=" << M << " N=" << N << " K=" << K << " a_trans=" << a_trans
                << " b_weight=" << b_weight << " b_broadcast=" << b_broadcast << " ep=" << ep
                << " packed_b=" << packed_b);
  std::vector<Mat> As, Bs;
  for (int64_t b = 0; b < batch; ++b) As.push_back(make_mat(M, K, a_trans, 0, rng));
  for (int64_t b = 0; b < (b_broadcast ? 1 : batch); ++b) Bs.push_back(make_mat(K, N, b_weight, 0, rng));
  // one contiguous buffer per operand
  const int64_t sa = M * K, sb = b_broadcast ? 0 : K * N, sc = M * N + 5;
  std::vector<float> a(batch * sa), bb(std::max<int64_t>(K * N, batch * sb)), c(batch * sc, -7.f);
  for (int64_t b = 0; b < batch; ++b) std::copy(As[b].buf.begin(), As[b].buf.end(), a.begin() + b * sa);
  for (size_t b = 0; b < Bs.size(); ++b) std::copy(Bs[b].buf.begin(), Bs[b].buf.end(), bb.begin() + b * K * N);
  GemmArgs g{M, N, K, a.data(), As[0].s_row, As[0].s_col, bb.data(), Bs[0].s_row, Bs[0].s_col,
             c.data(), N};
  // epilogue: add batch index + row (checks the coordinates it is given)
  auto epf = [&](float* cp, int64_t b, int64_t row, int64_t, int64_t n) {
    for (int64_t j = 0; j < n; ++j) cp[j] += static_cast<float>(b) + 0.5f * static_cast<float>(row);
  };
  std::vector<float> packed;
  int64_t sb_call = sb;
  if (packed_b) {  // pack each batch's B; the batch stride is then in packed floats
    const int64_t pf = static_cast<int64_t>(ptc_rt::gemm_packed_b_floats(K, N));
    packed.resize(Bs.size() * pf);
    for (size_t b = 0; b < Bs.size(); ++b)
      ptc_rt::gemm_pack_b(K, N, Bs[b].buf.data(), Bs[b].s_row, Bs[b].s_col, packed.data() + b * pf);
    g.B_packed = packed.data();
    sb_call = b_broadcast ? 0 : pf;
  }
  if (ep)
    ptc_rt::gemm_batched(g, batch, sa, sb_call, sc, epf);
  else
    ptc_rt::gemm_batched(g, batch, sa, sb_call, sc, ptc_rt::NoEpilogue{});
  int64_t bad = 0;
  std::vector<double> sum, mags;
  for (int64_t b = 0; b < batch; ++b) {
    reference(As[b], Bs[b_broadcast ? 0 : b], sum, mags);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = sum[m * N + n], mag = mags[m * N + n];
        if (ep) s += b + 0.5 * m, mag += b + 0.5 * m;
        const double tol = 1e-6 * (4.0 + std::sqrt(static_cast<double>(K))) * mag + 1e-30;
        if (!(std::fabs(c[b * sc + m * N + n] - s) <= tol)) ++bad;
      }
    for (int64_t p = 0; p < 5; ++p) CHECK(c[b * sc + M * N + p] == -7.f);  // gap untouched
  }
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("gemm_batched: bmm, broadcast weight, epilogue with batch index", "[gemm]") {
  std::mt19937 rng(6);
  check_batched(1, 67, 129, 31, false, false, false, false, rng);
  check_batched(3, 67, 129, 31, true, false, false, true, rng);
  check_batched(5, 31, 13, 257, false, true, false, true, rng);
  check_batched(4, 2, 300, 40, false, false, true, false, rng);  // direct path
  check_batched(7, 129, 67, 100, true, true, true, true, rng);
  check_batched(12, 64, 64, 64, false, false, false, false, rng);  // attention-like
  check_batched(2, 8, 8, 8, false, true, false, true, rng);
  check_batched(3, 67, 129, 31, true, false, false, true, rng, true);   // packed B per batch
  check_batched(5, 2, 300, 40, false, true, true, false, rng, true);    // packed, broadcast
}

TEST_CASE("gemm_batched_fn: two broadcast batch dims", "[gemm]") {
  // C[b0, b1] = A[b0, 0] @ B[0, b1] for b0 < 2, b1 < 3  (A: [2,1,M,K], B: [1,3,K,N])
  std::mt19937 rng(7);
  const int64_t M = 33, N = 45, K = 70, B0 = 2, B1 = 3;
  std::vector<Mat> As, Bs;
  for (int64_t i = 0; i < B0; ++i) As.push_back(make_mat(M, K, false, 0, rng));
  for (int64_t i = 0; i < B1; ++i) Bs.push_back(make_mat(K, N, false, 0, rng));
  std::vector<float> a, b, c(B0 * B1 * M * N);
  for (auto& m : As) a.insert(a.end(), m.buf.begin(), m.buf.end());
  for (auto& m : Bs) b.insert(b.end(), m.buf.begin(), m.buf.end());
  GemmArgs g{M, N, K, a.data(), K, 1, b.data(), N, 1, c.data(), N};
  ptc_rt::gemm_batched_fn(
      g, B0 * B1,
      [&](int64_t i, int64_t* oa, int64_t* ob, int64_t* oc) {
        *oa = (i / B1) * M * K;
        *ob = (i % B1) * K * N;
        *oc = i * M * N;
      },
      ptc_rt::NoEpilogue{});
  int64_t bad = 0;
  for (int64_t i = 0; i < B0 * B1; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          s += static_cast<double>(As[i / B1].at(m, k)) * Bs[i % B1].at(k, n);
          mag += std::fabs(static_cast<double>(As[i / B1].at(m, k)) * Bs[i % B1].at(k, n));
        }
        if (!(std::fabs(c[i * M * N + m * N + n] - s) <= 1e-6 * 14 * mag)) ++bad;
      }
  CHECK(bad == 0);
}

TEST_CASE("gemm: general (non-unit) strides on both operands", "[gemm]") {
  // A and B as every-other-element views
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  const int64_t M = 45, N = 70, K = 33;
  std::vector<float> a(M * K * 2 * 3), b(K * N * 2 * 2), c(M * N);
  for (auto& x : a) x = d(rng);
  for (auto& x : b) x = d(rng);
  // A[m,k] = a[m*2 + k*(2*M+1)], B[k,n] = b[k*3 + n*(3*K+1)]
  GemmArgs g{M, N, K, a.data(), 2, 2 * M + 1, b.data(), 3, 3 * K + 1, c.data(), N};
  ptc_rt::gemm(g);
  int64_t bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(a[m * 2 + k * (2 * M + 1)]) * b[k * 3 + n * (3 * K + 1)];
        s += p;
        mag += std::fabs(p);
      }
      if (!(std::fabs(c[m * N + n] - s) <= 1e-5 * mag)) ++bad;
    }
  CHECK(bad == 0);
}

#ifdef _OPENMP
TEST_CASE("gemm: called from inside a parallel region runs serially and correctly", "[gemm]") {
  const int64_t M = 100, N = 90, K = 80;
  std::vector<float> a(M * K), b(K * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3.f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) - 2.f;
  std::vector<double> ref(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) ref[m * N + n] += static_cast<double>(a[m * K + k]) * b[k * N + n];
  std::vector<std::vector<float>> outs(4, std::vector<float>(M * N));
  int fails = 0;
#pragma omp parallel for num_threads(4) reduction(+ : fails)
  for (int t = 0; t < 4; ++t) {
    GemmArgs g{M, N, K, a.data(), K, 1, b.data(), N, 1, outs[t].data(), N};
    ptc_rt::gemm(g);
    for (int64_t i = 0; i < M * N; ++i) fails += outs[t][i] != static_cast<float>(ref[i]);
  }
  CHECK(fails == 0);  // small integers: exact
}
#endif
