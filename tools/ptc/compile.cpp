// `ptc compile MODEL -o LIB.so`.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "commands.h"
#include "ptc/backend.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/precision.h"

namespace ptc::cli {

std::function<int()> add_compile(CLI::App& app) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand("compile", "Compile a model into a standalone shared library");
  cmd->add_option("model", opts->model, "A torch.export archive (.pt2) or TorchScript archive (.pt)")->required();
  cmd->add_option("-o,--output", opts->output, "The library to write (e.g. model.so; its header model.h goes beside it)");
  std::vector<std::string> devices;
  std::string device_help = "The target:";
  for (const Backend* b : backends()) {
    devices.push_back(b->name());
    device_help += std::string(devices.size() > 1 ? ";" : "") + " " + b->name() + " (" + b->description() + ")";
  }
  cmd->add_option("--device", opts->device, device_help + " (default: cpu)")->check(CLI::IsMember(devices));
  cmd->add_option("--cuda-arch", opts->build.cuda_arch, "cuda: the GPU architecture, e.g. sm_90 (default; PTX embedded for newer GPUs)");
  cmd->add_option("--nvcc", opts->build.nvcc, "cuda: the CUDA compiler (default: nvcc)");
  cmd->add_flag("--cuda-graphs", opts->cuda_graphs,
                "cuda: capture each run's launches in a CUDA graph per (input sizes, data pointers) and replay it (with --train: "
                "the forward's and the backward's runs)");
  std::vector<std::string> precisions;
  for (Precision p : all_precisions()) precisions.push_back(precision_name(p));
  std::string supported;  // "cpu: fp32; cuda: fp32, tf32-conv, tf32"
  for (const Backend* b : backends()) {
    supported += std::string(supported.empty() ? "" : "; ") + b->name() + ":";
    bool first = true;
    for (Precision p : all_precisions())
      if (b->supports(p)) supported += std::string(first ? " " : ", ") + precision_name(p), first = false;
  }
  auto precision = std::make_shared<std::string>();
  auto tf32 = std::make_shared<bool>(false), tf32_conv = std::make_shared<bool>(false);
  cmd->add_option("--precision", *precision,
                  "How GEMMs, convolutions and attention compute: fp32 (exact, the default); tf32-conv (convolutions on TF32 "
                  "tensor cores, GEMMs and attention exact: torch's defaults, cudnn.allow_tf32 on, matmul.allow_tf32 off); tf32 "
                  "(all three on TF32 tensor cores: inputs rounded to a 10-bit mantissa, fp32 accumulation, about 1e-3 relative "
                  "error, as torch with both allow_tf32 settings); bf16 / fp16 (half precision with fp32 accumulation, "
                  "torch.autocast's policy). What each --device computes in: " + supported)
      ->check(CLI::IsMember(precisions));
  cmd->add_flag("--tf32", *tf32, "The same as --precision tf32");
  cmd->add_flag("--tf32-conv", *tf32_conv, "The same as --precision tf32-conv");
  cmd->add_flag_callback(
      "--channels-last", [opts] { opts->channels_last = 1; },
      "Convolutions in NHWC with KRSC weights (made at compile time), as torch.compile lays them out, and the pointwise "
      "kernels between them in NHWC order (inference libraries). cpu: the convolutions run on oneDNN (the library links "
      "libdnnl), on by default for nets of two or more convolutions, every one ungrouped or depthwise. cuda: cuDNN's tensor-core kernels are "
      "NHWC ones, so no per-call layout transforms; on by default with TF32 convolutions when every convolution is "
      "ungrouped or depthwise, in exact fp32 for MobileNet-style nets, whose depthwise and 1x1 layers become ptc's own "
      "kernels and GEMMs");
  cmd->add_flag_callback("--no-channels-last", [opts] { opts->channels_last = 0; },
                         "Keep convolutions NCHW where the default would lay them out NHWC (cpu: on ptc's own kernels, no libdnnl)");
  cmd->add_flag("--no-library-gemm", opts->no_library_gemm,
                "cpu: run linear layers on ptc's own GEMM kernel; by default a linear layer (a constant weight) runs on "
                "oneDNN's matmul with its bias, residual and activation as post-ops, where ptc was built with oneDNN");
  cmd->add_flag("--train", opts->train,
                "Build a training library (CPU or --device cuda): ptc_forward_train, ptc_backward (gradients of the "
                "parameters and of inputs that require grad) and fused SGD/AdamW steps over parameters the library holds; "
                "train()-mode exports get batch statistics and running-statistics updates, and seeded dropout (runtime.h)");
  cmd->add_flag("--save-all", opts->save_all,
                "--train: save every activation the backward reads instead of recomputing cheap elementwise chains");
  cmd->add_option("--emit-dir", opts->emit_dir, "Keep the generated sources in this folder");
  cmd->add_option("--dump-after", opts->dump_after, "Print the IR after a pipeline stage (read, shapes: the graph; lower: the loop IR; schedule: the kernels) or a "
                  "graph pass (functionalize, fold_batch_norm, channels_last_weights, autocast, library_ops_f32, fold_constants, cse, "
                  "dce, prune_unused_weights; --train: batch_norm_training, cse, dce, prune_unused_weights, autocast, autodiff, "
                  "forward, backward; or all)");
  cmd->add_option("--dump-loops", opts->dump_loops, "Write the loop IR as text to this file ('-' for stdout)");
  cmd->add_option("--weights", opts->weights, "embedded (in the library) or external (model.weights next to it, mapped and checksummed at open)")
      ->check(CLI::IsMember({"embedded", "external"}));
  cmd->add_option("--report", opts->report,
                  "Write a report: FILE.html (one self-contained page) or FILE.json: the kernels with the graph nodes and source "
                  "lines they fused, arena use over the run, the graph, compile times");
  cmd->add_option("--package", opts->package,
                  "Also write a package: a folder or a .tar.gz holding the library, its header, external weights and manifest.json");
  cmd->add_flag("--no-cache", opts->no_cache,
                "Neither read nor write the compile cache ($PTC_CACHE_DIR, default ~/.cache/ptc; size cap $PTC_CACHE_MAX_MB)");
  cmd->add_flag("--profile", opts->build.profile, "Time each kernel; the library prints a table to stderr at ptc_close (the mean over the calls after the first, which pays page faults and cold caches)");
  cmd->add_option("-j,--jobs", opts->build.jobs, "Translation units the host compiler builds at once (default: one per hardware thread)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--cpu-arch", opts->build.cpu_arch, "The -march of the generated code (default: native)");
  cmd->add_option("--cxx", opts->build.cxx, "The host C++ compiler (default: c++)");
  cmd->add_option("--sanitize", opts->build.sanitize,
                  "Build the generated code with these sanitizers (cpu), e.g. address,undefined or thread; load the "
                  "library into a process that has the same sanitizer runtime (built with it, or LD_PRELOAD)");
  cmd->add_option("--input-shape", opts->load.input_shapes, "TorchScript only: shape of each input, e.g. 1x3x224x224");
  cmd->add_option("--symbol", opts->load.symbol_ranges, "TorchScript only: a symbol's range, e.g. s0=1..1024");
  return [opts, precision, tf32, tf32_conv]() {
    // --tf32 / --tf32-conv are spellings of --precision (--tf32 covers convolutions too).
    const std::string alias = *tf32 ? "tf32" : *tf32_conv ? "tf32-conv" : "";
    if (!alias.empty() && !precision->empty() && *precision != alias)
      user_error("--", *tf32 ? "tf32" : "tf32-conv", " means --precision ", alias, ", which contradicts --precision ", *precision);
    const std::string name = !precision->empty() ? *precision : !alias.empty() ? alias : "fp32";
    opts->precision = *parse_precision(name);
    // Stage and translation-unit progress on a terminal; quiet in logs and pipes.
    opts->progress = isatty(STDERR_FILENO) && spdlog::get_level() <= spdlog::level::info;
    compile_model(*opts);
    return 0;
  };
}

}  // namespace ptc::cli
