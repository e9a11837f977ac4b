// Code generation: loop IR -> C++ source of a standalone library with the C ABI of
// include/ptc/runtime.h. Printers only: no I/O, no compiler runs (lib/build does those).
#pragma once

#include <string>
#include <vector>

#include "ptc/autodiff.h"
#include "ptc/graph.h"
#include "ptc/loop.h"
#include "ptc/precision.h"
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
// What code generation needs beyond the program (Backend::generate passes it on).
struct CodegenOptions {
  MathModes math;            // how GEMMs, convolutions and attention compute (ptc/precision.h)
  bool cuda_graphs = false;  // CUDA: runs replay a CUDA graph captured per (sizes, data pointers)
};

// `part` (a training library's "fwd" or "bwd"): everything goes into namespace ptc_part_<part>
// (the ABI functions as C++ functions there, for the training wrapper to call), files are named
// <part>_model.cpp / <part>_kernels_<i>.cpp, and the weights are the library's one blob.
// `opts.math.conv` / `opts.math.gemm == BF16` (--precision bf16): the operands of channels-last
// convolutions / linear layers on oneDNN hold bfloat16 values, and oneDNN may compute them in bf16
// where the CPU has AMX (ConvNhwcArgs::bf16_values, MatmulArgs::bf16_values).
// Whether CPU kernel `k` is a channels-last convolution or a linear layer's GEMM that oneDNN runs
// (the library it calls, for the report).
bool cpu_kernel_on_onednn(const loop::Program& p, const sched::Kernel& k);
// The activations oneDNN's matmul runs as post-ops (GELU, tanh GELU, SiLU; ReLU always).
sched::LibraryActs cpu_onednn_gemm_acts();

LibrarySource generate_cpu(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                           const std::string& part = "", const CodegenOptions& opts = {});

// CUDA: model.cu (kernels, launchers, wrapper); the runtime's ptc_cuda_runtime.cu (cuBLASLt GEMM,
// convolution) is the library's other translation unit. The schedule's extern epilogues must be
// library ones (ScheduleOptions::extern_epilogues = Epilogues::Library).
// `part` as for generate_cpu (a training library's forward or backward: namespace
// ptc_part_<part>, the ABI as C++ functions, file <part>_model.cu).
// The GEMM activations its cuBLASLt epilogues run besides ReLU (ScheduleOptions::library_gemm_acts):
// the tanh form of GELU.
constexpr sched::LibraryActs kCudaGemmActs = sched::LibraryEpilogue::act_bit(sched::LibraryEpilogue::Act::GeluTanh);
LibrarySource generate_cuda(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                            const CodegenOptions& opts = {}, const std::string& part = "");

// How a target's training library is printed (Backend::training_style).
struct TrainingStyle {
  std::string model_file;      // the wrapper's translation unit: model.cpp, model.cu
  std::string device_header;   // the device's memory and loops: ptc_train_cpu.h, ptc_train_cuda.cuh
  bool device_memory = false;  // parameters, gradients and optimizer state in device memory (CUDA)
};
// A training library (ptc compile --train; lib/runtime/cpu/ptc_train.h): the forward and backward
// parts (the backend's generate with parts "fwd" and "bwd"), and a model file with the
// parameters' layout and the C ABI (runtime.h, training functions included). `g` is the graph
// whose weights the blob holds.
LibrarySource generate_training(const LibrarySource& fwd, const LibrarySource& bwd, const TrainGraphs& t, const Graph& g,
                                const WeightLayout& weights, const TrainingStyle& style);
// Lays out the named weights of `g` (storages shared by several names are stored once).
WeightLayout layout_weight_names(const std::vector<std::string>& names, const Graph& g, bool external = false);

// The typed C++ header written next to the library (model.so -> model.h): runtime.h's
// declarations and a class `ptc_<name>::Model` with `Outputs run(named typed inputs)`.
std::string generate_model_header(const loop::Program& p, const Graph& g);

// C++ text of an integer index expression (int64_t arithmetic; Python floor semantics where a
// dividend may be negative).
std::string cpp_index(const sym::Expr& e);
// "e0, e1, ...": the C++ text of each expression (cpp_index), comma-separated.
std::string index_list(const std::vector<sym::Expr>& v);
// "f0 * f1 * ...": the product of C++ factors (int64_t{1} for none).
std::string cpp_product(const std::vector<std::string>& factors);
// "b<buffer>[offset + (i0) * (stride0) + ...]": element `idx` (C++ expressions) of a strided view.
std::string view_element(const loop::View& v, const std::vector<std::string>& idx);
// "b<buffer>[((0) * n0 + i0) * n1 + i1 ...]": element `idx` of a dense buffer whose sizes are the
// C++ variables n0, n1, ...
std::string dense_element(int buffer, const std::vector<std::string>& idx);

}  // namespace ptc
