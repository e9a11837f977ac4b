// Runs a model that ptc_add_model() compiled on one input (.npy, float32) and compares the
// output with the expected one (.npy, e.g. computed by PyTorch eager): exits 0 when every element
// is within 1e-4 (absolute) + 1e-4 (relative).
//
//   run_model input.npy expected.npy
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "mlp.h"  // the generated header: the C ABI (ptc_open, ptc_run, ...) and a typed wrapper

namespace {

// A float32, C-order .npy file (format 1.0 / 2.0).
bool read_npy(const char* path, std::vector<float>& data, std::vector<int64_t>& shape) {
  std::ifstream f(path, std::ios::binary);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return false;
  uint32_t header_len = 0;
  unsigned char len[4] = {};
  f.read(reinterpret_cast<char*>(len), magic[6] == 1 ? 2 : 4);
  header_len = len[0] | len[1] << 8 | len[2] << 16 | static_cast<uint32_t>(len[3]) << 24;
  std::string header(header_len, '\0');
  if (!f.read(&header[0], header_len)) return false;
  if (header.find("'<f4'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos) return false;
  size_t open = header.find('(', header.find("'shape'")), close = header.find(')', open);
  size_t numel = 1;
  shape.clear();
  for (size_t p = open + 1; p < close;) {
    size_t end = header.find_first_of(",)", p);
    std::string tok = header.substr(p, end - p);
    if (tok.find_first_not_of(' ') != std::string::npos) {
      shape.push_back(std::stoll(tok));
      numel *= static_cast<size_t>(shape.back());
    }
    p = end + 1;
  }
  data.resize(numel);
  return static_cast<bool>(f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(numel * sizeof(float))));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s input.npy expected.npy\n", argv[0]);
    return 2;
  }
  std::vector<float> x, expected;
  std::vector<int64_t> x_shape, expected_shape;
  if (!read_npy(argv[1], x, x_shape) || !read_npy(argv[2], expected, expected_shape)) {
    std::fprintf(stderr, "cannot read %s or %s as float32 .npy\n", argv[1], argv[2]);
    return 2;
  }
  ptc_model* model = nullptr;
  if (ptc_open(nullptr, &model) != PTC_OK) {
    std::fprintf(stderr, "ptc_open: %s\n", ptc_last_error());
    return 1;
  }
  ptc_tensor in{x.data(), PTC_FLOAT32, static_cast<int32_t>(x_shape.size()), x_shape.data()};
  std::vector<int64_t> out_shape(expected_shape.size());
  if (ptc_output_shape(model, 1, &in, 0, out_shape.data()) != PTC_OK || out_shape != expected_shape) {
    std::fprintf(stderr, "output shape: %s\n", ptc_last_error());
    return 1;
  }
  std::vector<float> y(expected.size());
  ptc_tensor out{y.data(), PTC_FLOAT32, static_cast<int32_t>(out_shape.size()), out_shape.data()};
  if (ptc_run(model, 1, &in, 1, &out) != PTC_OK) {
    std::fprintf(stderr, "ptc_run: %s\n", ptc_last_error());
    return 1;
  }
  ptc_close(model);
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    double err = std::fabs(static_cast<double>(y[i]) - expected[i]);
    worst = std::max(worst, err);
    bad += !(err <= 1e-4 + 1e-4 * std::fabs(expected[i]));
  }
  std::printf("%zu outputs, max |error| %.3g, %zu outside tolerance\n", y.size(), worst, bad);
  return bad == 0 ? 0 : 1;
}
