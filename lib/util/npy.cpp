#include "ptc/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "ptc/error.h"

namespace ptc {
namespace {

struct Descr {
  const char* code;
  DType dtype;
};
constexpr Descr kDescrs[] = {
    {"<f4", DType::Float32}, {"<f8", DType::Float64}, {"<f2", DType::Float16}, {"<i8", DType::Int64},
    {"<i4", DType::Int32},   {"<i2", DType::Int16},   {"|i1", DType::Int8},    {"|u1", DType::UInt8},
    {"|b1", DType::Bool},
};

std::string header_value(const std::string& h, const std::string& key) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t colon = h.find(':', k);
  if (colon == std::string::npos) return "";
  size_t b = h.find_first_not_of(' ', colon + 1);
  if (b == std::string::npos) return "";
  if (h[b] == '(') return h.substr(b, h.find(')', b) - b + 1);
  if (h[b] == '\'') return h.substr(b + 1, h.find('\'', b + 1) - b - 1);
  return h.substr(b, h.find_first_of(",}", b) - b);
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error(path, ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) user_error(path, ": not a .npy file");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    hstart = 10;
  } else {
    if (bytes.size() < 12) user_error(path, ": truncated .npy header");
    hlen = 0;
    for (int i = 0; i < 4; ++i) hlen |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    hstart = 12;
  }
  if (hstart + hlen > bytes.size()) user_error(path, ": truncated .npy header");
  std::string h = bytes.substr(hstart, hlen);
  NpyArray a;
  std::string descr = header_value(h, "descr");
  bool found = false;
  for (const auto& d : kDescrs)
    if (descr == d.code) {
      a.dtype = d.dtype;
      found = true;
    }
  if (!found) user_error(path, ": unsupported .npy dtype '", descr, "'");
  if (header_value(h, "fortran_order") != "False") user_error(path, ": Fortran-order arrays are not supported");
  std::string shape = header_value(h, "shape");
  std::stringstream ss(shape.size() >= 2 ? shape.substr(1, shape.size() - 2) : "");
  std::string tok;
  size_t numel = 1;
  while (std::getline(ss, tok, ',')) {
    if (tok.find_first_not_of(' ') == std::string::npos) continue;
    int64_t v = std::stoll(tok);
    if (v < 0) user_error(path, ": negative size in shape");
    a.shape.push_back(v);
    numel *= static_cast<size_t>(v);
  }
  size_t nbytes = numel * dtype_size(a.dtype);
  if (bytes.size() - hstart - hlen != nbytes)
    user_error(path, ": holds ", bytes.size() - hstart - hlen, " data bytes, its shape needs ", nbytes);
  a.data.resize(nbytes);
  std::memcpy(a.data.data(), bytes.data() + hstart + hlen, nbytes);
  return a;
}

void write_npy(const std::string& path, const NpyArray& a) {
  const char* descr = nullptr;
  for (const auto& d : kDescrs)
    if (d.dtype == a.dtype) descr = d.code;
  if (!descr) user_error(path, ": cannot write dtype ", dtype_name(a.dtype), " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 || i + 1 < a.shape.size() ? "," : "");
  shape += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary);
  if (!out) user_error(path, ": cannot write");
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(h.size());
  out.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
  out << h;
  out.write(reinterpret_cast<const char*>(a.data.data()), static_cast<std::streamsize>(a.data.size()));
  if (!out) user_error(path, ": write failed");
}

}  // namespace ptc
