// The backend-independent parts of a generated library's main source (model.cpp / model.cu).
//
// The generated source, in order:
//   1. includes (runtime.h, ptc_support.h), `struct ptc_model`, the kernel declarations (backend)
//   2. `namespace {` + emit_metadata: kInputs/kOutputs, symbol tables, kNumKernels and the
//      PTC_PROFILE_* macros, fail(), shape_str(), bind() (input checks, symbol binding) and
//      output_sizes()
//   3. the backend's run part, still in the anonymous namespace:
//        int check_data(int n_in, const ptc_tensor* in, int n_out, const ptc_tensor* out);
//        int run_impl(ptc_model*, const ptc_tensor* in, ptc_tensor* out, const int64_t* sym, void* stream);
//        int finish(void* stream);   // waits for the work ptc_run_async queued (CPU: nothing)
//      then `}  // namespace`
//   4. the backend's ptc_open / ptc_close (extern "C")
//   5. emit_abi_functions: every other C ABI function (ptc_run = ptc_run_async + finish).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "ptc/codegen.h"
#include "ptc/graph.h"
#include "ptc/loop.h"
#include "ptc/schedule.h"

namespace ptc::wrapper {

struct AbiNames {
  std::vector<std::string> in, out, syms;  // user input names, output names, size symbols (sorted)
};
// The names; a user error when a symbol is not the size of any input dimension.
AbiNames abi_names(const loop::Program& p, const Graph& g);
void emit_metadata(std::ostream& os, const loop::Program& p, const sched::Schedule& s, const AbiNames& names);
// The tables of the buffers the library holds as state (Program::states): kStates (their
// ptc_tensor_info, named by state-dict name), kNumStates, kStateBytes, kStateInit (the initial
// contents' byte offset in the weights) and kStateStaged (whether a run writes the new contents
// to model->state_next first, copied over model->state after the kernels). Inside the anonymous
// namespace, before ptc_state.inc.
void emit_state_tables(std::ostream& os, const loop::Program& p, const WeightLayout& weights);
// The state members of `struct ptc_model` (state[], state_next[]: host or device pointers).
std::string state_members(const loop::Program& p);
// c_linkage true (a library): with the state ABI (ptc_state_abi.inc); false: plain C++ functions (a training library's part, inside its namespace).
void emit_abi_functions(std::ostream& os, bool c_linkage = true);
// Inside run_impl, with the symbols declared: plans the temporaries' arena for these sizes
// (ptc_arena.h) into `const size_t ws_bytes` and `offs[]`.
void emit_workspace_plan(std::ostream& os, const loop::Program& p, const sched::Schedule& s);
// Then, with `ws_var` (unsigned char*, the arena) and `weights_var` (const unsigned char*, the
// weights blob) in scope: declares every buffer's typed pointer b<id> and `void* const bufs[]`
// indexed by buffer id (nullptr for buffers that have no storage).
// With `prepared_var` (an array of void*, one per kernel) the table continues with its entries:
// bufs[<number of buffers> + kernel index].
void emit_buffer_table(std::ostream& os, const loop::Program& p, const sched::Schedule& s, const WeightLayout& weights,
                       const std::string& weights_var, const std::string& ws_var, const std::string& prepared_var = "");
// The same table with only the weights set (for work done when the model is opened).
void emit_weight_table(std::ostream& os, const loop::Program& p, const WeightLayout& weights, const std::string& weights_var);

std::string quote(const std::string& s);  // a C string literal
// `s` for a // comment in generated code: bytes outside printable ASCII become '?', so no name
// read from a model can end the comment (a newline) and inject code.
std::string comment_text(const std::string& s);
// The fields of an attention extern's argument struct `a` (ptc_rt::AttentionArgs on the CPU,
// ptc_cuda::Attention on CUDA: the same names), one statement per line after `indent`; `base`
// prints the pointer expression of operand i (q, k, v, mask) without its view's offset.
std::string attention_fields(const loop::Computation& c, const std::string& indent,
                             const std::function<std::string(size_t operand, const loop::View& v)>& base);
// A kernel's one-line summary for the comment above it: "k3: buf7 buf8 <- linear gelu".
std::string kernel_summary(const loop::Program& p, const sched::Kernel& k);
int dtype_code(DType t);                  // runtime.h's PTC_* numbering
// " a.sh = ..; a.sw = ..; a.ph = ..; a.pw = ..; a.dh = ..; a.dw = ..; a.groups = ..;": the
// stride, padding, dilation and groups of a convolution or pooling extern (ConvAttrs;
// MaxPoolGradAttrs with groups 1) as the runtimes' argument structs (CPU Conv2dArgs /
// MaxPoolGradArgs, CUDA CudnnConv) name them.
std::string conv_fields(const loop::Computation& c);
// `m` as a C++ initializer of ptc_rt::MathModes (lib/runtime/common/ptc_precision.h).
std::string math_modes_literal(const MathModes& m);

}  // namespace ptc::wrapper
