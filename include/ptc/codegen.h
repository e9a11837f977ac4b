// Code generation: loop IR -> C++ source of a standalone library with the C ABI of
// include/ptc/runtime.h. Printers only: no I/O, no compiler runs (lib/build does those).
#pragma once

#include <string>
#include <vector>

#include "ptc/autodiff.h"
#include "ptc/graph.h"
#include "ptc/loop.h"
#include "ptc/schedule.h"

namespace ptc {

// Where each weight storage lives in the weights blob.
struct WeightLayout {
  struct Entry {
    std::string name;     // state-dict name (Graph::weights key)
    size_t offset = 0;    // byte offset in the blob (64-byte aligned)
    size_t bytes = 0;
  };
  std::vector<Entry> entries;
  size_t total_bytes = 0;
  bool external = false;   // a side file mapped at ptc_open, instead of bytes inside the library
  uint64_t checksum = 0;   // of the blob (ptc_weights.h)
  uint64_t model_id = 0;   // ties an external weights file to its library
  // Calls `sink(bytes, n)` with the blob's bytes in order (padding included).
  template <class Sink> void stream(const class Graph& g, Sink&& sink) const;
  const Entry* find(const std::string& name) const;
};
// Lays out the weights a program reads (storages shared by several names are stored once).
WeightLayout layout_weights(const loop::Program& p, const Graph& g, bool external = false);

template <class Sink>
void WeightLayout::stream(const Graph& g, Sink&& sink) const {
  static const unsigned char zeros[64] = {};
  size_t pos = 0;
  for (const auto& e : entries) {
    if (e.offset < pos) continue;  // a storage shared with an earlier entry
    sink(zeros, e.offset - pos);
    sink(reinterpret_cast<const unsigned char*>(g.weights.at(e.name).storage), e.bytes);
    pos = e.offset + e.bytes;
  }
}

struct LibrarySource {
  // (file name, text): model.cpp (tensor metadata, input checks, the run sequence and the C ABI;
  // includes ptc_support.h, ptc_arena.h, runtime.h) and kernels_<i>.cpp (the kernel functions;
  // include ptc_support.h and ptc_rt.h), each a translation unit of its own.
  std::vector<std::pair<std::string, std::string>> files;
  // The embedded runtime translation units the library needs, slowest first: CPU:
  // ptc_runtime.cpp (GEMM), plus ptc_runtime_conv.cpp and ptc_runtime_attention.cpp when a
  // kernel calls them; CUDA: ptc_cuda_runtime.cu.
  std::vector<std::string> runtime_units;
};
// `part` (a training library's "fwd" or "bwd"): everything goes into namespace ptc_part_<part>
// (the ABI functions as C++ functions there, for the training wrapper to call), files are named
// <part>_model.cpp / <part>_kernels_<i>.cpp, and the weights are the library's one blob.
LibrarySource generate_cpu(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                           const std::string& part = "");
// A training library (ptc compile --train; lib/runtime/cpu/ptc_train.h): the forward and backward
// programs as parts "fwd" and "bwd" (generate_cpu, or generate_cuda when `cuda`), and a model.cpp
// (model.cu) with the parameters' layout and the C ABI (runtime.h, training functions included).
// `g` is the graph whose weights the blob holds. `cuda_opts` as for generate_cuda (each part's
// runs replay CUDA graphs as generate_cuda's do).
struct CudaOptions {
  bool graphs = false;  // runs replay a CUDA graph captured per (sizes, data pointers)
  bool tf32 = false;    // cuBLASLt GEMMs and cuDNN convolutions may use TF32 tensor cores
  bool tf32_conv = false;  // convolutions only (cuDNN's, and the GEMMs of 1x1 / patchify ones)
};
struct TrainProgram {
  const loop::Program* program;
  const sched::Schedule* schedule;
};
LibrarySource generate_training(const TrainProgram& fwd, const TrainProgram& bwd, const TrainGraphs& t, const Graph& g,
                                const WeightLayout& weights, bool cuda, const CudaOptions& cuda_opts);
// Lays out the named weights of `g` (storages shared by several names are stored once).
WeightLayout layout_weight_names(const std::vector<std::string>& names, const Graph& g, bool external = false);

// CUDA: model.cu (kernels, launchers, wrapper); the runtime's ptc_cuda_runtime.cu (cuBLASLt GEMM,
// convolution) is the library's other translation unit. The schedule's extern epilogues must be
// library ones (ScheduleOptions::extern_epilogues = Epilogues::Library).
// `part` as for generate_cpu (a training library's forward or backward: namespace
// ptc_part_<part>, the ABI as C++ functions, file <part>_model.cu).
LibrarySource generate_cuda(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                            const CudaOptions& cuda = {}, const std::string& part = "");

// The typed C++ header written next to the library (model.so -> model.h): runtime.h's
// declarations and a class `ptc_<name>::Model` with `Outputs run(named typed inputs)`.
std::string generate_model_header(const loop::Program& p, const Graph& g);

// C++ text of an integer index expression (int64_t arithmetic; Python floor semantics where a
// dividend may be negative).
std::string cpp_index(const sym::Expr& e);
// "b<buffer>[offset + (i0) * (stride0) + ...]": element `idx` (C++ expressions) of a strided view.
std::string view_element(const loop::View& v, const std::vector<std::string>& idx);
// "b<buffer>[((0) * n0 + i0) * n1 + i1 ...]": element `idx` of a dense buffer whose sizes are the
// C++ variables n0, n1, ...
std::string dense_element(int buffer, const std::vector<std::string>& idx);

}  // namespace ptc
