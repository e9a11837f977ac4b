// Precision: the one typed setting that says how a compiled library computes, from the CLI
// (`--precision`) through lowering and code generation to the runtime's kernels.
//
// The policy follows torch.autocast: the library operations (GEMMs, convolutions, attention)
// compute in the chosen precision with fp32 accumulation; softmax, normalization statistics,
// reductions, exp / log and losses stay fp32. Each backend says which precisions it computes in
// (Backend::supports) and reads the same policy.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/common/ptc_precision.h"

namespace ptc {

using ptc_rt::MathMode;
using ptc_rt::MathModes;

enum class Precision : unsigned char {
  FP32,      // exact fp32 everywhere (the default)
  TF32Conv,  // torch's defaults: convolutions on TF32 tensor cores, GEMMs and attention exact fp32
  TF32,      // GEMMs, convolutions and attention on TF32 tensor cores (fp32 storage and accumulation)
  BF16,      // GEMMs, convolutions and attention in bfloat16 with fp32 accumulation
  FP16,      // the same in float16
};

// The `--precision` spelling ("fp32", "tf32-conv", "tf32", "bf16", "fp16").
const char* precision_name(Precision p);
// The precision of a `--precision` value; nullopt for an unknown name.
std::optional<Precision> parse_precision(const std::string& name);
// Every precision, in the order above.
const std::vector<Precision>& all_precisions();

// The math mode of each class of library operations under `p`.
MathModes math_modes(Precision p);

}  // namespace ptc
