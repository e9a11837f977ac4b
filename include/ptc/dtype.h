// Element types and devices, with the numberings of the formats ptc reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ptc {

enum class DType : uint8_t {
  Bool, UInt8, Int8, Int16, Int32, Int64, UInt16,
  Float16, BFloat16, Float32, Float64,
  Complex32, Complex64, Complex128,
  Float8E4M3FN, Float8E5M2, Float8E4M3FNUZ, Float8E5M2FNUZ,
};

size_t dtype_size(DType t);
const char* dtype_short(DType t);  // "f32", "i64", "bool", ...
const char* dtype_name(DType t);   // torch's name: "float32", "int64", "bool", ...
bool dtype_is_float(DType t);
bool dtype_is_complex(DType t);
// float16 or bfloat16: stored in two bytes, computed in float32 (dtype_compute).
bool dtype_is_half(DType t);
// The dtype arithmetic on `t` runs in: float32 for the half dtypes, else `t` itself.
DType dtype_compute(DType t);

// The ScalarType numbering of torch.export's schema (PT2_FORMAT.md), not c10's.
std::optional<DType> dtype_from_pt2(int64_t code);
// c10::ScalarType numbering (TorchScript constants, `ScalarType` arguments in .pt files).
std::optional<DType> dtype_from_c10(int64_t code);
// "float32", "torch.float32", "float", "f32", "long", ...
std::optional<DType> dtype_from_name(const std::string& name);

// One element of dtype `t` at `p` as a double, and back (ints truncate and saturate like a
// C cast of an in-range value; bool is != 0). For reference code: the loop-IR interpreter and
// constant folding; float16 / bfloat16 round to nearest even. Internal error for dtypes without a
// host type (complex, fp8).
double read_element(const std::byte* p, DType t);
void write_element(std::byte* p, DType t, double v);
// The same for n consecutive elements (one dtype dispatch: whole weights at compile time).
void read_elements(const std::byte* p, DType t, double* out, size_t n);
void write_elements(std::byte* p, DType t, const double* in, size_t n);

struct Device {
  enum class Type : uint8_t { CPU, CUDA, Meta, Other };
  Type type = Type::CPU;
  int index = -1;  // -1: unspecified
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
};

}  // namespace ptc
