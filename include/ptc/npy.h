// NumPy .npy files (format 1.0/2.0, little-endian, C order): ptc run's inputs and outputs and
// the tests' reference data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ptc/dtype.h"

namespace ptc {

struct NpyArray {
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // raw little-endian elements, C order
};

// Throws UserError naming the file on anything malformed (bad magic, unsupported dtype or
// Fortran order, size mismatch).
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const NpyArray& a);

}  // namespace ptc
