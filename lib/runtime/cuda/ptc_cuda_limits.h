// The CUDA runtime's capability constants that code generation must respect too. Embedded into
// every CUDA library (ptc_cuda_rt.h includes it) and read by ptc's CUDA backend
// (lib/backend/cuda), so both sides share one definition.
#pragma once

#include <cstdint>

namespace ptc_cuda {

// The fused attention kernel's largest head sizes (of q / k and of v): any up to
// kAttentionMaxHead (bfloat16 / float16 on tensor cores too); on TF32 tensor cores up to
// kAttentionMmaHead.
constexpr int64_t kAttentionMaxHead = 256, kAttentionMmaHead = 128;

}  // namespace ptc_cuda
