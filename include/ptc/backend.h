// Backends: everything that differs between the targets a library is compiled for. The driver
// picks one backend from `--device` and then only asks it; nothing downstream compares device
// names.
//
// A backend owns
//   - the options it accepts (check_options) and the precisions it computes in (supports);
//   - the lowering options and capability constants (lower_options: attention head limits, the
//     convolution forms its runtime takes) and the epilogue policy (schedule_options);
//   - code generation (generate; the training wrapper's flavour, training_style);
//   - the host compiler and its flags for each translation unit, the link, and the runtime units
//     it links (compile_command, link_commands, runtime_units).
//
// Each implementation lives in a folder of its own (lib/backend/cpu, lib/backend/cuda) and is
// registered in lib/backend/registry.cpp: a new target (a CPU variant on oneDNN, another GPU
// architecture) is one new folder and one line there.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "ptc/build.h"
#include "ptc/codegen.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "ptc/precision.h"
#include "ptc/schedule.h"

namespace ptc {

struct CompileOptions;

class Backend {
 public:
  virtual ~Backend() = default;

  // The `--device` name, also written into manifests and reports ("cpu", "cuda").
  virtual const char* name() const = 0;
  // One line for `ptc compile --help`.
  virtual const char* description() const = 0;

  // Refuses, with one sentence (UserError), the options this backend cannot honour. Runs before
  // the model is read.
  virtual void check_options(const CompileOptions& opts) const = 0;
  // Whether this backend computes in `p` (Precision::FP32 always).
  virtual bool supports(Precision p) const = 0;
  // The library operations this backend computes natively in float16 / bfloat16 for these
  // options and layout (channels_last: the library's decision, channels_last_pays or the flag;
  // false for training libraries). The precision policy's passes give the others float32
  // operands: passes.h, library_ops_f32.
  virtual HalfLibraryOps half_native(const CompileOptions& opts, bool channels_last) const {
    (void)opts, (void)channels_last;
    return {};
  }
  // pad_linear_weights' row multiple: library GEMMs that want aligned rows (0: no padding).
  virtual int64_t linear_rows_multiple() const { return 0; }
  // Whether channels_last_weights stores depthwise convolution weights [KH, KW, C] (ptc's own
  // NHWC depthwise kernel then reads a tap's weights for consecutive channels together) rather
  // than in the KRSC layout a library kernel takes.
  virtual bool depthwise_weights_channels_fastest() const { return false; }
  // Resolves the tools this backend runs (e.g. the CUDA compiler's path) in `build`, once per
  // compile or prebuild; throws UserError when one is missing.
  virtual void resolve_tools(BuildOptions& build) const { (void)build; }

  // Whether an inference library of `g` lays its convolutions out channels-last when the user
  // leaves it to ptc (--channels-last / --no-channels-last not given).
  virtual bool channels_last_pays(const Graph& g, const CompileOptions& o) const {
    (void)g, (void)o;
    return false;
  }
  // The library kernel `k` calls, for the report ("oneDNN"); "" for ptc's own code.
  virtual std::string kernel_library(const loop::Program& p, const sched::Kernel& k) const {
    (void)p, (void)k;
    return "";
  }
  // The lowering options for this target (`channels_last`: the layout decided for this compile).
  virtual LowerOptions lower_options(bool channels_last, const CompileOptions& o) const = 0;
  // The scheduler's options: which epilogues GEMM / convolution externs may fuse.
  virtual sched::ScheduleOptions schedule_options() const = 0;

  // The library's sources for one program (`part`: a training library's "fwd" or "bwd", else "").
  virtual LibrarySource generate(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                                 const CodegenOptions& opts, const std::string& part = "") const = 0;
  // How the training wrapper (generate_training) prints this target's model file.
  virtual TrainingStyle training_style() const = 0;

  // The compiler command (without -c and file names) that builds translation unit `unit` (a
  // generated file or a runtime unit) with `opts`.
  virtual std::string compile_command(const std::string& unit, const BuildOptions& opts) const = 0;
  // The tool that compiles `unit`, as error messages name it ("nvcc", "the host compiler").
  virtual std::string compiler_name(const std::string& unit) const = 0;
  // The identity of the tool that compiles `unit` and of anything else its object depends on
  // beyond the command (the host CPU for -march=native): part of the object cache's keys.
  virtual std::string unit_identity(const std::string& unit, const BuildOptions& opts) const = 0;
  // The commands that link `objects` into `out` (shell words already quoted), tried in order
  // until one succeeds: a fast linker first, the default one after it. `units` are the
  // translation units the objects came from; `external_weights`: the library maps a weights file.
  virtual std::vector<std::string> link_commands(const std::string& objects, const std::string& out, const std::string& soname,
                                                 const std::vector<std::string>& units, bool external_weights,
                                                 const BuildOptions& opts) const = 0;
  // A clearer sentence for a failed compile of `unit` (or the link, unit "") whose tool printed
  // `output`; "" when there is none to add.
  virtual std::string explain_failure(const std::string& unit, const std::string& output) const {
    (void)unit, (void)output;
    return "";
  }
  // Every runtime unit this backend may link (ptc prebuild builds them all).
  virtual std::vector<std::string> runtime_units() const = 0;

  // The architecture the code is built for (--cpu-arch or --cuda-arch), for manifests and keys.
  virtual std::string arch(const BuildOptions& opts) const = 0;
  // The toolchain's identity for the whole-compile cache key (compilers' --version, the host CPU
  // where the code is built for it).
  virtual std::string toolchain_identity(const BuildOptions& opts) const = 0;
  // Flags this target adds to the manifest (e.g. the host CPU of a -march=native build).
  virtual void add_manifest_flags(const BuildOptions& opts, nlohmann::ordered_json& flags) const {
    (void)opts, (void)flags;
  }
};

// Every registered backend, in registration order.
const std::vector<const Backend*>& backends();
// The backend called `name`; UserError naming the known ones when there is none.
const Backend& backend_named(const std::string& name);

}  // namespace ptc
