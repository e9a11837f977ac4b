// The compile driver: one explicit pipeline from a model file to a shared library.
//
//   read (frontend) -> lower to loop IR (lib/loop) -> lay out weights -> print C++ (lib/codegen)
//   -> build (lib/build)
//
// Graph passes (decomposition, CSE, DCE), the fusion scheduler and memory planning slot in
// between as they land; each is a plain function call here.
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
  std::string report;       // write the JSON report here
  std::string weights = "embedded";  // or "external": a side file, memory-mapped and checksummed
  LoadOptions load;
  BuildOptions build;
};

void compile_model(const CompileOptions& opts);

}  // namespace ptc
