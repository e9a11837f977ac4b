// How a library's GEMMs, convolutions and attention compute: one typed value that ptc's compile
// options (include/ptc/precision.h) hand to the generated code and its runtime. This header is
// embedded into every generated library and included by ptc itself, so both sides read the same
// definitions.
#pragma once

namespace ptc_rt {

// The arithmetic of one class of library operations. Storage and accumulation stay fp32 for
// TF32; BF16 / FP16 read half-precision operands and accumulate in fp32.
enum class MathMode : int { FP32 = 0, TF32 = 1, BF16 = 2, FP16 = 3 };

// The math mode of each class of library operations in one library.
struct MathModes {
  MathMode gemm = MathMode::FP32;       // matrix products (nn.Linear, matmul, bmm, ...)
  MathMode conv = MathMode::FP32;       // convolutions, and the GEMMs 1x1 / patchify convolutions become
  MathMode attention = MathMode::FP32;  // the fused attention kernel
};

}  // namespace ptc_rt
