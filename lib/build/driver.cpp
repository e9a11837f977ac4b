#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "ptc/codegen.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "ptc/report.h"

namespace ptc {
namespace {

std::vector<std::pair<std::string, double>> g_stage_seconds;

class Stage {
 public:
  explicit Stage(const char* name) : name_(name), t0_(std::chrono::steady_clock::now()) {}
  ~Stage() {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    spdlog::debug("{:<10} {:.3f} s", name_, secs);
    g_stage_seconds.emplace_back(name_, secs);
  }

 private:
  const char* name_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

void compile_model(const CompileOptions& opts) {
  const bool cuda = opts.device == "cuda";
  if (opts.device != "cpu" && !cuda) user_error("--device ", opts.device, ": expected cpu or cuda");
  if (!cuda && opts.cuda_graphs) user_error("--cuda-graphs needs --device cuda");
  if (cuda && opts.build.profile) user_error("--profile is not supported for --device cuda yet (use Nsight Compute)");
  g_stage_seconds.clear();
  std::unique_ptr<Graph> g;
  {
    Stage s("read");
    g = load_model(opts.model, opts.load);
  }
  bool untyped = false;
  for (const auto& n : g->nodes())
    for (const Value* o : n->outputs) untyped = untyped || o->type.kind == Type::Kind::Unknown;
  if (untyped) {  // TorchScript with dynamic shapes: types come from ptc's shape rules
    Stage s("shapes");
    g = propagate_shapes(*g, ShapePropMode::Fill);
  }
  {
    // Graph passes; the verifier checks the IR after each (a failure is a ptc bug).
    Stage s("passes");
    using Pass = std::unique_ptr<Graph> (*)(const Graph&);
    const std::pair<const char*, Pass> passes[] = {
        {"fold_batch_norm", fold_batch_norm},
        {"fold_constants", fold_constants},
        {"cse", common_subexpression_elimination},
        {"dce", dead_code_elimination},
        {"prune_unused_weights", prune_unused_weights},
    };
    for (const auto& [name, pass] : passes) {
      g = pass(*g);
      std::vector<std::string> problems = verify_graph(*g);
      PTC_CHECK(problems.empty(), "the graph is malformed after ", name, ": ", problems.front());
      if (opts.dump_after == name || opts.dump_after == "all") std::cout << "# after " << name << "\n" << print_graph(*g);
    }
  }
  loop::Program prog;
  {
    Stage s("lower");
    prog = lower_to_loops(*g);
  }
  if (!opts.dump_loops.empty()) {
    std::string text = loop::print_program(prog);
    if (opts.dump_loops == "-") std::cout << text;
    else std::ofstream(opts.dump_loops) << text;
  }
  sched::Schedule schedule;
  {
    Stage s("schedule");
    sched::ScheduleOptions so;
    so.extern_epilogues = !cuda;  // the CUDA library calls (cuBLASLt, convolution) take no fused epilogue yet
    schedule = sched::schedule(prog, so);
  }
  WeightLayout weights = layout_weights(prog, *g, opts.weights == "external");
  LibrarySource src;
  {
    Stage s("codegen");
    src = cuda ? generate_cuda(prog, schedule, *g, weights, opts.cuda_graphs) : generate_cpu(prog, schedule, *g, weights);
  }
  {
    Stage s("build");
    BuildOptions b = opts.build;
    b.device = opts.device;
    if (!opts.emit_dir.empty()) b.work_dir = opts.emit_dir;
    build_library(src, weights, *g, opts.output, b);
  }
  {
    std::string header = opts.output;
    size_t dot = header.rfind(".so"), slash = header.find_last_of('/');
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) header.resize(dot);
    header += ".h";
    std::string tmp = header + ".tmp";
    std::ofstream(tmp) << generate_model_header(prog, *g);
    if (std::rename(tmp.c_str(), header.c_str()) != 0) user_error(header, ": cannot write the header");
  }
  if (!opts.report.empty()) {
    std::ofstream out(opts.report);
    out << make_report(*g, prog, schedule, weights, g_stage_seconds).dump(2) << "\n";
    if (!out) user_error(opts.report, ": cannot write the report");
  }
  spdlog::info("wrote {} ({} kernels, {} bytes of weights)", opts.output, schedule.kernels.size(), weights.total_bytes);
}

}  // namespace ptc
