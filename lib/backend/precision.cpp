#include "ptc/precision.h"

namespace ptc {

const std::vector<Precision>& all_precisions() {
  static const std::vector<Precision> all{Precision::FP32, Precision::TF32Conv, Precision::TF32, Precision::BF16, Precision::FP16};
  return all;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32Conv: return "tf32-conv";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

std::optional<Precision> parse_precision(const std::string& name) {
  for (Precision p : all_precisions())
    if (name == precision_name(p)) return p;
  return std::nullopt;
}

MathModes math_modes(Precision p) {
  MathModes m;
  switch (p) {
    case Precision::FP32: break;
    case Precision::TF32Conv: m.conv = MathMode::TF32; break;
    case Precision::TF32: m.gemm = m.conv = m.attention = MathMode::TF32; break;
    case Precision::BF16: m.gemm = m.conv = m.attention = MathMode::BF16; break;
    case Precision::FP16: m.gemm = m.conv = m.attention = MathMode::FP16; break;
  }
  return m;
}

}  // namespace ptc
