// The subcommands of the ptc CLI; each registers its options on the app and runs later.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace ptc::cli {

// Adds `ptc inspect`; returns the function that runs it (after parsing), giving the exit code.
std::function<int()> add_inspect(CLI::App& app);
std::function<int()> add_compile(CLI::App& app);
std::function<int()> add_run(CLI::App& app);
std::function<int()> add_prebuild(CLI::App& app);

}  // namespace ptc::cli
