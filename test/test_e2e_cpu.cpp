// End to end on the CPU: `ptc compile` each fixture, load the library, run every recorded case
// and compare with PyTorch eager; the library's dependencies; bad run-time input; threads.
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <filesystem>

#include "ptc/npy.h"
#include "ptc/runtime.h"
#include "test_util.h"

using nlohmann::json;
using namespace ptc;

namespace {

struct Lib {
  void* h = nullptr;
  ptc_model* m = nullptr;
  decltype(&ptc_run) run = nullptr;
  decltype(&ptc_output_shape) output_shape = nullptr;
  decltype(&ptc_last_error) last_error = nullptr;
  decltype(&ptc_num_outputs) num_outputs = nullptr;
  decltype(&ptc_input_info) input_info = nullptr;

  explicit Lib(const std::string& path) {
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(h);
    run = reinterpret_cast<decltype(run)>(dlsym(h, "ptc_run"));
    output_shape = reinterpret_cast<decltype(output_shape)>(dlsym(h, "ptc_output_shape"));
    last_error = reinterpret_cast<decltype(last_error)>(dlsym(h, "ptc_last_error"));
    num_outputs = reinterpret_cast<decltype(num_outputs)>(dlsym(h, "ptc_num_outputs"));
    input_info = reinterpret_cast<decltype(input_info)>(dlsym(h, "ptc_input_info"));
    auto open = reinterpret_cast<decltype(&ptc_open)>(dlsym(h, "ptc_open"));
    REQUIRE((run && output_shape && last_error && num_outputs && open && input_info));
    REQUIRE(open(nullptr, &m) == PTC_OK);
  }
  ~Lib() {
    reinterpret_cast<decltype(&ptc_close)>(dlsym(h, "ptc_close"))(m);
    dlclose(h);
  }
};

// The sanitizer builds' tests load generated code built with the same sanitizers and compiler
// (--sanitize, --cxx), so ASan/UBSan (or TSan) watch the kernels and input checks too, not only
// ptc (PTC_TEST_SANITIZE and PTC_TEST_CXX come from CMake).
const std::string kSanitize =
    std::string(PTC_TEST_SANITIZE).empty() ? "" : std::string(" --sanitize ") + PTC_TEST_SANITIZE + " --cxx " + PTC_TEST_CXX;

std::string compile(const std::string& file, const std::string& flags = "", const std::string& tag = "") {
  std::string out = test::temp_dir() + "/" + file + tag + ".so";
  auto r = test::run_ptc("compile -q " + test::fixture(file) + " -o " + out + kSanitize + flags);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return out;
}

int code_of(DType t) {
  switch (t) {
    case DType::Float32: return PTC_FLOAT32;
    case DType::Float16: return PTC_FLOAT16;
    case DType::BFloat16: return PTC_BFLOAT16;
    case DType::Int64: return PTC_INT64;
    default: FAIL("no test dtype code for " << dtype_name(t)); return 0;
  }
}

ptc_tensor as_tensor(NpyArray& a) { return ptc_tensor{a.data.data(), code_of(a.dtype), static_cast<int32_t>(a.shape.size()), a.shape.data()}; }

// A recorded array in its recorded dtype: float16 / bfloat16 arrays are stored as float32 .npy
// files (exact), and converted here.
NpyArray read_recorded(const json& entry) {
  NpyArray a = read_npy(test::fixture(entry["file"].get<std::string>()));
  DType want = *dtype_from_name(entry["dtype"].get<std::string>());
  if (want == a.dtype) return a;
  REQUIRE(a.dtype == DType::Float32);
  const size_t n = a.data.size() / 4;
  std::vector<std::byte> bytes(n * dtype_size(want));
  for (size_t i = 0; i < n; ++i) write_element(bytes.data() + i * dtype_size(want), want, read_element(a.data.data() + i * 4, DType::Float32));
  a.data = std::move(bytes);
  a.dtype = want;
  return a;
}

// Runs every case of `name`'s record through the library; returns the worst error beyond rtol.
void check_cases(Lib& lib, const std::string& name) {
  json expect = json::parse(test::read_file(test::fixture(name + ".expect.json")));
  double atol = expect["tolerance"]["atol"].get<double>(), rtol = expect["tolerance"]["rtol"].get<double>();
  for (const auto& c : expect["cases"]) {
    std::vector<NpyArray> ins;
    for (const auto& f : c["inputs"]) ins.push_back(read_recorded(f));
    std::vector<ptc_tensor> tin;
    for (auto& a : ins) tin.push_back(as_tensor(a));
    size_t n_out = c["outputs"].size();
    REQUIRE(lib.num_outputs(lib.m) == static_cast<int>(n_out));
    std::vector<NpyArray> refs;
    std::vector<std::vector<int64_t>> shapes(n_out);
    std::vector<std::vector<std::byte>> outs(n_out);
    std::vector<ptc_tensor> tout;
    for (size_t i = 0; i < n_out; ++i) {
      refs.push_back(read_recorded(c["outputs"][i]));
      shapes[i].resize(refs[i].shape.size());
      REQUIRE(lib.output_shape(lib.m, static_cast<int>(tin.size()), tin.data(), static_cast<int>(i), shapes[i].data()) == PTC_OK);
      CHECK(shapes[i] == refs[i].shape);
      outs[i].resize(refs[i].data.size());
      tout.push_back(ptc_tensor{outs[i].data(), code_of(refs[i].dtype), static_cast<int32_t>(shapes[i].size()), shapes[i].data()});
    }
    INFO(name << " inputs " << c["inputs"].dump());
    REQUIRE(lib.run(lib.m, static_cast<int>(tin.size()), tin.data(), static_cast<int>(n_out), tout.data()) == PTC_OK);
    for (size_t i = 0; i < n_out; ++i) {
      const DType dt = refs[i].dtype;
      const size_t item = dtype_size(dt), n = outs[i].size() / item;
      const std::byte* want = refs[i].data.data();
      double worst = 0;
      for (size_t j = 0; j < n; ++j) {
        double got = read_element(outs[i].data() + j * item, dt), w = read_element(want + j * item, dt);
        worst = std::max(worst, std::fabs(got - w) - rtol * std::fabs(w));
      }
      CHECK(worst <= atol);
    }
  }
}

}  // namespace

TEST_CASE("compiled fixtures match PyTorch eager (fp32, atol/rtol from each record)", "[e2e]") {
  for (const char* name : {"mlp", "mlp_dyn", "small_cnn", "mbv2_dyn", "tiny_tfm", "tfm_dyn", "index_ops", "mha", "cnn_pool"})
    for (const char* suffix : {".pt2", ".core.pt2"}) {
      std::string file = std::string(name) + suffix;
      INFO(file);
      Lib lib(compile(file));
      check_cases(lib, name);
    }
}

TEST_CASE("float16 / bfloat16 fixtures match PyTorch eager in their dtype (atol/rtol from each record)", "[e2e][half]") {
  // Half-precision storage, float32 compute: GEMMs, convolutions and attention read float32
  // copies of their weights (made at compile time) and round their results once.
  std::vector<std::string> files;
  for (const char* name : {"mlp_dyn_bf16", "small_cnn_f16", "tfm_dyn_bf16"}) {
    for (const char* suffix : {".pt2", ".core.pt2"}) {
      std::string file = std::string(name) + suffix;
      INFO(file);
      Lib lib(compile(file));
      check_cases(lib, name);
    }
#ifdef PTC_TEST_TORCHSCRIPT
    INFO(name << ".pt");
    Lib lib(compile(std::string(name) + ".pt"));
    check_cases(lib, name);
#endif
  }
}

TEST_CASE("ptc run reads float32 .npy files for bfloat16 inputs and writes bfloat16 outputs as float32", "[e2e][half]") {
  json expect = json::parse(test::read_file(test::fixture("mlp_dyn_bf16.expect.json")));
  const json& c = expect["cases"][0];
  std::string so = compile("mlp_dyn_bf16.pt2"), outdir = test::temp_dir() + "/run_bf16";
  auto r = test::run_ptc("run " + so + " --inputs " + test::fixture(c["inputs"][0]["file"].get<std::string>()) + " --outputs " + outdir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  NpyArray got = read_npy(outdir + "/out0.npy"), want = read_npy(test::fixture(c["outputs"][0]["file"].get<std::string>()));
  REQUIRE(got.dtype == DType::Float32);
  REQUIRE(got.shape == want.shape);
  const double atol = expect["tolerance"]["atol"].get<double>(), rtol = expect["tolerance"]["rtol"].get<double>();
  double worst = 0;
  for (size_t j = 0; j < got.data.size() / 4; ++j) {
    double g = read_element(got.data.data() + j * 4, DType::Float32), w = read_element(want.data.data() + j * 4, DType::Float32);
    worst = std::max(worst, std::fabs(g - w) - rtol * std::fabs(w));
    // every output element is a bfloat16 value
    std::byte b16[2];
    write_element(b16, DType::BFloat16, g);
    CHECK(read_element(b16, DType::BFloat16) == g);
  }
  CHECK(worst <= atol);
}

#ifdef PTC_TEST_TORCHSCRIPT
TEST_CASE("compiled TorchScript fixtures match PyTorch eager (dynamic ones at every recorded size)", "[e2e][torchscript]") {
  for (const char* name : {"mlp", "mlp_dyn", "small_cnn", "mbv2_dyn", "tiny_tfm", "tfm_dyn", "mha"}) {
    INFO(name);
    Lib lib(compile(std::string(name) + ".pt"));
    check_cases(lib, name);
  }
}
#endif

TEST_CASE("a compiled library links no libtorch, libc10 or Python", "[e2e]") {
  std::string so = compile("tiny_tfm.pt2"), out;
  REQUIRE(test::run_shell("ldd " + so, out) == 0);
  INFO(out);
  CHECK((out.find("libgomp") != std::string::npos || out.find("libomp") != std::string::npos));  // gcc / clang builds
  CHECK(out.find("torch") == std::string::npos);
  CHECK(out.find("libc10") == std::string::npos);
  CHECK(out.find("python") == std::string::npos);
}

TEST_CASE("bad run-time input gets an error code and a message", "[e2e]") {
  Lib lib(compile("mlp_dyn.pt2"));
  std::vector<float> x(8 * 64, 1.f), y(8 * 64);
  int64_t xs[2] = {8, 64}, ys[2] = {8, 64};
  ptc_tensor in{x.data(), PTC_FLOAT32, 2, xs}, out{y.data(), PTC_FLOAT32, 2, ys};
  REQUIRE(lib.run(lib.m, 1, &in, 1, &out) == PTC_OK);
  auto expect_error = [&](ptc_tensor i, ptc_tensor o, int n_in, const char* fragment) {
    CHECK(lib.run(lib.m, n_in, &i, 1, &o) == PTC_ERROR);
    CHECK(std::string(lib.last_error()).find(fragment) != std::string::npos);
  };
  ptc_tensor bad = in;
  bad.dtype = PTC_FLOAT64;
  expect_error(bad, out, 1, "input x: dtype code 8, expected 7");
  bad = in;
  bad.rank = 3;
  expect_error(bad, out, 1, "input x: rank 3, expected 2");
  int64_t big[2] = {2000, 64};
  bad = in;
  bad.sizes = big;
  expect_error(bad, out, 1, "size s77 = 2000 is outside its range [1, 1024]");
  int64_t wrong_inner[2] = {8, 63};
  bad = in;
  bad.sizes = wrong_inner;
  expect_error(bad, out, 1, "input x: size [8, 63] does not match: dim 1 must be 64");
  bad = in;
  bad.data = nullptr;
  expect_error(bad, out, 1, "input x: data pointer is null");
  expect_error(in, out, 2, "expected 1 inputs, got 2");
  int64_t wrong_out[2] = {9, 64};
  ptc_tensor bad_out = out;
  bad_out.sizes = wrong_out;
  expect_error(in, bad_out, 1, "output layer_norm: size [9, 64] does not match");
  CHECK(lib.run(nullptr, 1, &in, 1, &out) == PTC_ERROR);
}

// Data-dependent indices out of range (torch raises IndexError) fail the run with the node's
// name; nothing is read outside the weights (the sanitizer build checks that too).
TEST_CASE("an embedding id out of range fails the run with a message naming the node", "[e2e]") {
  Lib lib(compile("index_ops.pt2"));
  json expect = json::parse(test::read_file(test::fixture("index_ops.expect.json")));
  const auto& c = expect["cases"][0];
  NpyArray ids = read_npy(test::fixture(c["inputs"][0]["file"].get<std::string>()));
  NpyArray ref = read_npy(test::fixture(c["outputs"][0]["file"].get<std::string>()));
  std::vector<float> y(ref.data.size() / 4);
  ptc_tensor ti = as_tensor(ids), to{y.data(), PTC_FLOAT32, static_cast<int32_t>(ref.shape.size()), ref.shape.data()};
  REQUIRE(lib.run(lib.m, 1, &ti, 1, &to) == PTC_OK);
  int64_t* data = reinterpret_cast<int64_t*>(ids.data.data());
  for (int64_t bad : {int64_t(50), int64_t(-1), int64_t(1) << 62, std::numeric_limits<int64_t>::min()}) {
    int64_t saved = data[1];
    data[1] = bad;
    CHECK(lib.run(lib.m, 1, &ti, 1, &to) == PTC_ERROR);
    std::string err = lib.last_error();
    INFO(err);
    CHECK(err.find("node 'embedding': index " + std::to_string(bad) + " is out of range for a dimension of size 50") != std::string::npos);
    data[1] = saved;
  }
  CHECK(lib.run(lib.m, 1, &ti, 1, &to) == PTC_OK);  // the handle still works
}

// An unbounded symbol lets the caller pick any size: sizes whose byte counts would overflow (or
// exceed 2^47) are refused before anything is allocated or indexed.
TEST_CASE("sizes whose products overflow are refused for an unbounded symbol", "[e2e]") {
  std::string pt2 = test::temp_dir() + "/mlp_unbounded.pt2";
  test::rewrite_zip(test::fixture("mlp_dyn.pt2"), pt2, [](const std::string& e, const std::string& b) -> std::optional<std::string> {
    if (e != "mlp_dyn/models/model.json") return b;
    json j = json::parse(b);
    j["range_constraints"]["s77"]["max_val"] = "int_oo";
    return j.dump();
  });
  std::string so = test::temp_dir() + "/mlp_unbounded.so";
  auto r = test::run_ptc("compile -q " + pt2 + " -o " + so + kSanitize);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  Lib lib(so);
  std::vector<float> x(4 * 64, 0.5f), y(4 * 64);
  int64_t ok[2] = {4, 64};
  ptc_tensor in{x.data(), PTC_FLOAT32, 2, ok}, out{y.data(), PTC_FLOAT32, 2, ok};
  REQUIRE(lib.run(lib.m, 1, &in, 1, &out) == PTC_OK);
  for (int64_t huge : {int64_t(1) << 40, int64_t(1) << 55, std::numeric_limits<int64_t>::max()}) {
    int64_t sizes[2] = {huge, 64};
    in.sizes = sizes;
    out.sizes = sizes;
    int64_t shape[2];
    CHECK(lib.output_shape(lib.m, 1, &in, 0, shape) == PTC_ERROR);
    CHECK(lib.run(lib.m, 1, &in, 1, &out) == PTC_ERROR);
    std::string err = lib.last_error();
    INFO(err);
    CHECK((err.find("more than 2^47") != std::string::npos || err.find("is too large") != std::string::npos));
  }
}

// Stress: one handle shared by 8 threads for PTC_STRESS_SECONDS (default 2; e.g. 10 by hand),
// each thread cycling through both recorded sizes (different arena plans per run) and checking
// every result. Under TSan (the sanitizer builds in scripts/test.sh) this is the race check.
TEST_CASE("one model handle runs from 8 threads at once for a bounded time with correct results", "[e2e][stress]") {
  Lib lib(compile("tfm_dyn.pt2"));
  std::vector<NpyArray> ins, refs;
  for (int c = 0; c < 2; ++c) {
    ins.push_back(read_npy(test::fixture("ref/tfm_dyn.case" + std::to_string(c) + ".in0.npy")));
    refs.push_back(read_npy(test::fixture("ref/tfm_dyn.case" + std::to_string(c) + ".out0.npy")));
  }
  double seconds = 2;
  if (const char* s = std::getenv("PTC_STRESS_SECONDS")) seconds = std::atof(s);
  const auto stop = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<int> failures{0};
  std::atomic<long> runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = t; std::chrono::steady_clock::now() < stop || rep < t + 2; ++rep) {
        NpyArray& in = ins[rep % 2];
        NpyArray& ref = refs[rep % 2];
        std::vector<float> y(ref.data.size() / 4, -1.f), want(y.size());
        std::memcpy(want.data(), ref.data.data(), ref.data.size());
        ptc_tensor ti = as_tensor(in);
        ptc_tensor to{y.data(), PTC_FLOAT32, 3, ref.shape.data()};
        if (lib.run(lib.m, 1, &ti, 1, &to) != PTC_OK) ++failures;
        for (size_t j = 0; j < y.size(); ++j)
          if (std::fabs(y[j] - want[j]) > 1e-4 + 1e-4 * std::fabs(want[j])) {
            ++failures;
            break;
          }
        ++runs;
      }
    });
  for (auto& t : threads) t.join();
  INFO(runs << " runs in " << seconds << " s");
  CHECK(runs >= 16);
  CHECK(failures == 0);
}

#ifdef PTC_TEST_ONEDNN
std::string ldd(const std::string& so) {
  std::string out;
  REQUIRE(test::run_shell("ldd " + so, out) == 0);
  return out;
}

// The CPU's two convolution layouts: channels-last on oneDNN (the default for nets whose
// two or more convolutions are all ungrouped or depthwise, with bias / residual / ReLU / ReLU6 as its
// post-ops) and NCHW on ptc's own kernels (--no-channels-last, and sanitized builds). With
// --no-library-gemm too (their classifier's linear layer on ptc's GEMM) the library needs no oneDNN.
TEST_CASE("CPU convolutions match eager channels-last on oneDNN and NCHW on ptc's kernels; the manifest and ldd say which", "[e2e][onednn]") {
  if (!kSanitize.empty()) return;  // oneDNN is not instrumented (sanitized compiles stay NCHW)
  for (const char* name : {"small_cnn", "mbv2_dyn", "cnn_pool"}) {
    INFO(name);
    const std::string nhwc = compile(std::string(name) + ".pt2", " --channels-last", ".cl"),
                      nchw = compile(std::string(name) + ".pt2", " --no-channels-last --no-library-gemm", ".nchw");
    {
      Lib lib(nhwc);
      check_cases(lib, name);
    }
    {
      Lib lib(nchw);
      check_cases(lib, name);
    }
    CHECK(test::run_ptc("inspect --json " + nhwc).output.find("\"channels_last\": true") != std::string::npos);
    CHECK(test::run_ptc("inspect --json " + nchw).output.find("\"channels_last\": false") != std::string::npos);
    CHECK(ldd(nhwc).find("libdnnl") != std::string::npos);
    CHECK(ldd(nchw).find("libdnnl") == std::string::npos);
  }
  // the default: channels-last for nets of two or more convolutions, every one ungrouped or depthwise
  const std::string so = compile("small_cnn.pt2", "", ".default");
  CHECK(test::run_ptc("inspect --json " + so).output.find("\"channels_last\": true") != std::string::npos);
}

// --precision bf16: the operands of channels-last convolutions and of linear layers on oneDNN hold
// bf16 values, so where the CPU has AMX (or PTC_CPU_BF16=1) oneDNN computes them on bf16
// operands, else in fp32: the same values either way (up to the order of the sums). oneDNN's
// verbose log shows which primitive ran (PTC_CPU_ONEDNN_MATMUL=1: the small MLP's products too).
TEST_CASE("bf16 precision: oneDNN convolutions and products run both dispatch paths, pick what PTC_CPU_BF16 says and agree", "[e2e][onednn]") {
  if (!kSanitize.empty()) return;
  struct Case {
    const char *name, *flags, *primitive;
  };
  for (const Case& c : {Case{"small_cnn", " --channels-last --precision bf16", "convolution"}, Case{"mlp_dyn", " --precision bf16", "matmul"}}) {
    INFO(c.name);
    const std::string so = compile(std::string(c.name) + ".pt2", c.flags, ".bf16");
    const std::string in = test::fixture(std::string("ref/") + c.name + ".case0.in0.npy"), dir = test::temp_dir() + "/bf16_paths_" + c.name;
    auto run = [&](const std::string& force) {
      auto r = test::run_ptc_env("ONEDNN_VERBOSE=1 PTC_CPU_ONEDNN_MATMUL=1 PTC_CPU_BF16=" + force + " ",
                                 "run " + so + " --inputs " + in + " --outputs " + dir + "/" + force);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      return r.output;
    };
    const std::string f32 = run("0"), bf16 = run("1");
    CHECK(f32.find(c.primitive) != std::string::npos);
    CHECK(f32.find("src_bf16") == std::string::npos);
    // Where oneDNN has bf16 kernels for this CPU (AVX512-BF16 or AMX); elsewhere it falls back to fp32.
    const std::string cpuinfo = test::read_file("/proc/cpuinfo");
    if (cpuinfo.find("avx512_bf16") != std::string::npos || cpuinfo.find("amx_bf16") != std::string::npos) {
      CHECK(bf16.find("src_bf16") != std::string::npos);
      CHECK(bf16.find(c.primitive) != std::string::npos);
    }
    // The convolutions' activations are stored in bf16 (ConvNhwcArgs::bf16_io): the bf16
    // primitives write them as they are; the fp32 path widens them per call and rounds its result.
    if (std::string(c.primitive) == "convolution") {
      if (bf16.find("src_bf16") != std::string::npos) CHECK(bf16.find("dst_bf16") != std::string::npos);
      CHECK(f32.find("dst_bf16") == std::string::npos);
    }
    NpyArray a = read_npy(dir + "/0/out0.npy"), b = read_npy(dir + "/1/out0.npy");
    REQUIRE(a.data.size() == b.data.size());
    const float* x = reinterpret_cast<const float*>(a.data.data());
    const float* y = reinterpret_cast<const float*>(b.data.data());
    double worst = 0;
    for (size_t j = 0; j < a.data.size() / 4; ++j) worst = std::max(worst, std::fabs(double(x[j]) - y[j]) / (1e-3 + std::fabs(double(x[j]))));
    CHECK(worst < 1e-2);  // the bf16 outputs' own rounding; not autocast's error against fp32
  }
}

// Linear layers (a constant weight) run on oneDNN's matmul with their bias, residual and GELU /
// SiLU as post-ops where the product is large enough; PTC_CPU_ONEDNN_MATMUL=1 / 0 forces either
// path, and both match eager. oneDNN's verbose log shows which ran. --no-library-gemm compiles
// them on ptc's own GEMM.
TEST_CASE("linear layers run on oneDNN's matmul or ptc's GEMM as PTC_CPU_ONEDNN_MATMUL says, and both match eager", "[e2e][onednn]") {
  if (!kSanitize.empty()) return;
  for (const char* name : {"mlp_dyn", "tfm_dyn", "tiny_tfm"}) {
    INFO(name);
    const std::string report = test::temp_dir() + "/" + name + ".mm.json";
    for (const char* force : {"1", "0"}) {
      const std::string so = compile(std::string(name) + ".pt2", " --report " + report, std::string(".mm") + force);
      json r = json::parse(test::read_file(report));
      int on_onednn = 0, gemms = 0;
      for (const json& k : r["kernels"])
        if (k["kind"] == "gemm") ++gemms, on_onednn += k.value("library", "") == "oneDNN";
      CHECK(gemms > 0);
      CHECK(on_onednn == gemms);  // each linear's epilogue (bias, residual, GELU, SiLU) is one oneDNN runs
      auto run = test::run_ptc_env(std::string("ONEDNN_VERBOSE=1 PTC_CPU_ONEDNN_MATMUL=") + force + " ",
                                   "run " + so + " --inputs " + test::fixture(std::string("ref/") + name + ".case0.in0.npy") + " --outputs " +
                                       test::temp_dir() + "/mm_" + name + force);
      INFO(run.output);
      REQUIRE(run.exit_code == 0);
      CHECK((run.output.find("matmul") != std::string::npos) == (force[0] == '1'));
      ::setenv("PTC_CPU_ONEDNN_MATMUL", force, 1);  // read once by each library, at its first product
      Lib lib(so);
      check_cases(lib, name);
      ::unsetenv("PTC_CPU_ONEDNN_MATMUL");
    }
  }
  const std::string report = test::temp_dir() + "/tfm_dyn.own.json";
  compile("tfm_dyn.pt2", " --no-library-gemm --report " + report, ".own");
  const json own = json::parse(test::read_file(report));  // (kept alive: the loop reads into it)
  int own_gemms = 0;
  for (const json& k : own["kernels"]) {
    own_gemms += k["kind"] == "gemm";
    CHECK(k.value("library", "") != "oneDNN");
  }
  CHECK(own_gemms > 0);
}

// --precision bf16 keeps linear layers in bf16 (MatmulArgs::bf16_io): bf16 operands and results,
// with autocast's bias, rounding and activation run once as the primitive's post-ops. Every one
// runs on oneDNN (whatever PTC_CPU_ONEDNN_MATMUL says); oneDNN's bf16 matmul (PTC_CPU_BF16=1),
// the fp32 matmul on widened operands (PTC_CPU_BF16=0) and, on AMX CPUs, ptc's AMX kernel
// (PTC_CPU_AMX=1) agree up to the order of the sums.
TEST_CASE("bf16 precision: linear layers stay in bf16 on oneDNN; its bf16 and fp32 paths and ptc's AMX kernel agree", "[e2e][onednn]") {
  if (!kSanitize.empty()) return;
  const std::string cpuinfo = test::read_file("/proc/cpuinfo");
  const bool has_bf16 = cpuinfo.find("avx512_bf16") != std::string::npos || cpuinfo.find("amx_bf16") != std::string::npos;
  const bool has_amx = cpuinfo.find("amx_bf16") != std::string::npos;
  for (const char* name : {"mlp_dyn", "tfm_dyn"}) {
    INFO(name);
    const std::string report = test::temp_dir() + "/" + name + ".bf16ep.json";
    const std::string so = compile(std::string(name) + ".pt2", " --precision bf16 --report " + report, ".bf16ep");
    int on_onednn = 0, gemms = 0;
    const json r = json::parse(test::read_file(report));
    for (const json& k : r["kernels"])
      if (k["kind"] == "gemm") ++gemms, on_onednn += k.value("library", "") == "oneDNN";
    CHECK(gemms > 0);
    CHECK(on_onednn == gemms);
    const std::string in = test::fixture(std::string("ref/") + name + ".case0.in0.npy"), dir = test::temp_dir() + "/bf16ep_" + name;
    auto run = [&](const std::string& tag, const std::string& env) {
      auto r = test::run_ptc_env("ONEDNN_VERBOSE=1 PTC_CPU_ONEDNN_MATMUL=0 " + env + " ", "run " + so + " --inputs " + in + " --outputs " + dir + "/" + tag);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      return r.output;
    };
    const std::string f32 = run("f32", "PTC_CPU_BF16=0"), bf16 = run("bf16", "PTC_CPU_BF16=1 PTC_CPU_AMX=0");
    CHECK(f32.find("matmul") != std::string::npos);  // (PTC_CPU_ONEDNN_MATMUL=0 does not apply)
    CHECK(f32.find("src_bf16") == std::string::npos);
    if (has_bf16) {
      CHECK(bf16.find("src_bf16") != std::string::npos);
      CHECK(bf16.find("dst_bf16") != std::string::npos);
    }
    // Every product on ptc's AMX kernel where the CPU has AMX: no oneDNN matmul runs then.
    const std::string amx = run("amx", "PTC_CPU_AMX=1");
    if (has_amx) CHECK(amx.find("matmul") == std::string::npos);
    auto worst = [&](const std::string& p, const std::string& q) {
      NpyArray a = read_npy(dir + "/" + p + "/out0.npy"), b = read_npy(dir + "/" + q + "/out0.npy");
      REQUIRE(a.data.size() == b.data.size());
      const float* x = reinterpret_cast<const float*>(a.data.data());
      const float* y = reinterpret_cast<const float*>(b.data.data());
      double w = 0, scale = 1e-6;
      for (size_t j = 0; j < a.data.size() / 4; ++j) w = std::max(w, std::fabs(double(x[j]) - y[j])), scale = std::max(scale, std::fabs(double(x[j])));
      return w / scale;
    };
    // bf16 roundings that flip between the sums' orders (and propagate), relative to the largest output
    CHECK(worst("f32", "bf16") < 2e-2);
    CHECK(worst("f32", "amx") < 2e-2);
  }
}

// oneDNN's call sites from several threads at once, at both recorded sizes: each site makes a
// primitive per input shape under its lock, and every run brings its own memory objects.
TEST_CASE("a channels-last CPU library runs from 4 threads at once at two sizes with correct results", "[e2e][onednn][stress]") {
  if (!kSanitize.empty()) return;
  Lib lib(compile("mbv2_dyn.pt2", " --channels-last", ".cl"));
  json expect = json::parse(test::read_file(test::fixture("mbv2_dyn.expect.json")));
  const double atol = expect["tolerance"]["atol"].get<double>(), rtol = expect["tolerance"]["rtol"].get<double>();
  std::vector<NpyArray> ins, refs;
  for (const json& c : expect["cases"]) {
    ins.push_back(read_recorded(c["inputs"][0]));
    refs.push_back(read_recorded(c["outputs"][0]));
  }
  REQUIRE(ins.size() >= 2);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 6; ++rep) {
        const size_t c = static_cast<size_t>(t + rep) % ins.size();
        std::vector<float> y(refs[c].data.size() / 4, -1.f);
        ptc_tensor ti = as_tensor(ins[c]);
        ptc_tensor to{y.data(), PTC_FLOAT32, static_cast<int32_t>(refs[c].shape.size()), refs[c].shape.data()};
        if (lib.run(lib.m, 1, &ti, 1, &to) != PTC_OK) ++failures;
        const float* want = reinterpret_cast<const float*>(refs[c].data.data());
        for (size_t j = 0; j < y.size(); ++j)
          if (std::fabs(y[j] - want[j]) > atol + rtol * std::fabs(want[j])) {
            ++failures;
            break;
          }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
}
#endif

// --sanitize builds instrumented generated code: the library needs the sanitizer runtime (in a
// sanitizer build, ptc has it; else it is preloaded into `ptc run`), and runs the fixture to the
// same numbers.
TEST_CASE("a library compiled with --sanitize is instrumented and runs correctly", "[e2e][sanitize]") {
  std::string so = test::temp_dir() + "/sanitized_mlp_dyn.so", outdir = test::temp_dir() + "/sanitized_out";
  const std::string sanitize = std::string(PTC_TEST_SANITIZE).empty() ? "address,undefined" : PTC_TEST_SANITIZE;
  auto r = test::run_ptc("compile -q " + test::fixture("mlp_dyn.pt2") + " -o " + so + " --sanitize " + sanitize + " --cxx " +
                         PTC_TEST_CXX);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::string syms;
  REQUIRE(test::run_shell("nm -D " + so, syms) == 0);
  for (const char* s : {"address", "undefined", "thread"})
    if (sanitize.find(s) != std::string::npos) {
      INFO(s);
      CHECK(syms.find(std::string("__") + (s[0] == 'a' ? "asan" : s[0] == 'u' ? "ubsan" : "tsan") + "_") != std::string::npos);
    }
  std::string preload;
  if (std::string(PTC_TEST_SANITIZE).empty()) {
    REQUIRE(test::run_shell("c++ -print-file-name=libasan.so", preload) == 0);
    while (!preload.empty() && std::isspace(static_cast<unsigned char>(preload.back()))) preload.pop_back();
    preload = "LD_PRELOAD=" + preload + " ";
  }
  json expect = json::parse(test::read_file(test::fixture("mlp_dyn.expect.json")));
  for (const auto& c : expect["cases"]) {
    std::filesystem::remove_all(outdir);
    r = test::run_ptc_env(preload + "ASAN_OPTIONS=detect_leaks=1:exitcode=86 ",
                          "run " + so + " --inputs " + test::fixture(c["inputs"][0]["file"].get<std::string>()) + " --outputs " + outdir);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    NpyArray got = read_npy(outdir + "/out0.npy"), want = read_npy(test::fixture(c["outputs"][0]["file"].get<std::string>()));
    REQUIRE(got.shape == want.shape);
    double worst = 0;
    for (size_t j = 0; j < got.data.size() / 4; ++j)
      worst = std::max(worst, std::fabs(double(reinterpret_cast<float*>(got.data.data())[j]) - reinterpret_cast<float*>(want.data.data())[j]));
    CHECK(worst < 1e-4);
  }
  r = test::run_ptc("compile -q " + test::fixture("mlp_dyn.pt2") + " -o " + so + " --sanitize memory");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("unknown sanitizer 'memory'") != std::string::npos);
  r = test::run_ptc("compile -q " + test::fixture("mlp_dyn.pt2") + " -o " + so + " --sanitize 'address;rm -rf /'");
  CHECK(r.exit_code == 1);
  r = test::run_ptc("compile -q " + test::fixture("mlp_dyn.pt2") + " -o " + so + " --sanitize thread,address");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("thread cannot be combined") != std::string::npos);
}

TEST_CASE("the report shows layer norm and softmax as one kernel each, GEMM+bias+GELU and conv+ReLU fused", "[e2e][schedule]") {
  auto report = [](const std::string& file) {
    std::string so = test::temp_dir() + "/" + file + ".report.so", rep = so + ".json";
    auto r = test::run_ptc("compile -q " + test::fixture(file) + " -o " + so + " --report " + rep);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return json::parse(test::read_file(rep));
  };
  // Which kernels contain work of graph node `node`.
  auto kernels_of = [](const json& rep, const std::string& node) {
    std::vector<json> ks;
    for (const auto& k : rep["kernels"])
      for (const auto& n : k["nodes"])
        if (n["name"] == node) ks.push_back(k);
    return ks;
  };
  json mlp = report("mlp.pt2");
  auto ln = kernels_of(mlp, "layer_norm");
  REQUIRE(ln.size() == 1);
  CHECK(ln[0]["kind"] == "row_group");
  CHECK(ln[0]["computations"].size() == 5);  // mean, variance, their finishing steps, normalize
  auto gelu = kernels_of(mlp, "gelu");
  REQUIRE(gelu.size() == 1);
  CHECK(gelu[0]["kind"] == "gemm");
  CHECK(gelu[0]["computations"][1]["fused_as"] == "gemm_epilogue");
  CHECK(kernels_of(mlp, "linear").size() == 1);  // the GEMM and its bias are the same kernel
  CHECK(mlp["arena"]["bytes_at_max_sizes"].get<size_t>() <= mlp["arena"]["bytes_without_reuse"].get<size_t>());
  CHECK(kernels_of(mlp, "gelu")[0]["nodes"][1]["source"].get<std::string>().find("scripts/export_models.py:") == 0);

  json tfm = report("tiny_tfm.core.pt2");
  auto sm = kernels_of(tfm, "_softmax");
  REQUIRE(sm.size() == 1);
  CHECK(sm[0]["kind"] == "row_group");
  auto lnorm = kernels_of(tfm, "native_layer_norm");
  CHECK(lnorm[0]["kind"] == "row_group");

  // small_cnn: the first convolution's ReLU runs in the convolution's epilogue.
  json cnn = report("small_cnn.pt2");
  auto relu = kernels_of(cnn, "relu");
  REQUIRE(relu.size() == 1);
  CHECK(relu[0]["kind"] == "conv");
  CHECK(relu[0]["computations"][1]["fused_as"] == "conv_epilogue");
#ifdef PTC_TEST_ONEDNN
  // (channels-last by default: the convolution runs on oneDNN, the ReLU as its post-op)
  CHECK(relu[0]["library"] == "oneDNN");
#endif

  // tfm_dyn: the fused QKV projection's bias add runs in its GEMM's epilogue (its three parts are
  // views of one stored result), and the attention is one fused kernel: no batch x heads x T x T
  // score buffer in the arena (at the upper bounds it would be 64 * 4 * 512 * 512 floats).
  json dyn = report("tfm_dyn.pt2");
  auto qkv = kernels_of(dyn, "linear");
  REQUIRE(qkv.size() == 1);
  CHECK(qkv[0]["kind"] == "gemm");
  CHECK(qkv[0]["computations"].size() == 2);
  CHECK(dyn["arena"]["in_place_buffers"].get<int>() >= 1);
  auto att = kernels_of(dyn, "scaled_dot_product_attention");
  REQUIRE(att.size() == 1);
  CHECK(att[0]["kind"] == "attention");
  for (const auto& b : dyn["arena"]["buffers"]) CHECK(b["bytes"].get<size_t>() < size_t{64} * 4 * 512 * 512 * 4);
#ifdef PTC_TEST_TORCHSCRIPT
  // With the attention weights asked for (mha.pt: need_weights), it stays GEMMs around a softmax.
  json mha = report("mha.pt");
  for (const auto& k : mha["kernels"]) CHECK(k["kind"] != "attention");
#endif
  CHECK(dyn["arena"]["bytes_at_max_sizes"].get<size_t>() < dyn["arena"]["bytes_without_reuse"].get<size_t>());
}

TEST_CASE("external weights (--weights external): a mapped, checksummed side file, and bad files are refused", "[e2e]") {
  std::string so = test::temp_dir() + "/ext_mlp.so", weights = test::temp_dir() + "/ext_mlp.weights";
  auto r = test::run_ptc("compile -q " + test::fixture("mlp.pt2") + " -o " + so + " --weights external");
  REQUIRE(r.exit_code == 0);
  std::string good = test::read_file(weights);
  CHECK(good.size() == 64 + 132864);
  {
    Lib lib(so);
    check_cases(lib, "mlp");
  }
  auto run = [&] { return test::run_ptc("run " + so + " --random"); };
  CHECK(run().exit_code == 0);
  std::string bad = good;
  bad[1000] = static_cast<char>(bad[1000] ^ 1);
  test::write_file(weights, bad);
  auto corrupt = run();
  CHECK(corrupt.exit_code == 1);
  CHECK(corrupt.output.find("the weights file is corrupt (checksum mismatch)") != std::string::npos);
  test::write_file(weights, good.substr(0, 100));
  auto truncated = run();
  CHECK(truncated.output.find("the weights file has 100 bytes, this library needs 132928") != std::string::npos);
  std::remove(weights.c_str());
  CHECK(run().output.find("cannot open the weights file") != std::string::npos);
  test::write_file(weights, good);
  CHECK(run().exit_code == 0);
}

TEST_CASE("the generated model.h wraps the library in a typed C++ class", "[e2e]") {
  std::string dir = test::temp_dir();
  auto r = test::run_ptc("compile -q " + test::fixture("mlp_dyn.pt2") + " -o " + dir + "/mlp_dyn.so");
  REQUIRE(r.exit_code == 0);
  test::write_file(dir + "/use.cpp", R"(
#include <cstdio>
#include <fstream>
#include "mlp_dyn.h"
int main() {
  std::vector<float> x(13 * 64);
  std::ifstream(")" + dir + R"(/x.bin", std::ios::binary).read(reinterpret_cast<char*>(x.data()), x.size() * 4);
  ptc_mlp_dyn::Model model;
  auto out = model.run(x.data(), {13, 64});
  std::ofstream(")" + dir + R"(/y.bin", std::ios::binary).write(reinterpret_cast<const char*>(out.layer_norm.data()), out.layer_norm.size() * 4);
  try { model.run(x.data(), {13, 65}); } catch (const std::exception& e) { std::printf("%s\n", e.what()); }
  return out.layer_norm_sizes == std::vector<int64_t>{13, 64} ? 0 : 3;
})");
  NpyArray in = read_npy(test::fixture("ref/mlp_dyn.case1.in0.npy")), ref = read_npy(test::fixture("ref/mlp_dyn.case1.out0.npy"));
  test::write_file(dir + "/x.bin", std::string(reinterpret_cast<const char*>(in.data.data()), in.data.size()));
  std::string cmd = "cd " + dir + " && c++ -std=c++17 use.cpp -o use ./mlp_dyn.so -Wl,-rpath,'$ORIGIN' 2>&1 && ./use 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  int status = pclose(p);
  INFO(out);
  REQUIRE(status == 0);
  CHECK(out.find("input x: size [13, 65] does not match: dim 1 must be 64") != std::string::npos);
  std::string y = test::read_file(dir + "/y.bin");
  REQUIRE(y.size() == ref.data.size());
  std::vector<float> got(y.size() / 4), want(got.size());
  std::memcpy(got.data(), y.data(), y.size());
  std::memcpy(want.data(), ref.data.data(), y.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-4 + 1e-4 * std::fabs(want[i]));
}
