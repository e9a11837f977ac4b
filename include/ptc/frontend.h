// Model readers: a torch.export archive (.pt2) or a TorchScript archive (.pt) -> graph IR.
// Both fail with one UserError sentence naming the file (and node and source line where known).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ptc/graph.h"

namespace ptc {

struct LoadOptions {
  // TorchScript archives carry no input shapes: give them here as "1x3x224x224" or
  // "s0x64" (symbols, with ranges as "s0=1..1024" in `symbol_ranges`), one per user input;
  // else the reader uses the archive's extra file ptc_inputs.json written by
  // scripts/export_models.py.
  std::vector<std::string> input_shapes;
  std::vector<std::string> symbol_ranges;
  // A training compile: a TorchScript module's floating-point parameters must each reach the
  // frozen graph as themselves (not folded into other constants), or the read fails.
  bool train = false;
};

enum class ModelFormat { Pt2, TorchScript };

// Reads a model, choosing the reader by the archive's contents (not its file name).
std::unique_ptr<Graph> load_model(const std::string& path, const LoadOptions& opts = {});
std::unique_ptr<Graph> load_pt2(const std::string& path);
// The .pt2 reader over bytes already in memory (fuzzing, tests). `name` is used in messages.
std::unique_ptr<Graph> load_pt2_bytes(std::string bytes, const std::string& name);
// Throws UserError when ptc was built without libtorch (PTC_WITH_TORCHSCRIPT=OFF).
std::unique_ptr<Graph> load_torchscript(const std::string& path, const LoadOptions& opts = {});
bool torchscript_available();

}  // namespace ptc
