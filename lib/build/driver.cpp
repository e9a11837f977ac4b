#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "ptc/autodiff.h"
#include "ptc/build.h"
#include "ptc/cache.h"
#include "ptc/codegen.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/hash.h"
#include "ptc/lower.h"
#include "ptc/manifest.h"
#include "ptc/passes.h"
#include "ptc/report.h"

namespace ptc {
namespace fs = std::filesystem;
namespace {

using json = nlohmann::ordered_json;

std::vector<std::pair<std::string, double>> g_stage_seconds;
bool g_progress = false;

class Stage {
 public:
  explicit Stage(const char* name) : name_(name), t0_(std::chrono::steady_clock::now()) {}
  ~Stage() {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (g_progress) spdlog::info("{:<10} {:.2f} s", name_, secs);
    else spdlog::debug("{:<10} {:.3f} s", name_, secs);
    g_stage_seconds.emplace_back(name_, secs);
  }

 private:
  const char* name_;
  std::chrono::steady_clock::time_point t0_;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Removes its paths (files or folders) when the compile ends, however it ends.
struct RemoveOnExit {
  std::vector<fs::path> paths;
  ~RemoveOnExit() {
    std::error_code e;
    for (const auto& p : paths) fs::remove_all(p, e);  // a path already renamed away is simply gone
  }
};

void write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) user_error(path, ": cannot write");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) user_error(path, ": cannot write");
}

// --report: one self-contained HTML page for a .html path, else JSON.
void write_report(const std::string& path, const json& report) {
  write_file(path, ends_with(path, ".html") || ends_with(path, ".htm") ? render_report_html(report) : report.dump(2) + "\n");
}

// Runs a stage after the reader; a user error from it (an unsupported dtype, a shape the
// backend cannot take) gets the model's file name in front, as the reader's errors have.
template <class F>
void for_model(const std::string& model, F&& stage) {
  try {
    stage();
  } catch (const UserError& e) {
    if (std::string(e.what()).rfind(model, 0) == 0) throw;
    user_error(model, ": ", e.what());
  }
}

// --sanitize: a comma-separated list of the sanitizers both GCC and Clang know, in a combination
// they accept (ThreadSanitizer excludes the address and leak ones), plus Clang's
// fuzzer-no-link (coverage for libFuzzer, scripts/fuzz.sh).
void check_sanitize_list(const std::string& list) {
  if (list.empty()) return;
  static const std::set<std::string> known{"address", "undefined", "thread", "leak", "fuzzer-no-link"};
  std::set<std::string> names;
  std::stringstream ss(list);
  for (std::string name; std::getline(ss, name, ',');) {
    if (!known.count(name))
      user_error("--sanitize ", list, ": unknown sanitizer '", name, "' (expected address, undefined, thread, leak or fuzzer-no-link, comma-separated)");
    names.insert(name);
  }
  if (names.count("thread") && (names.count("address") || names.count("leak")))
    user_error("--sanitize ", list, ": thread cannot be combined with address or leak");
}

// The cache key of a whole compile: everything that changes the outputs' bytes.
std::string compile_key(const CompileOptions& o, const std::string& model_sha, const std::string& library_name) {
  const bool cuda = o.device == "cuda";
  Sha256 h;
  h.field("ptc-model-v1").field(ptc_identity()).field(tool_identity(o.build.cxx)).field(model_sha);
  if (cuda) h.field(tool_identity(find_nvcc(o.build.nvcc)));
  if (!cuda && o.build.cpu_arch == "native") h.field(host_cpu_identity());
  h.field(o.device).field(o.weights).field(o.cuda_graphs ? "graphs" : "-").field(o.tf32 ? "tf32" : o.tf32_conv ? "tf32-conv" : "-").field(o.build.profile ? "profile" : "-");
  h.field("channels-last").field(std::to_string(o.channels_last));  // -1: auto, decided by the graph (in the model's hash)
  h.field(o.train ? (o.save_all ? "train-save-all" : "train") : "-");
  h.field("sanitize").field(o.build.sanitize);
  h.field(o.build.cpu_arch).field(o.build.cuda_arch).field(o.build.cxx).field(library_name).field(fs::path(o.model).filename().string());
  for (const auto& v : o.load.input_shapes) h.field("shape").field(v);
  for (const auto& v : o.load.symbol_ranges) h.field("symbol").field(v);
  return h.hex();
}

// --package DIR or FILE.tar.gz: the library, its header, the external weights (if any) and
// manifest.json in one folder (the archive holds that folder).
void write_package(const std::string& package, const std::string& library, const std::string& weights, const json& manifest) {
  const bool archive = ends_with(package, ".tar.gz") || ends_with(package, ".tgz");
  std::string name = fs::path(library).stem().string();
  std::error_code ec;
  fs::path stage = fs::temp_directory_path() / ("ptc-package-" + std::to_string(getpid()));
  fs::path dir = archive ? stage / name : fs::path(package);
  fs::create_directories(dir, ec);
  if (ec) user_error(dir.string(), ": cannot create the package folder: ", ec.message());
  std::vector<std::string> files{library, library_header_path(library)};
  if (!weights.empty()) files.push_back(weights);
  for (const auto& f : files) {
    fs::path dest = dir / fs::path(f).filename();
    if (fs::exists(dest) && fs::equivalent(f, dest)) continue;  // -o already inside the package folder
    fs::copy_file(f, dest, fs::copy_options::overwrite_existing, ec);
    if (ec) user_error(dest.string(), ": cannot write the package: ", ec.message());
  }
  write_file((dir / "manifest.json").string(), manifest.dump(2) + "\n");
  if (archive) {
    std::string tmp = fs::absolute(package).string() + ".tmp" + std::to_string(getpid()), out;
    int rc = run_command("tar -czf " + shell_quote(tmp) + " -C " + shell_quote(stage.string()) + " " + shell_quote(name), out);
    fs::remove_all(stage, ec);
    if (rc != 0) {
      fs::remove(tmp, ec);
      user_error(package, ": tar failed: ", out.substr(0, 2000));
    }
    fs::rename(tmp, package, ec);
    if (ec) user_error(package, ": cannot write the package: ", ec.message());
  }
  spdlog::info("wrote the package {}", package);
}

}  // namespace

void compile_model(const CompileOptions& in) {
  CompileOptions opts = in;
  const bool cuda = opts.device == "cuda";
  if (opts.device != "cpu" && !cuda) user_error("--device ", opts.device, ": expected cpu or cuda");
  if (!cuda && opts.cuda_graphs) user_error("--cuda-graphs needs --device cuda");
  if (!cuda && opts.tf32) user_error("--tf32 needs --device cuda (the CPU's GEMMs and convolutions are exact fp32)");
  if (!cuda && opts.tf32_conv) user_error("--tf32-conv needs --device cuda (the CPU's convolutions are exact fp32)");
  if (opts.tf32) opts.tf32_conv = false;  // --tf32 covers convolutions too
  if (!cuda && opts.channels_last == 1) user_error("--channels-last needs --device cuda (cuDNN's NHWC convolutions)");
  if (opts.train && opts.channels_last == 1) user_error("--channels-last is for inference libraries so far (not with --train)");
  if (!(cuda && !opts.train) && opts.channels_last < 0) opts.channels_last = 0;  // auto: decided on the graph below
  const CudaOptions cuda_opts{opts.cuda_graphs, opts.tf32, opts.tf32_conv};
  if (cuda && opts.build.profile) user_error("--profile is not supported for --device cuda yet (use Nsight Compute)");
  if (cuda && !opts.build.sanitize.empty())
    user_error("--sanitize is for --device cpu; check CUDA libraries with compute-sanitizer instead");
  check_sanitize_list(opts.build.sanitize);
  if (opts.output.empty() && opts.package.empty()) user_error("nothing to write: give -o LIB.so, --package DIR or both");
  std::error_code ec;
  if (!opts.output.empty()) {
    fs::path parent = fs::absolute(opts.output).parent_path();
    if (!fs::is_directory(parent, ec)) user_error("-o ", opts.output, ": the folder ", parent.string(), " does not exist");
  }
  auto t_start = std::chrono::steady_clock::now();
  g_stage_seconds.clear();
  g_progress = opts.progress;

  // With only --package, the library is built in a scratch folder and copied into the package.
  fs::path scratch;
  if (opts.output.empty()) {
    scratch = fs::temp_directory_path() / ("ptc-out-" + std::to_string(getpid()));
    fs::create_directories(scratch, ec);
    std::string stem = fs::path(opts.model).stem().string();
    opts.output = (scratch / (stem + ".so")).string();
  }
  RemoveOnExit scratch_guard;
  if (!scratch.empty()) scratch_guard.paths.push_back(scratch);

  const std::string library_name = fs::path(opts.output).filename().string();
  const std::string header = library_header_path(opts.output);
  const std::string weights_path = opts.weights == "external" ? external_weights_path(opts.output) : "";
  std::string model_sha;
  {
    Stage s("hash");
    model_sha = sha256_file(opts.model);
  }
  // Options that print or keep intermediate results need the pipeline to run.
  const bool cacheable = opts.emit_dir.empty() && opts.dump_loops.empty() && opts.dump_after.empty();
  CompileCache cache = CompileCache::open(opts.no_cache || !cacheable);
  std::string key = cache.enabled() ? compile_key(opts, model_sha, library_name) : "";
  CompileCache::Files outputs{{"library.so", opts.output}, {"model.h", header}};
  if (!weights_path.empty()) outputs.emplace_back("model.weights", weights_path);

  std::string report_text, manifest_text;
  json report_hit, manifest_hit;
  auto parsed = [](const std::string& text, json& out) {  // a damaged entry is a miss, never an error
    out = json::parse(text, nullptr, /*allow_exceptions=*/false);
    return out.is_object();
  };
  if (cache.enabled() && cache.read("models", key, "report.json", report_text) && parsed(report_text, report_hit) &&
      report_hit.contains("kernels") && cache.read("models", key, "manifest.json", manifest_text) && parsed(manifest_text, manifest_hit) &&
      cache.fetch("models", key, outputs)) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    report_hit["cache"] = {{"hit", true}, {"key", key}, {"seconds", secs}};
    if (!opts.report.empty()) write_report(opts.report, report_hit);
    if (!opts.package.empty()) write_package(opts.package, opts.output, weights_path, manifest_hit);
    spdlog::info("wrote {} from the compile cache in {:.2f} s ({} kernels)", in.output.empty() ? opts.package : opts.output, secs,
                 report_hit["kernels"].size());
    return;
  }

  std::unique_ptr<Graph> g;
  {
    Stage s("read");
    LoadOptions load = opts.load;
    load.train = opts.train;
    g = load_model(opts.model, load);
  }
  bool untyped = false;
  for (const auto& n : g->nodes())
    for (const Value* o : n->outputs) untyped = untyped || o->type.kind == Type::Kind::Unknown;
  if (untyped) {  // TorchScript with dynamic shapes: types come from ptc's shape rules
    Stage s("shapes");
    g = propagate_shapes(*g, ShapePropMode::Fill);
  }
  if (opts.channels_last < 0) opts.channels_last = channels_last_pays(*g, !(opts.tf32 || opts.tf32_conv)) ? 1 : 0;
  auto dump = [&](const char* name, const Graph& after) {
    if (opts.dump_after == name || opts.dump_after == "all") std::cout << "# after " << name << "\n" << print_graph(after);
  };
  ManifestOptions mo;
  mo.device = opts.device;
  mo.arch = cuda ? opts.build.cuda_arch : opts.build.cpu_arch;
  mo.weights = opts.weights;
  mo.library = library_name;
  mo.model_file = fs::path(opts.model).filename().string();
  mo.model_sha256 = model_sha;
  mo.flags = {{"cuda_graphs", opts.cuda_graphs}, {"tf32", opts.tf32}, {"tf32_conv", opts.tf32_conv}, {"channels_last", opts.channels_last == 1}, {"profile", opts.build.profile}};
  if (opts.train) mo.flags["train"] = opts.save_all ? "save_all" : "min_cut";
  if (!opts.build.sanitize.empty()) mo.flags["sanitize"] = opts.build.sanitize;
  if (!cuda && opts.build.cpu_arch == "native") {
    std::string cpu = host_cpu_identity().substr(0, host_cpu_identity().find('\n'));
    mo.flags["host_cpu"] = cpu.substr(cpu.find(':') == std::string::npos ? 0 : cpu.find(':') + 2);
  }
  if (!opts.load.input_shapes.empty()) mo.flags["input_shapes"] = opts.load.input_shapes;
  if (!opts.load.symbol_ranges.empty()) mo.flags["symbols"] = opts.load.symbol_ranges;

  loop::Program prog;          // inference: the program; --train: the forward part's
  sched::Schedule schedule;
  WeightLayout weights;
  LibrarySource src;
  std::string header_text;
  json training;               // --train: what the report says about the split
  std::unique_ptr<Graph> forward_graph;
  if (!opts.train) {
    {
      // Graph passes; the verifier checks the IR after each (a failure is a ptc bug).
      Stage s("passes");
      for_model(opts.model, [&] { g = run_graph_passes(*g, dump, GraphPassOptions{opts.channels_last == 1}); });
    }
    {
      Stage s("lower");
      LowerOptions lo = LowerOptions::for_device(opts.device);
      lo.channels_last = opts.channels_last == 1;
      for_model(opts.model, [&] { prog = lower_to_loops(*g, lo); });
    }
    if (!opts.dump_loops.empty()) {
      std::string text = loop::print_program(prog);
      if (opts.dump_loops == "-") std::cout << text;
      else std::ofstream(opts.dump_loops) << text;
    }
    {
      Stage s("schedule");
      sched::ScheduleOptions so;
      so.extern_epilogues = cuda ? sched::Epilogues::Library : sched::Epilogues::Any;  // cuBLASLt runs bias / residual / ReLU
      for_model(opts.model, [&] { schedule = sched::schedule(prog, so); });
    }
    for_model(opts.model, [&] { weights = layout_weights(prog, *g, opts.weights == "external"); });
  } else {
    if (opts.weights == "external") user_error("--train embeds the weights; --weights external is not supported with it yet");
    TrainGraphs t;
    {
      Stage s("autodiff");
      for_model(opts.model, [&] {
        g = run_training_graph_passes(*g, dump);
        JointGraph j = build_joint_graph(*g);
        dump("autodiff", *j.graph);
        PartitionOptions po;
        po.save_all = opts.save_all;
        t = partition_joint_graph(j, po);
        t.forward = run_training_graph_passes(*t.forward);
        t.backward = run_training_graph_passes(*t.backward);
        dump("forward", *t.forward);
        dump("backward", *t.backward);
      });
    }
    loop::Program bprog;
    sched::Schedule bschedule;
    {
      Stage s("lower");
      for_model(opts.model, [&] {
        prog = lower_to_loops(*t.forward, LowerOptions::for_device(opts.device));
        bprog = lower_to_loops(*t.backward, LowerOptions::for_device(opts.device));
      });
    }
    if (!opts.dump_loops.empty()) {
      std::string text = "# forward\n" + loop::print_program(prog) + "# backward\n" + loop::print_program(bprog);
      if (opts.dump_loops == "-") std::cout << text;
      else std::ofstream(opts.dump_loops) << text;
    }
    {
      Stage s("schedule");
      sched::ScheduleOptions so;
      so.extern_epilogues = cuda ? sched::Epilogues::Library : sched::Epilogues::Any;  // as for inference
      for_model(opts.model, [&] {
        schedule = sched::schedule(prog, so);
        bschedule = sched::schedule(bprog, so);
      });
    }
    std::vector<std::string> names = t.param_targets;
    names.insert(names.end(), t.state_targets.begin(), t.state_targets.end());
    for (const loop::Program* p : {&prog, &bprog})
      for (const auto& b : p->buffers)
        if (b.kind == loop::Buffer::Kind::Weight) names.push_back(b.weight);
    for_model(opts.model, [&] { weights = layout_weight_names(names, *g); });
    {
      Stage s("codegen");
      for_model(opts.model, [&] { src = generate_training({&prog, &schedule}, {&bprog, &bschedule}, t, *g, weights, cuda, cuda_opts); });
    }
    header_text = "// Generated by ptc " PTC_VERSION " for a training library (--train): the C ABI, training functions included.\n" +
                  embedded_files().at("runtime.h");
    training = {{"saved_values", t.num_saved},
                {"saved_bytes_per_sample", t.saved_bytes_per_sample},
                {"partition", opts.save_all ? "save_all" : "min_cut"},
                {"parameters", t.params.size()},
                {"forward_kernels", schedule.kernels.size()},
                {"backward_kernels", bschedule.kernels.size()}};
    spdlog::info("--train: {} saved values, {:.0f} bytes saved per sample ({}); {} forward and {} backward kernels", t.num_saved,
                 t.saved_bytes_per_sample, opts.save_all ? "--save-all" : "min-cut", schedule.kernels.size(),
                 bschedule.kernels.size());
    forward_graph = std::move(t.forward);  // the report describes the forward part
  }
  // Code reaches embedded weights through 32-bit PC-relative addresses (x86-64's small code
  // model): the whole library must stay under 2 GiB.
  constexpr uint64_t kMaxEmbedded = uint64_t(7) << 28;  // 1.75 GiB
  if (opts.weights != "external" && weights.total_bytes > kMaxEmbedded)
    user_error(opts.model, ": the weights take ", weights.total_bytes >> 20,
               " MiB, more than a library can embed (1792 MiB); compile with --weights external");
  json manifest = make_manifest(*g, weights, mo);
  {
    Stage s("codegen");
    if (!opts.train)
      for_model(opts.model, [&] {
        src = cuda ? generate_cuda(prog, schedule, *g, weights, cuda_opts) : generate_cpu(prog, schedule, *g, weights);
      });
    src.files.emplace_back("ptc_manifest.cpp", manifest_source(manifest));
  }
  // The outputs are built under private names, stored in the cache from there (another compile
  // writing the same -o at the same time cannot swap its library into this entry), then renamed
  // into place.
  const std::string stage = ".ptc-stage-" + std::to_string(getpid());
  CompileCache::Files staged{{"library.so", opts.output + stage + ".so"}, {"model.h", header + stage}};
  if (!weights_path.empty()) staged.emplace_back("model.weights", external_weights_path(staged[0].second));
  RemoveOnExit stage_guard;
  for (const auto& f : staged) stage_guard.paths.push_back(f.second);
  {
    Stage s("build");
    BuildOptions b = opts.build;
    b.device = opts.device;
    b.cache = &cache;
    b.progress = opts.progress;
    b.soname = library_name;
    if (!opts.emit_dir.empty()) b.work_dir = opts.emit_dir;
    build_library(src, weights, *g, staged[0].second, b);
  }
  write_file(staged[1].second, opts.train ? header_text : generate_model_header(prog, *g));
  json report = make_report(opts.train ? *forward_graph : *g, prog, schedule, weights, g_stage_seconds);
  if (opts.train) report["training"] = training;
  report["manifest"] = manifest;
  if (cache.enabled()) {
    cache.store("models", key, staged, {{"report.json", report.dump()}, {"manifest.json", manifest.dump()}});
    cache.trim(cache.max_bytes());
  }
  for (size_t i = 0; i < staged.size(); ++i) {
    fs::rename(staged[i].second, outputs[i].second, ec);
    if (ec) user_error(outputs[i].second, ": cannot write: ", ec.message());
  }
  report["cache"] = {{"hit", false}, {"key", key},
                     {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()}};
  if (!opts.report.empty()) write_report(opts.report, report);
  if (!opts.package.empty()) write_package(opts.package, opts.output, weights_path, manifest);
  spdlog::info("wrote {} ({} kernels, {} bytes of weights)", in.output.empty() ? opts.package : opts.output,
               schedule.kernels.size(), weights.total_bytes);
}

}  // namespace ptc
