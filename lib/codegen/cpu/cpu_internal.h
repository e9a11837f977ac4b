// Internal interface between the CPU kernel printer and the wrapper printer.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "ptc/codegen.h"
#include "ptc/schedule.h"

namespace ptc::cpu {

const char* ctype(DType t);
// Prints one kernel as a block of C++ statements (buffers are pointers named b<id>, size symbols
// and loop variables are int64_t locals named as in the IR). prepared: the expression of the
// kernel's prepared constants (see kernel_prepares), or empty.
// math: the library's math modes; a BF16 conv / gemm mode (--precision bf16) says that the operands of
// channels-last convolutions / oneDNN products hold bfloat16 values.
void emit_kernel(std::ostream& os, const loop::Program& p, const sched::Kernel& k, const std::string& prepared = "",
                 const MathModes& math = {});
// Prints kernel `index` of the schedule as a function `const char* <kernel_function_name(index)>(
// const int64_t* sym, void* const* buf)`: the symbols' values in `sym_names` order, and every
// buffer's pointer at buf[<buffer id>]. It returns nullptr, or for a kernel that
// kernel_checks_indices, the message of an index out of range (the run must fail).
void emit_kernel_function(std::ostream& os, const loop::Program& p, const sched::Schedule& s, size_t index,
                          const std::vector<std::string>& sym_names, const MathModes& math = {});
std::string kernel_function_name(size_t index);
// Whether the kernel reads at data-dependent indices it checks (Op::CheckIndex): its body uses
// an `ptc_rt::IndexCheck ptc_ix` and its function can fail.
bool kernel_checks_indices(const loop::Program& p, const sched::Kernel& k);

// Prepared constants: a kernel whose constant operands are worth transforming once, when the
// model is opened (a 3x3 convolution's Winograd weights), gets `void* <prepare_function_name(
// index)>(void* const* buf)` (only the weight buffers of buf are set; returns the prepared data,
// or nullptr) and reads the result at buf[<number of buffers> + index] (nullptr: transform per
// call). The wrapper stores them in the model instance and frees them with ptc_rt::prepared_free
// (a oneDNN call site: conv2d_nhwc_release).
bool kernel_prepares(const loop::Program& p, const sched::Kernel& k);
// A channels-last forward convolution, run by oneDNN (ptc_runtime_onednn.cpp): its prepared
// pointer is the call site's state (conv2d_nhwc_prepare / conv2d_nhwc_release), and its
// function returns oneDNN's failure as the run's error.
bool kernel_on_onednn(const loop::Program& p, const sched::Kernel& k);
// The activations oneDNN's matmul runs as eltwise post-ops (besides ReLU).
sched::LibraryActs onednn_gemm_acts();
void emit_prepare_function(std::ostream& os, const loop::Program& p, const sched::Schedule& s, size_t index);
std::string prepare_function_name(size_t index);

}  // namespace ptc::cpu
