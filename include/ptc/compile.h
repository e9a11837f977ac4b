// The compile driver: one explicit pipeline from a model file to a shared library.
//
//   read -> [shape propagation, TorchScript with dynamic shapes] -> fold_batch_norm ->
//   fold_constants -> cse -> dce -> prune_unused_weights -> lower -> schedule -> codegen -> build
// --train: read -> cse -> dce -> joint graph (autodiff) -> partition -> per part (forward,
//   backward): cse -> dce -> prune_unused_weights -> lower -> schedule; codegen of both parts and
//   the training wrapper -> build
// Each stage is a plain function call in lib/build/driver.cpp. Before the pipeline, the compile
// cache (ptc/cache.h) is asked for the outputs of an identical compile; after it, they are stored.
#pragma once

#include <string>

#include "ptc/build.h"
#include "ptc/frontend.h"

namespace ptc {

struct CompileOptions {
  std::string model;        // input .pt2 / .pt
  std::string output;       // the .so to write
  std::string device = "cpu";
  std::string emit_dir;     // keep the generated sources here
  std::string dump_loops;   // write the loop IR text here ("-" for stdout)
  std::string report;       // write the report here: .html (one self-contained page) or JSON
  std::string package;      // also write a package: a folder, or a .tar.gz
  bool no_cache = false;    // neither read nor write the compile cache
  bool progress = false;    // log stages and translation units as they finish (a terminal)
  std::string dump_after;   // print the graph after this pass (or "all")
  std::string weights = "embedded";  // or "external": a side file, memory-mapped and checksummed
  bool cuda_graphs = false;  // cuda: capture each (sizes, data pointers) once, then replay
  bool tf32 = false;         // cuda: GEMMs and convolutions may use TF32 tensor cores
  // cuda: convolutions (cuDNN's, and the GEMMs 1x1 / patchify convolutions become) may use TF32
  // tensor cores, GEMMs and attention stay exact fp32: torch's defaults
  // (torch.backends.cudnn.allow_tf32 = True, torch.backends.cuda.matmul.allow_tf32 = False).
  bool tf32_conv = false;
  // cuda: convolutions in NHWC with KRSC weights (LowerOptions::channels_last): 1 on, 0 off, -1
  // auto: on with --tf32 / --tf32-conv for inference libraries (cuDNN's TF32 tensor-core kernels are NHWC ones;
  // its exact-fp32 NHWC kernels are slower than its NCHW ones).
  int channels_last = -1;
  bool train = false;        // a training library: forward_train, backward, optimizer steps (ptc/autodiff.h)
  bool save_all = false;     // --train: save every activation the backward reads (no recomputation)
  LoadOptions load;
  BuildOptions build;
};

void compile_model(const CompileOptions& opts);

}  // namespace ptc
