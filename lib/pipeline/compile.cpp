#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "ptc/backend.h"
#include "ptc/build.h"
#include "ptc/cache.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/hash.h"
#include "ptc/manifest.h"
#include "ptc/pipeline.h"
#include "ptc/report.h"

namespace ptc {
namespace fs = std::filesystem;
namespace {

using json = nlohmann::ordered_json;

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
std::string compile_key(const CompileOptions& o, const Backend& backend, const std::string& model_sha, const std::string& library_name) {
  Sha256 h;
  h.field("ptc-model-v2").field(ptc_identity()).field(backend.toolchain_identity(o.build)).field(model_sha);
  h.field(backend.name()).field(o.weights).field(o.cuda_graphs ? "graphs" : "-").field(precision_name(o.precision)).field(o.build.profile ? "profile" : "-");
  h.field("channels-last").field(std::to_string(o.channels_last));  // -1: auto, decided by the graph (in the model's hash)
  h.field(o.no_library_gemm ? "own-gemm" : "-");
  h.field(o.train ? (o.save_all ? "train-save-all" : "train") : "-");
  h.field("sanitize").field(o.build.sanitize);
  h.field(backend.arch(o.build)).field(o.build.cxx).field(library_name).field(fs::path(o.model).filename().string());
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
  const Backend& backend = backend_named(opts.device);
  backend.check_options(opts);
  if (!backend.supports(opts.precision)) {
    std::string others;
    for (const Backend* b : backends())
      if (b != &backend && b->supports(opts.precision)) others += std::string(others.empty() ? "" : " or ") + "--device " + b->name();
    user_error("--precision ", precision_name(opts.precision), " is not available for --device ", backend.name(),
               others.empty() ? std::string(" (no backend computes in it yet)") : " (it needs " + others + ")");
  }
  check_sanitize_list(opts.build.sanitize);
  if (opts.train && opts.weights == "external") user_error("--train embeds the weights; --weights external is not supported with it yet");
  if (opts.output.empty() && opts.package.empty()) user_error("nothing to write: give -o LIB.so, --package DIR or both");
  std::error_code ec;
  if (!opts.output.empty()) {
    fs::path parent = fs::absolute(opts.output).parent_path();
    if (!fs::is_directory(parent, ec)) user_error("-o ", opts.output, ": the folder ", parent.string(), " does not exist");
  }
  backend.resolve_tools(opts.build);
  opts.build.backend = &backend;
  opts.build.progress = opts.progress;
  // Training libraries keep NCHW convolutions (--channels-last is refused with --train).
  if (opts.train && opts.channels_last < 0) opts.channels_last = 0;
  auto t_start = std::chrono::steady_clock::now();

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
  const auto t_hash = std::chrono::steady_clock::now();
  const std::string model_sha = sha256_file(opts.model);
  const double hash_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_hash).count();
  // Options that print or keep intermediate results need the pipeline to run.
  const bool cacheable = opts.emit_dir.empty() && opts.dump_loops.empty() && opts.dump_after.empty();
  CompileCache cache = CompileCache::open(opts.no_cache || !cacheable);
  opts.build.cache = &cache;
  std::string key = cache.enabled() ? compile_key(opts, backend, model_sha, library_name) : "";
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

  // The pipeline, writing its outputs under private names: they are stored in the cache from
  // there (another compile writing the same -o at the same time cannot swap its library into this
  // entry), then renamed into place.
  const std::string stage = ".ptc-stage-" + std::to_string(getpid());
  CompileCache::Files staged{{"library.so", opts.output + stage + ".so"}, {"model.h", header + stage}};
  if (!weights_path.empty()) staged.emplace_back("model.weights", external_weights_path(staged[0].second));
  RemoveOnExit stage_guard;
  for (const auto& f : staged) stage_guard.paths.push_back(f.second);

  CompileState st(opts, backend);
  st.stage_seconds.emplace_back("hash", hash_seconds);
  if (opts.progress) spdlog::info("{:<10} {:.2f} s", "hash", hash_seconds);
  st.library_path = staged[0].second;
  ManifestOptions& mo = st.manifest_options;
  mo.device = backend.name();
  mo.arch = backend.arch(opts.build);
  mo.weights = opts.weights;
  mo.library = library_name;
  mo.model_file = fs::path(opts.model).filename().string();
  mo.model_sha256 = model_sha;
  mo.flags = {{"cuda_graphs", opts.cuda_graphs}, {"precision", precision_name(opts.precision)}, {"channels_last", false}, {"profile", opts.build.profile}};
  if (opts.train) mo.flags["train"] = opts.save_all ? "save_all" : "min_cut";
  if (!opts.build.sanitize.empty()) mo.flags["sanitize"] = opts.build.sanitize;
  backend.add_manifest_flags(opts.build, mo.flags);
  if (!opts.load.input_shapes.empty()) mo.flags["input_shapes"] = opts.load.input_shapes;
  if (!opts.load.symbol_ranges.empty()) mo.flags["symbols"] = opts.load.symbol_ranges;
  run_stages(opts.train ? training_stages() : inference_stages(), st, std::cout, opts.progress);

  write_file(staged[1].second, st.header);
  const Part& first = st.parts.front();  // the report describes an inference library, or a training library's forward
  json report = make_report(*first.graph, first.program, first.schedule, st.weights, st.stage_seconds,
                            [&](const sched::Kernel& k) { return backend.kernel_library(first.program, k); });
  if (opts.train) report["training"] = st.training;
  report["manifest"] = st.manifest;
  if (cache.enabled()) {
    cache.store("models", key, staged, {{"report.json", report.dump()}, {"manifest.json", st.manifest.dump()}});
    cache.trim(cache.max_bytes());
  }
  for (size_t i = 0; i < staged.size(); ++i) {
    fs::rename(staged[i].second, outputs[i].second, ec);
    if (ec) user_error(outputs[i].second, ": cannot write: ", ec.message());
  }
  report["cache"] = {{"hit", false}, {"key", key},
                     {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()}};
  if (!opts.report.empty()) write_report(opts.report, report);
  if (!opts.package.empty()) write_package(opts.package, opts.output, weights_path, st.manifest);
  spdlog::info("wrote {} ({} kernels, {} bytes of weights)", in.output.empty() ? opts.package : opts.output,
               first.schedule.kernels.size(), st.weights.total_bytes);
}

}  // namespace ptc
