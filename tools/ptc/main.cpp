// ptc: ahead-of-time compiler for PyTorch models.
//
// Exit codes: 0 success; 1 user error (bad model, unsupported op, bad flag: one sentence on
// stderr); 2 internal error (a bug in ptc: please report it with the message).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.h"
#include "ptc/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ptc " PTC_VERSION " - ahead-of-time compiler for PyTorch models (.pt2 / .pt)", "ptc"};
  app.set_version_flag("--version", std::string("ptc ") + PTC_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // -v and -q also after the subcommand
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "Log each stage with its time");
  app.add_flag("-q,--quiet", quiet, "Only print errors");
  app.footer(
      "Exit codes: 0 success, 1 user error (bad model, unsupported op, bad flag), 2 internal error.\n"
      "Examples:\n"
      "  ptc inspect models/mlp_dyn.pt2\n"
      "  ptc inspect --json models/small_cnn.pt2\n"
      "  ptc compile models/mlp_dyn.pt2 -o mlp_dyn.so --report mlp_dyn.html\n"
      "  ptc compile models/mlp_dyn.pt2 --package mlp_dyn.tar.gz\n"
      "  ptc inspect mlp_dyn.so\n"
      "  ptc run mlp_dyn.so --random --symbol s77=8\n"
      "Environment: PTC_CACHE_DIR (compile cache; default ~/.cache/ptc), PTC_CACHE_MAX_MB (its size cap, default 4096),\n"
      "PTC_PREBUILT_DIR (where `ptc prebuild` objects are looked up; empty: nowhere); for CPU libraries built with\n"
      "--precision bf16: PTC_CPU_BF16=1/0 (oneDNN's bf16 convolution kernels on any CPU that has them / never; default: AMX).");
  std::function<int()> run_inspect = ptc::cli::add_inspect(app);
  std::function<int()> run_compile = ptc::cli::add_compile(app);
  std::function<int()> run_run = ptc::cli::add_run(app);
  std::function<int()> run_prebuild = ptc::cli::add_prebuild(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (see ptc --help)\n";
    return 1;
  }
  auto logger = spdlog::stderr_color_mt("ptc");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%^%l%$: %v");
  spdlog::set_level(quiet ? spdlog::level::err : verbose ? spdlog::level::debug : spdlog::level::info);

  try {
    if (app.got_subcommand("inspect")) return run_inspect();
    if (app.got_subcommand("compile")) return run_compile();
    if (app.got_subcommand("run")) return run_run();
    if (app.got_subcommand("prebuild")) return run_prebuild();
    return 1;
  } catch (const ptc::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::overflow_error& e) {  // sizes so large that their arithmetic overflows
    std::cerr << "error: the model's sizes are too large: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory (the model or its sizes need more memory than this machine has)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 2;
  }
}
