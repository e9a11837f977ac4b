// The compile driver: checks the options against the chosen backend (ptc/backend.h), asks the
// compile cache (ptc/cache.h) for the outputs of an identical compile, otherwise runs the
// pipeline's stages (ptc/pipeline.h: read -> passes or autodiff -> lower -> schedule -> layout ->
// codegen -> build), stores the outputs in the cache and writes the report and the package.
#pragma once

#include <string>

#include "ptc/build.h"
#include "ptc/frontend.h"
#include "ptc/precision.h"

namespace ptc {

struct CompileOptions {
  std::string model;        // input .pt2 / .pt
  std::string output;       // the .so to write
  std::string device = "cpu";      // the backend's name (ptc/backend.h: backend_named)
  std::string emit_dir;     // keep the generated sources here
  std::string dump_loops;   // write the loop IR text here ("-" for stdout)
  std::string report;       // write the report here: .html (one self-contained page) or JSON
  std::string package;      // also write a package: a folder, or a .tar.gz
  bool no_cache = false;    // neither read nor write the compile cache
  bool progress = false;    // log stages and translation units as they finish (a terminal)
  std::string dump_after;   // print the IR after this graph pass or pipeline stage (or "all")
  std::string weights = "embedded";  // or "external": a side file, memory-mapped and checksummed
  bool cuda_graphs = false;  // cuda: capture each (sizes, data pointers) once, then replay
  // How GEMMs, convolutions and attention compute (--precision; ptc/precision.h). The backend
  // says which it supports.
  Precision precision = Precision::FP32;
  // Convolutions in NHWC with KRSC weights (LowerOptions::channels_last; CUDA): 1 on, 0 off, -1
  // auto: Backend::channels_last_pays decides for inference libraries.
  int channels_last = -1;
  // cpu: linear layers on ptc's own GEMM instead of oneDNN's matmul (LowerOptions::library_gemm).
  bool no_library_gemm = false;
  bool train = false;        // a training library: forward_train, backward, optimizer steps (ptc/autodiff.h)
  bool save_all = false;     // --train: save every activation the backward reads (no recomputation)
  LoadOptions load;
  BuildOptions build;
};

void compile_model(const CompileOptions& opts);

}  // namespace ptc
