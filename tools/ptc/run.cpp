// `ptc run LIB.so --inputs a.npy ... --outputs DIR` (or --random): runs a compiled library.
#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>

#include "commands.h"
#include "ptc/error.h"
#include "ptc/npy.h"
#include "ptc/runtime.h"

namespace ptc::cli {
namespace {

struct Api {
  void* handle = nullptr;
  decltype(&ptc_open) open;
  decltype(&ptc_close) close;
  decltype(&ptc_num_inputs) num_inputs;
  decltype(&ptc_num_outputs) num_outputs;
  decltype(&ptc_input_info) input_info;
  decltype(&ptc_output_info) output_info;
  decltype(&ptc_num_symbols) num_symbols;
  decltype(&ptc_symbol_info) symbol_info;
  decltype(&ptc_output_shape) output_shape;
  decltype(&ptc_run) run;
  decltype(&ptc_last_error) last_error;
};

template <class F>
void bind(Api& api, F& f, const char* name, const std::string& path) {
  f = reinterpret_cast<F>(dlsym(api.handle, name));
  if (!f) user_error(path, ": not a ptc library (no symbol ", name, ")");
}

Api load(const std::string& path) {
  Api api;
  std::string p = path.find('/') == std::string::npos ? "./" + path : path;
  api.handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api.handle) user_error(path, ": cannot load the library: ", dlerror());
  bind(api, api.open, "ptc_open", path);
  bind(api, api.close, "ptc_close", path);
  bind(api, api.num_inputs, "ptc_num_inputs", path);
  bind(api, api.num_outputs, "ptc_num_outputs", path);
  bind(api, api.input_info, "ptc_input_info", path);
  bind(api, api.output_info, "ptc_output_info", path);
  bind(api, api.num_symbols, "ptc_num_symbols", path);
  bind(api, api.symbol_info, "ptc_symbol_info", path);
  bind(api, api.output_shape, "ptc_output_shape", path);
  bind(api, api.run, "ptc_run", path);
  bind(api, api.last_error, "ptc_last_error", path);
  return api;
}

DType from_code(int code) {
  auto dt = dtype_from_pt2(code);
  if (!dt) user_error("the library uses unknown dtype code ", code);
  return *dt;
}

// `a`'s elements in dtype `to` (float32 <-> bfloat16: NumPy has no bfloat16).
NpyArray convert(const NpyArray& a, DType to) {
  NpyArray r;
  r.dtype = to;
  r.shape = a.shape;
  const size_t n = a.data.size() / dtype_size(a.dtype);
  r.data.resize(n * dtype_size(to));
  for (size_t i = 0; i < n; ++i)
    write_element(r.data.data() + i * dtype_size(to), to, read_element(a.data.data() + i * dtype_size(a.dtype), a.dtype));
  return r;
}

}  // namespace

std::function<int()> add_run(CLI::App& app) {
  struct Opts {
    std::string lib, outputs;
    std::vector<std::string> inputs;
    bool random = false;
    int repeat = 1;
    std::vector<std::string> symbols;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("run", "Run a compiled library on .npy inputs (or random ones)");
  cmd->add_option("library", o->lib, "A library written by ptc compile")->required();
  cmd->add_option("--inputs", o->inputs,
                  "One .npy file per input, in the library's input order (float32 files for bfloat16 inputs: NumPy has no bfloat16)");
  cmd->add_option("--outputs", o->outputs, "Folder to write out0.npy, out1.npy, ... (bfloat16 outputs as float32, exactly)");
  cmd->add_flag("--random", o->random, "Run on random inputs (symbolic sizes at their smallest, or as --symbol gives)");
  cmd->add_option("--symbol", o->symbols, "With --random: a symbol's value, e.g. s0=8");
  cmd->add_option("--repeat", o->repeat, "Run this many times and report the median time")->check(CLI::PositiveNumber);
  return [o]() {
    Api api = load(o->lib);
    ptc_model* m = nullptr;
    if (api.open(nullptr, &m) != PTC_OK) user_error(o->lib, ": ", api.last_error());
    int n_in = api.num_inputs(m), n_out = api.num_outputs(m);
    std::vector<NpyArray> ins;
    if (o->random) {
      std::map<std::string, int64_t> sym;
      for (int k = 0; k < api.num_symbols(m); ++k) {
        const char* name;
        int64_t lo, hi;
        api.symbol_info(m, k, &name, &lo, &hi);
        sym[name] = std::max<int64_t>(lo, 1);
      }
      for (const auto& s : o->symbols) {
        size_t eq = s.find('=');
        if (eq == std::string::npos) user_error("--symbol ", s, ": expected NAME=VALUE");
        sym[s.substr(0, eq)] = std::stoll(s.substr(eq + 1));
      }
      std::mt19937 rng(0);
      std::normal_distribution<float> dist;
      for (int i = 0; i < n_in; ++i) {
        ptc_tensor_info info;
        api.input_info(m, i, &info);
        NpyArray a;
        a.dtype = from_code(info.dtype);
        size_t numel = 1;
        for (int d = 0; d < info.rank; ++d) {
          int64_t v = info.sizes[d] >= 0 ? info.sizes[d] : sym.count(info.dims[d]) ? sym[info.dims[d]] : 1;
          a.shape.push_back(v);
          numel *= static_cast<size_t>(v);
        }
        a.data.resize(numel * dtype_size(a.dtype));
        if (dtype_is_float(a.dtype))  // float16 / bfloat16 / float64 too (rounded from float)
          for (size_t j = 0; j < numel; ++j) write_element(a.data.data() + j * dtype_size(a.dtype), a.dtype, dist(rng));
        ins.push_back(std::move(a));
      }
    } else {
      if (static_cast<int>(o->inputs.size()) != n_in)
        user_error(o->lib, " takes ", n_in, " inputs, but ", o->inputs.size(), " .npy files were given (or use --random)");
      for (int i = 0; i < n_in; ++i) {
        NpyArray a = read_npy(o->inputs[static_cast<size_t>(i)]);
        ptc_tensor_info info;
        api.input_info(m, i, &info);
        if (from_code(info.dtype) == DType::BFloat16 && a.dtype == DType::Float32) a = convert(a, DType::BFloat16);
        ins.push_back(std::move(a));
      }
    }
    std::vector<ptc_tensor> tin;
    for (auto& a : ins) {
      int code = 0;
      for (int c = 0; c < 64 && !code; ++c)
        if (dtype_from_pt2(c) == a.dtype) code = c;
      tin.push_back(ptc_tensor{a.data.data(), code, static_cast<int32_t>(a.shape.size()), a.shape.data()});
    }
    std::vector<NpyArray> outs(static_cast<size_t>(n_out));
    std::vector<ptc_tensor> tout;
    for (int i = 0; i < n_out; ++i) {
      ptc_tensor_info info;
      api.output_info(m, i, &info);
      NpyArray& a = outs[static_cast<size_t>(i)];
      a.dtype = from_code(info.dtype);
      a.shape.resize(static_cast<size_t>(info.rank));
      if (api.output_shape(m, n_in, tin.data(), i, a.shape.data()) != PTC_OK) user_error(o->lib, ": ", api.last_error());
      size_t numel = 1;
      for (int64_t s : a.shape) numel *= static_cast<size_t>(s);
      a.data.resize(numel * dtype_size(a.dtype));
      tout.push_back(ptc_tensor{a.data.data(), info.dtype, info.rank, a.shape.data()});
    }
    std::vector<double> times;
    for (int r = 0; r < o->repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      if (api.run(m, n_in, tin.data(), n_out, tout.data()) != PTC_OK) user_error(o->lib, ": ", api.last_error());
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    for (int i = 0; i < n_out; ++i) {
      std::cout << "output " << i << ": " << dtype_name(outs[i].dtype) << "[";
      for (size_t d = 0; d < outs[i].shape.size(); ++d) std::cout << (d ? ", " : "") << outs[i].shape[d];
      std::cout << "]\n";
      if (!o->outputs.empty()) {
        std::filesystem::create_directories(o->outputs);
        const NpyArray& a = outs[i];
        write_npy(o->outputs + "/out" + std::to_string(i) + ".npy", a.dtype == DType::BFloat16 ? convert(a, DType::Float32) : a);
      }
    }
    std::cout << "time: " << times[times.size() / 2] << " ms (median of " << times.size() << ")\n";
    api.close(m);
    return 0;
  };
}

}  // namespace ptc::cli
