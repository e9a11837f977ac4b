// The stages of a compile (ptc/pipeline.h), each a plain function over the CompileState, and the
// two lists that make inference and training compiles.
#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <iostream>

#include "ptc/build.h"
#include "ptc/error.h"
#include "ptc/frontend.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "ptc/pipeline.h"

namespace ptc {
namespace {

// Runs a stage's work after the reader; a user error from it (an unsupported dtype, a shape the
// backend cannot take) gets the model's file name in front, as the reader's errors have.
template <class F>
void for_model(const CompileState& st, F&& work) {
  try {
    work();
  } catch (const UserError& e) {
    if (std::string(e.what()).rfind(st.opts.model, 0) == 0) throw;
    user_error(st.opts.model, ": ", e.what());
  }
}

// Prints a graph after a pass or stage named `name` when --dump-after asks for it.
void dump_graph(const CompileState& st, const char* name, const Graph& g, std::ostream& os) {
  if (st.opts.dump_after == name || st.opts.dump_after == "all") os << "# after " << name << "\n" << print_graph(g);
}

bool always(const CompileState&) { return true; }

// read: the model file -> state.graph.
void read_model(CompileState& st) {
  LoadOptions load = st.opts.load;
  load.train = st.opts.train;
  st.graph = load_model(st.opts.model, load);
}

// shapes (TorchScript with dynamic shapes): types from ptc's shape rules.
bool untyped(const CompileState& st) {
  for (const auto& n : st.graph->nodes())
    for (const Value* o : n->outputs)
      if (o->type.kind == Type::Kind::Unknown) return true;
  return false;
}
void fill_shapes(CompileState& st) { st.graph = propagate_shapes(*st.graph, ShapePropMode::Fill); }

// The half dtype autocast rounds the library operations to (--precision bf16 / fp16), if any.
std::optional<DType> autocast_dtype(Precision p) {
  if (p == Precision::BF16) return DType::BFloat16;
  if (p == Precision::FP16) return DType::Float16;
  return std::nullopt;
}

GraphPassOptions graph_pass_options(const CompileState& st) {
  GraphPassOptions o;
  o.channels_last_weights = st.channels_last;
  o.depthwise_channels_fastest = st.backend.depthwise_weights_channels_fastest();
  o.autocast = autocast_dtype(st.opts.precision);
  o.half_native = st.backend.half_native(st.opts, st.channels_last);
  o.linear_rows_multiple = st.backend.linear_rows_multiple();
  return o;
}

// passes: the layout decision, then the graph passes (the verifier checks the IR after each; a
// failure is a ptc bug) -> state.graph, state.parts = {the one inference part}.
void graph_passes(CompileState& st) {
  st.channels_last = st.opts.channels_last < 0 ? st.backend.channels_last_pays(*st.graph, st.opts) : st.opts.channels_last == 1;
  for_model(st, [&] {
    st.graph = run_graph_passes(*st.graph, [&](const char* pass, const Graph& g) { dump_graph(st, pass, g, std::cout); },
                                graph_pass_options(st));
  });
  st.parts = {Part{"", st.graph.get(), {}, {}}};
}

// autodiff (--train): the training graph passes, the joint graph, its partition into a forward
// and a backward graph -> state.train, state.parts = {fwd, bwd}.
void differentiate(CompileState& st) {
  auto dump = [&](const char* name, const Graph& g) { dump_graph(st, name, g, std::cout); };
  for_model(st, [&] {
    // In-place updates made functional first, as for inference (updates through slice / select
    // views become scatters the backward differentiates; buffers updated in place become buffer
    // updates).
    // (A detach stays: no gradient flows through it, e.g. out of a torch.no_grad() block.)
    st.graph = run_pass_list(*st.graph, {{"functionalize", [](const Graph& g) { return functionalize(g, /*keep_detach=*/true); }}}, dump);
    st.graph = run_training_graph_passes(*st.graph, dump);
    // Mixed precision (--precision bf16 / fp16): autocast before differentiation, as torch.autocast
    // records it. The parameters stay fp32 (master weights, optimizer state) and are rounded at
    // every step; the derivative of each rounding converts its gradient back to fp32, so weight
    // gradients accumulate in fp32.
    if (const std::optional<DType> half = autocast_dtype(st.opts.precision)) {
      const DType h = *half;
      st.graph = run_pass_list(*st.graph, {{"autocast", [h](const Graph& x) { return autocast(x, h, /*round_fallthrough=*/false); }}}, dump);
    }
    JointGraph j = build_joint_graph(*st.graph);
    dump("autodiff", *j.graph);
    PartitionOptions po;
    po.save_all = st.opts.save_all;
    st.train = partition_joint_graph(j, po);
    // Library operations of half-precision tensors the backend has no kernel for compute in fp32.
    const HalfLibraryOps native = st.backend.half_native(st.opts, /*channels_last=*/false);
    auto widen = [native](const Graph& x) { return library_ops_f32(x, native); };
    st.train.forward = run_training_graph_passes(*run_pass_list(*st.train.forward, {{"library_ops_f32", widen}}));
    st.train.backward = run_training_graph_passes(*run_pass_list(*st.train.backward, {{"library_ops_f32", widen}}));
    dump("forward", *st.train.forward);
    dump("backward", *st.train.backward);
  });
  st.parts = {Part{"fwd", st.train.forward.get(), {}, {}}, Part{"bwd", st.train.backward.get(), {}, {}}};
}

// A part's heading in dumps of several parts ("" for an inference library's one part).
std::string part_heading(const Part& p) { return p.name.empty() ? "" : p.name == "fwd" ? "# forward\n" : "# backward\n"; }

void dump_loops(const CompileState& st, std::ostream& os) {
  for (const Part& p : st.parts) os << part_heading(p) << loop::print_program(p.program);
}

// lower: each part's graph -> its loop program.
void lower_parts(CompileState& st) {
  const LowerOptions lo = st.backend.lower_options(st.channels_last, st.opts);
  for_model(st, [&] {
    for (Part& p : st.parts) p.program = lower_to_loops(*p.graph, lo);
  });
  if (st.opts.dump_loops.empty()) return;
  if (st.opts.dump_loops == "-") {
    dump_loops(st, std::cout);
  } else {
    std::ofstream out(st.opts.dump_loops);
    dump_loops(st, out);
  }
}
// schedule: each part's kernels (fusion, loop order, memory plan).
void schedule_parts(CompileState& st) {
  const sched::ScheduleOptions so = st.backend.schedule_options();
  for_model(st, [&] {
    for (Part& p : st.parts) p.schedule = sched::schedule(p.program, so);
  });
}
void dump_schedule(const CompileState& st, std::ostream& os) {
  for (const Part& p : st.parts) {
    const std::string text = sched::print_schedule(p.program, p.schedule);
    os << part_heading(p) << text << (text.empty() || text.back() != '\n' ? "\n" : "");
  }
}

// Code reaches embedded weights through 32-bit PC-relative addresses (x86-64's small code model):
// the whole library must stay under 2 GiB.
void check_embedded_size(const CompileState& st) {
  constexpr uint64_t kMaxEmbedded = uint64_t(7) << 28;  // 1.75 GiB
  if (st.opts.weights != "external" && st.weights.total_bytes > kMaxEmbedded)
    user_error(st.opts.model, ": the weights take ", st.weights.total_bytes >> 20,
               " MiB, more than a library can embed (1792 MiB); compile with --weights external");
}

// layout: where each weight lives in the blob -> state.weights.
void layout_inference(CompileState& st) {
  for_model(st, [&] { st.weights = layout_weights(st.parts[0].program, *st.graph, st.opts.weights == "external"); });
  check_embedded_size(st);
}
void layout_training(CompileState& st) {
  std::vector<std::string> names = st.train.param_targets;
  names.insert(names.end(), st.train.state_targets.begin(), st.train.state_targets.end());
  for (const Part& p : st.parts)
    for (const auto& b : p.program.buffers)
      if (b.kind == loop::Buffer::Kind::Weight) names.push_back(b.weight);
  for_model(st, [&] { st.weights = layout_weight_names(names, *st.graph); });
  check_embedded_size(st);
}

// The manifest, made from the driver's ManifestOptions, as one more translation unit.
void add_manifest(CompileState& st) {
  st.manifest_options.flags["channels_last"] = st.channels_last;
  st.manifest = make_manifest(*st.graph, st.weights, st.manifest_options);
  st.source.files.emplace_back("ptc_manifest.cpp", manifest_source(st.manifest));
}

CodegenOptions codegen_options(const CompileState& st) {
  CodegenOptions o;
  o.math = math_modes(st.opts.precision);
  o.cuda_graphs = st.opts.cuda_graphs;
  return o;
}

// codegen: the library's sources and its header -> state.source, state.header, state.manifest.
void codegen_inference(CompileState& st) {
  const Part& p = st.parts[0];
  for_model(st, [&] { st.source = st.backend.generate(p.program, p.schedule, *st.graph, st.weights, codegen_options(st)); });
  add_manifest(st);
  st.header = generate_model_header(p.program, *st.graph);
}
void codegen_training(CompileState& st) {
  const CodegenOptions cg = codegen_options(st);
  for_model(st, [&] {
    LibrarySource fwd = st.backend.generate(st.parts[0].program, st.parts[0].schedule, *st.train.forward, st.weights, cg, "fwd");
    LibrarySource bwd = st.backend.generate(st.parts[1].program, st.parts[1].schedule, *st.train.backward, st.weights, cg, "bwd");
    st.source = generate_training(fwd, bwd, st.train, *st.graph, st.weights, st.backend.training_style());
  });
  add_manifest(st);
  st.header = "// Generated by ptc " PTC_VERSION " for a training library (--train): the C ABI, training functions included.\n" +
              embedded_files().at("runtime.h");
  const TrainGraphs& t = st.train;
  const size_t fk = st.parts[0].schedule.kernels.size(), bk = st.parts[1].schedule.kernels.size();
  st.training = {{"saved_values", t.num_saved},
                 {"saved_bytes_per_sample", t.saved_bytes_per_sample},
                 {"partition", st.opts.save_all ? "save_all" : "min_cut"},
                 {"parameters", t.params.size()},
                 {"forward_kernels", fk},
                 {"backward_kernels", bk}};
  spdlog::info("--train: {} saved values, {:.0f} bytes saved per sample ({}); {} forward and {} backward kernels", t.num_saved,
               t.saved_bytes_per_sample, st.opts.save_all ? "--save-all" : "min-cut", fk, bk);
}

// build: the sources and the weights -> the library at state.library_path.
void build_stage(CompileState& st) {
  BuildOptions b = st.opts.build;  // the driver set its backend, cache and progress
  b.soname = st.manifest_options.library;
  if (!st.opts.emit_dir.empty()) b.work_dir = st.opts.emit_dir;
  build_library(st.source, st.weights, *st.graph, st.library_path, b);
}

void dump_current_graph(const CompileState& st, std::ostream& os) { os << print_graph(*st.graph); }

}  // namespace

std::vector<Stage> inference_stages() {
  return {{"read", always, read_model, dump_current_graph},
          {"shapes", untyped, fill_shapes, dump_current_graph},
          {"passes", always, graph_passes, nullptr},  // each pass prints itself (--dump-after PASS)
          {"lower", always, lower_parts, dump_loops},
          {"schedule", always, schedule_parts, dump_schedule},
          {"layout", always, layout_inference, nullptr},
          {"codegen", always, codegen_inference, nullptr},
          {"build", always, build_stage, nullptr}};
}

std::vector<Stage> training_stages() {
  return {{"read", always, read_model, dump_current_graph},
          {"shapes", untyped, fill_shapes, dump_current_graph},
          {"autodiff", always, differentiate, nullptr},  // prints the joint, forward and backward graphs itself
          {"lower", always, lower_parts, dump_loops},
          {"schedule", always, schedule_parts, dump_schedule},
          {"layout", always, layout_training, nullptr},
          {"codegen", always, codegen_training, nullptr},
          {"build", always, build_stage, nullptr}};
}

void run_stages(const std::vector<Stage>& stages, CompileState& state, std::ostream& dump_to, bool progress) {
  for (const Stage& s : stages) {
    if (!s.applies(state)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    s.run(state);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress) spdlog::info("{:<10} {:.2f} s", s.name, secs);
    else spdlog::debug("{:<10} {:.3f} s", s.name, secs);
    state.stage_seconds.emplace_back(s.name, secs);
    if (s.dump && (state.opts.dump_after == s.name || state.opts.dump_after == "all")) {
      dump_to << "# after " << s.name << "\n";
      s.dump(state, dump_to);
    }
  }
}

}  // namespace ptc
