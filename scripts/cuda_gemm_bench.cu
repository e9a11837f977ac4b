// cuda_gemm_bench.cu — ptc's exact-fp32 GEMM kernels (ptc_cuda::tc_gemm, 3xTF32) against cuBLAS's
// fp32 SGEMM (and, for reference, its TF32 GEMM), each compared with a float64 GEMM: time per
// call, TFLOP/s and errors (max |err| / max |ref|, relative RMS), at the transformer models'
// shapes. Needs a GPU; build it there or here (nvcc, no GPU needed to build):
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 \
//        --expt-relaxed-constexpr -Ilib/runtime/cuda -Ilib/runtime/common scripts/cuda_gemm_bench.cu \
//        lib/runtime/cuda/ptc_cuda_gemm_tc.cu -lcublas -o cuda_gemm_bench
//   ./cuda_gemm_bench [SHAPE [CONFIG]]
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ptc_cuda_rt.h"

using namespace ptc_cuda;

namespace {

__global__ void ref64(int M, int N, int K, const float* A, const float* B, int ldb, bool kmajor, const float* bias, const float* res,
                      int act, double* C) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  const int m = i / N, n = i % N;
  double s = 0;
  for (int k = 0; k < K; ++k)
    s += static_cast<double>(A[static_cast<size_t>(m) * K + k]) *
         static_cast<double>(kmajor ? B[static_cast<size_t>(n) * ldb + k] : B[static_cast<size_t>(k) * ldb + n]);
  if (bias) s += bias[n];
  if (res) s += res[i];
  if (act) s = (s != s || s > 0) ? s : 0;  // ReLU keeps NaN, as torch's
  C[i] = s;
}

struct Shape {
  const char* name;
  int M, N, K;
  bool kmajor;  // B[k, n] at n * K + k (a Linear weight), else k * N + n (GPT-2's Conv1D)
  int batch;
  bool epilogue;  // bias + residual + ReLU (checked against the reference; cuBLAS runs none)
};

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  const int only_config = argc > 2 ? std::atoi(argv[2]) : -1;
  const std::vector<Shape> shapes = {
      {"odd", 77, 36, 20, true, 1, true},          {"odd_n", 77, 36, 20, false, 1, true},
      {"odd_b3", 33, 130, 132, true, 3, true},     {"bert_qkv", 1024, 2304, 768, true, 1, false},
      {"bert_o", 1024, 768, 768, true, 1, false},  {"bert_ff1", 1024, 3072, 768, true, 1, false},
      {"bert_ff2", 1024, 768, 3072, true, 1, false}, {"gpt2_qkv", 512, 2304, 768, false, 1, false},
      {"gpt2_o", 512, 768, 768, false, 1, false},  {"gpt2_ff1", 512, 3072, 768, false, 1, false},
      {"gpt2_ff2", 512, 768, 3072, false, 1, false}, {"vit_qkv", 1576, 1152, 384, true, 1, false},
      {"vit_o", 1576, 384, 384, true, 1, false},   {"vit_ff1", 1576, 1536, 384, true, 1, false},
      {"vit_ff2", 1576, 384, 1536, true, 1, false}, {"big", 4096, 4096, 4096, true, 1, false},
  };
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuda_gemm_bench: no cuBLAS handle (no GPU?)\n");
    return 1;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::printf("%-9s %-20s %-6s | %-7s %10s %8s %10s %10s\n", "shape", "MxNxK batch", "B", "kernel", "us", "TFLOP/s", "max err", "rel rms");
  for (const Shape& s : shapes) {
    if (!only.empty() && only != s.name) continue;
    const int M = s.M, N = s.N, K = s.K, Z = s.batch, ldb = s.kmajor ? K : N;
    const size_t na = static_cast<size_t>(M) * K, nb = static_cast<size_t>(K) * N, nc = static_cast<size_t>(M) * N;
    std::vector<float> ha(na * Z), hb(nb * Z), hbias(N), hres(nc * Z);
    for (auto& x : ha) x = normal(rng);
    for (auto& x : hb) x = normal(rng) / std::sqrt(static_cast<float>(K));
    for (auto& x : hbias) x = normal(rng);
    for (auto& x : hres) x = normal(rng);
    if (s.epilogue) {  // non-finite inputs: rows 0 and 1 of A carry an Inf and a NaN
      ha[0] = INFINITY;
      ha[K + 1] = NAN;
    }
    float *A, *B, *C, *C2, *bias, *res;
    double* R;
    cudaMalloc(&A, na * Z * 4);
    cudaMalloc(&B, nb * Z * 4);
    cudaMalloc(&C, nc * Z * 4);
    cudaMalloc(&C2, nc * Z * 4);
    cudaMalloc(&bias, N * 4);
    cudaMalloc(&res, nc * Z * 4);
    cudaMalloc(&R, nc * Z * 8);
    cudaMemcpy(A, ha.data(), na * Z * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(B, hb.data(), nb * Z * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(bias, hbias.data(), N * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(res, hres.data(), nc * Z * 4, cudaMemcpyHostToDevice);
    for (int z = 0; z < Z; ++z)
      ref64<<<static_cast<unsigned>((nc + 255) / 256), 256>>>(M, N, K, A + z * na, B + z * nb, ldb, s.kmajor, s.epilogue ? bias : nullptr,
                                                               s.epilogue ? res + z * nc : nullptr, s.epilogue, R + z * nc);
    std::vector<double> hr(nc * Z);
    cudaMemcpy(hr.data(), R, nc * Z * 8, cudaMemcpyDeviceToHost);
    double rmax = 0;
    for (double v : hr)
      if (std::isfinite(v)) rmax = std::max(rmax, std::fabs(v));
    auto errors = [&](const float* d, double* mx, double* rms) {
      std::vector<float> hc(nc * Z);
      cudaMemcpy(hc.data(), d, nc * Z * 4, cudaMemcpyDeviceToHost);
      double m = 0, se = 0, sr = 0;
      for (size_t i = 0; i < hc.size(); ++i) {
        if (!std::isfinite(hr[i])) {  // Inf / NaN where the reference has them, with the same sign
          const bool same = std::isnan(hr[i]) ? std::isnan(hc[i]) : hc[i] == static_cast<float>(hr[i]);
          if (!same) m = INFINITY;
          continue;
        }
        const double e = std::fabs(hc[i] - hr[i]);
        m = std::max(m, e);
        se += e * e;
        sr += hr[i] * hr[i];
      }
      *mx = m / rmax;  // Inf: a non-finite output differs from the reference's
      *rms = std::sqrt(se / sr);
    };
    auto timeit = [&](auto f) {
      f();
      cudaEventRecord(e0);
      for (int i = 0; i < 20; ++i) f();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      return ms / 20 * 1000;
    };
    const double gflop = 2.0 * M * N * K * Z / 1e9;
    char dims[32];
    std::snprintf(dims, sizeof dims, "%dx%dx%d b%d", M, N, K, Z);
    auto row = [&](const char* kernel, double us, double mx, double rms) {
      std::printf("%-9s %-20s %-6s | %-7s %10.1f %8.1f %10.2e %10.2e\n", s.name, dims, s.kmajor ? "k-cont" : "n-cont", kernel, us,
                  gflop / us * 1e3, mx, rms);
    };
    const float one = 1.f, zero = 0.f;
    // Row-major C[M, N] = A B is column-major C^T = B^T A^T.
    auto cublas = [&](cublasComputeType_t type) {
      for (int z = 0; z < Z; ++z)
        cublasGemmEx(h, s.kmajor ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B + z * nb, CUDA_R_32F, ldb, A + z * na, CUDA_R_32F,
                     K, &zero, C + z * nc, CUDA_R_32F, N, type, CUBLAS_GEMM_DEFAULT);
    };
    double mx = NAN, rms = NAN;
    if (!s.epilogue) {
      for (const auto& kind : {std::pair<const char*, cublasComputeType_t>{"sgemm", CUBLAS_COMPUTE_32F}, {"tf32", CUBLAS_COMPUTE_32F_FAST_TF32}}) {
        const char* name = kind.first;
        const cublasComputeType_t type = kind.second;
        cublas(type);
        cudaDeviceSynchronize();
        errors(C, &mx, &rms);
        row(name, timeit([&] { cublas(type); }), mx, rms);
      }
    }
    TcGemm g{M, N, K, A, K, B, ldb, s.kmajor, C2, Z, static_cast<int64_t>(na), static_cast<int64_t>(nb), static_cast<int64_t>(nc),
             s.epilogue ? bias : nullptr, s.epilogue ? res : nullptr, s.epilogue ? kActRelu : kActNone};
    if (!tc_gemm_fits(g)) {
      std::printf("%-9s: tc_gemm does not take these operands\n", s.name);
    } else {
      for (int c = 0; c < kTcGemmConfigs; ++c) {
        if (only_config >= 0 && c != only_config) continue;
        cudaMemset(C2, 0, nc * Z * 4);
        const char* err = tc_gemm(g, c, nullptr);
        const cudaError_t ce = cudaDeviceSynchronize();
        char name[16];
        std::snprintf(name, sizeof name, "ptc%d", c);
        if (err || ce != cudaSuccess) {
          std::printf("%-9s %-20s | %-7s %s %s\n", s.name, dims, name, err ? err : "", cudaGetErrorString(ce));
          continue;
        }
        errors(C2, &mx, &rms);
        row(name, timeit([&] { tc_gemm(g, c, nullptr); }), mx, rms);
      }
    }
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(C2);
    cudaFree(bias);
    cudaFree(res);
    cudaFree(R);
  }
  return 0;
}
