#include "ptc/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "ptc/error.h"
#include "../runtime/cpu/ptc_half.h"  // the float16 / bfloat16 bit conversions the generated code uses

namespace ptc {
namespace {

struct DTypeRow {
  DType t;
  size_t size;
  const char* short_name;
  const char* name;
  int pt2;  // torch.export schema numbering
  int c10;  // c10::ScalarType numbering
};

constexpr DTypeRow kRows[] = {
    {DType::Bool, 1, "bool", "bool", 12, 11},
    {DType::UInt8, 1, "u8", "uint8", 1, 0},
    {DType::Int8, 1, "i8", "int8", 2, 1},
    {DType::Int16, 2, "i16", "int16", 3, 2},
    {DType::Int32, 4, "i32", "int32", 4, 3},
    {DType::Int64, 8, "i64", "int64", 5, 4},
    {DType::UInt16, 2, "u16", "uint16", 28, 27},
    {DType::Float16, 2, "f16", "float16", 6, 5},
    {DType::BFloat16, 2, "bf16", "bfloat16", 13, 15},
    {DType::Float32, 4, "f32", "float32", 7, 6},
    {DType::Float64, 8, "f64", "float64", 8, 7},
    {DType::Complex32, 4, "c32", "complex32", 9, 8},
    {DType::Complex64, 8, "c64", "complex64", 10, 9},
    {DType::Complex128, 16, "c128", "complex128", 11, 10},
    {DType::Float8E4M3FN, 1, "f8e4m3fn", "float8_e4m3fn", 29, 24},
    {DType::Float8E5M2, 1, "f8e5m2", "float8_e5m2", 30, 23},
    {DType::Float8E4M3FNUZ, 1, "f8e4m3fnuz", "float8_e4m3fnuz", 31, 26},
    {DType::Float8E5M2FNUZ, 1, "f8e5m2fnuz", "float8_e5m2fnuz", 32, 25},
};

const DTypeRow& row(DType t) {
  for (const auto& r : kRows)
    if (r.t == t) return r;
  return kRows[0];  // unreachable: every enumerator has a row
}

}  // namespace

size_t dtype_size(DType t) { return row(t).size; }
const char* dtype_short(DType t) { return row(t).short_name; }
const char* dtype_name(DType t) { return row(t).name; }

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::Float16: case DType::BFloat16: case DType::Float32: case DType::Float64:
    case DType::Float8E4M3FN: case DType::Float8E5M2: case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2FNUZ:
      return true;
    default:
      return false;
  }
}

bool dtype_is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

DType dtype_compute(DType t) { return dtype_is_half(t) ? DType::Float32 : t; }

bool dtype_is_complex(DType t) {
  return t == DType::Complex32 || t == DType::Complex64 || t == DType::Complex128;
}

std::optional<DType> dtype_from_pt2(int64_t code) {
  for (const auto& r : kRows)
    if (r.pt2 == code) return r.t;
  return std::nullopt;
}

std::optional<DType> dtype_from_c10(int64_t code) {
  for (const auto& r : kRows)
    if (r.c10 == code) return r.t;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(const std::string& raw) {
  std::string n = raw;
  if (n.rfind("torch.", 0) == 0) n = n.substr(6);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::pair<const char*, DType> kAliases[] = {
      {"float", DType::Float32}, {"double", DType::Float64}, {"half", DType::Float16},
      {"long", DType::Int64},    {"int", DType::Int32},      {"short", DType::Int16},
      {"byte", DType::UInt8},    {"char", DType::Int8},      {"cfloat", DType::Complex64},
  };
  for (const auto& [alias, t] : kAliases)
    if (n == alias) return t;
  for (const auto& r : kRows)
    if (n == r.name || n == r.short_name) return r.t;
  return std::nullopt;
}

double read_element(const std::byte* p, DType t) {
  switch (t) {
    case DType::Float32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::Float64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::Int64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::Int16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::Int8: return static_cast<double>(static_cast<int8_t>(*p));
    case DType::UInt8: return static_cast<double>(static_cast<uint8_t>(*p));
    case DType::Bool: return *p != std::byte{0} ? 1 : 0;
    case DType::Float16: { uint16_t b; std::memcpy(&b, p, 2); return ptc_rt::half_bits_to_float(b); }
    case DType::BFloat16: { uint16_t b; std::memcpy(&b, p, 2); return ptc_rt::bfloat16_bits_to_float(b); }
    default: break;
  }
  PTC_CHECK(false, "reading dtype ", dtype_name(t), " is not supported");
  return 0;
}


template <class I>
I to_int(double v) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}


void write_element(std::byte* p, DType t, double v) {
  switch (t) {
    case DType::Float32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case DType::Float64: std::memcpy(p, &v, 8); return;
    case DType::Int64: { int64_t i = to_int<int64_t>(v); std::memcpy(p, &i, 8); return; }
    case DType::Int32: { int32_t i = to_int<int32_t>(v); std::memcpy(p, &i, 4); return; }
    case DType::Int16: { int16_t i = to_int<int16_t>(v); std::memcpy(p, &i, 2); return; }
    // uint8 wraps like a C cast from an integer (torch's behaviour for in-range int values).
    case DType::Int8: *p = static_cast<std::byte>(to_int<int8_t>(v)); return;
    case DType::UInt8: *p = static_cast<std::byte>(static_cast<uint8_t>(to_int<int64_t>(v))); return;
    case DType::Bool: *p = static_cast<std::byte>(v != 0 ? 1 : 0); return;
    // Through float: double -> float rounds first (a double rounding, off by one unit in the last
    // place only for a double exactly between two halves' neighbours).
    case DType::Float16: { uint16_t b = ptc_rt::float_to_half_bits(static_cast<float>(v)); std::memcpy(p, &b, 2); return; }
    case DType::BFloat16: { uint16_t b = ptc_rt::float_to_bfloat16_bits(static_cast<float>(v)); std::memcpy(p, &b, 2); return; }
    default: break;
  }
  PTC_CHECK(false, "writing dtype ", dtype_name(t), " is not supported");
}

void read_elements(const std::byte* p, DType t, double* out, size_t n) {
  switch (t) {
    case DType::Float32:
      for (size_t i = 0; i < n; ++i) { float v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; }
      return;
    case DType::BFloat16:
      for (size_t i = 0; i < n; ++i) { uint16_t b; std::memcpy(&b, p + 2 * i, 2); out[i] = ptc_rt::bfloat16_bits_to_float(b); }
      return;
    case DType::Float16:
      for (size_t i = 0; i < n; ++i) { uint16_t b; std::memcpy(&b, p + 2 * i, 2); out[i] = ptc_rt::half_bits_to_float(b); }
      return;
    default:
      for (size_t i = 0; i < n; ++i) out[i] = read_element(p + i * dtype_size(t), t);
  }
}

void write_elements(std::byte* p, DType t, const double* in, size_t n) {
  switch (t) {
    case DType::Float32:
      for (size_t i = 0; i < n; ++i) { float f = static_cast<float>(in[i]); std::memcpy(p + 4 * i, &f, 4); }
      return;
    case DType::BFloat16:
      for (size_t i = 0; i < n; ++i) { uint16_t b = ptc_rt::float_to_bfloat16_bits(static_cast<float>(in[i])); std::memcpy(p + 2 * i, &b, 2); }
      return;
    case DType::Float16:
      for (size_t i = 0; i < n; ++i) { uint16_t b = ptc_rt::float_to_half_bits(static_cast<float>(in[i])); std::memcpy(p + 2 * i, &b, 2); }
      return;
    default:
      for (size_t i = 0; i < n; ++i) write_element(p + i * dtype_size(t), t, in[i]);
  }
}

std::string Device::str() const {
  std::string s;
  switch (type) {
    case Type::CPU: s = "cpu"; break;
    case Type::CUDA: s = "cuda"; break;
    case Type::Meta: s = "meta"; break;
    case Type::Other: s = "other"; break;
  }
  if (index >= 0) s += ":" + std::to_string(index);
  return s;
}

}  // namespace ptc
