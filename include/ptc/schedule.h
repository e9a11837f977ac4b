// The scheduler: groups loop-IR computations into kernels.
//
//   * Row groups: a reduction and the computations after it that share its outer (kept) domain
//     and read each other's results only within the same outer index run as one kernel — one
//     parallel loop over the outer index, the stages in order inside it (layer norm's mean,
//     variance and normalize; softmax's max, sum and divide each become one kernel).
//   * GEMM and convolution epilogues: a pointwise computation over a GEMM's (or convolution's)
//     result domain that reads that result only at its own element (bias, activation,
//     residual) runs inside the GEMM's epilogue on each tile while it is in cache, writing the
//     final buffer directly (Epilogues::Any: the CPU). Epilogues::Library (CUDA) takes only the
//     bias + residual + activation forms cuBLASLt and cuDNN run themselves.
//   * Horizontal fusion: later pointwise computations over the same domain join a pointwise
//     kernel's loop nest when they depend on nothing computed in between and read the
//     kernel's own results only at their own element (sibling bias adds, the parts of a split).
//   * Everything else is one kernel per computation.
// Kernels run in the order of their first computation; a computation moves earlier only past
// computations it does not read, so every dependence is kept.
// In-place reuse: a pointwise computation (alone or in a row group) that is the last reader of a
// temporary of its own size, reading it only at its own element, writes into its storage.
// Memory planning (temp_lifetimes + ptc_arena.h) is separate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ptc/loop.h"

namespace ptc::sched {

struct Kernel {
  enum class Kind : uint8_t { Loop, RowGroup, Gemm, Conv, Attention, Scatter };
  Kind kind = Kind::Loop;
  std::vector<int> comps;          // indices into Program::comps, in execution order
  std::vector<sym::Expr> outer;    // RowGroup: the shared outer domain
  int epilogue = -1;               // Gemm, Conv: index of the fused pointwise computation, or -1
  // Conv: other kernels read the convolution's result too, so it is stored as well and the
  // epilogue writes its own buffer (reading the rows just computed, while they are in cache).
  bool epilogue_keeps = false;
  std::string name;                // "k3"
  std::vector<std::string> origins;  // graph nodes whose work the kernel does (deduplicated)
};

struct Schedule {
  std::vector<Kernel> kernels;
  // Buffers no kernel writes any more (a GEMM result consumed by its fused epilogue).
  std::vector<bool> elided;
  // In-place reuse: alias_of[b] = a when temporary b is written into the storage of temporary
  // a, which its writer reads for the last time, element by element, before overwriting it
  // (-1: own storage).
  std::vector<int> alias_of;
};

// Which pointwise consumers join a GEMM/convolution as its epilogue.
enum class Epilogues : uint8_t {
  None,
  Any,      // any that fits (the CPU runtime runs them per tile)
  Library,  // only what the GEMM / convolution library runs itself (match_library_epilogue):
            // the CUDA backend's cuBLASLt and cuDNN calls
};
// Activations a GEMM library runs besides ReLU (a mask of LibraryEpilogue::act_bit values).
using LibraryActs = unsigned;
struct ScheduleOptions {
  Epilogues extern_epilogues = Epilogues::Any;
  // With Epilogues::Library: the GEMM library's activations beyond ReLU.
  LibraryActs library_gemm_acts = 0;
  // Channels-last forward convolutions (ConvAttrs::nhwc) run on a library on every backend
  // (cuDNN, oneDNN): only what it fuses itself.
  Epilogues nhwc_conv_epilogues = Epilogues::Library;
};

// An epilogue a library runs itself: out = act(result + bias + residual), in any order of the
// sum, with the bias a vector along the output's channels (bias[bias_offset + c]) and the
// residual laid out as the output (residual[residual_offset + i] at flat element i).
//   GEMM (cuBLASLt's D = [relu](A B + bias + 1 * C)): channels = the last dimension; bias,
//     residual and ReLU each optional.
//   Convolution through cuDNN (cudnnConvolutionBiasActivationForward: y = act(conv(x) + 1 * z +
//     bias)): channels = dimension 1; the bias required, the residual and an activation (ReLU, or
//     ReLU6 = clamp(0, 6)) optional.
// A GEMM's activation may also be one of `gemm_acts` (the library's: oneDNN's eltwise post-ops,
// cuBLASLt's GELU): GELU (erf), GELU (tanh approximation) or SiLU, in the forms ptc's lowering
// and the exported tanh-GELU of transformers (GPT-2's "gelu_new") take.
struct LibraryEpilogue {
  enum class Act : uint8_t { None, Relu, Relu6, Gelu, GeluTanh, Silu };
  static constexpr LibraryActs act_bit(Act a) { return 1u << static_cast<unsigned>(a); }
  int bias = -1;  // buffer, or -1
  sym::Expr bias_offset;
  int residual = -1;  // buffer, or -1
  sym::Expr residual_offset;
  Act act = Act::None;
  // A half-precision GEMM writes the epilogue's float32 buffer (no bias, no residual).
  bool widens = false;
};
std::optional<LibraryEpilogue> match_library_epilogue(const loop::Program& p, const loop::Computation& gemm, const loop::Computation& e,
                                                      LibraryActs gemm_acts = 0);
Schedule schedule(const loop::Program& p, const ScheduleOptions& opts = {});
std::string print_schedule(const loop::Program& p, const Schedule& s);

// Every buffer kernel `k` reads or writes (results the schedule elided excluded), sorted.
std::vector<int> kernel_buffers(const loop::Program& p, const Schedule& s, const Kernel& k);

// Liveness of the temporaries over the kernel sequence, for the arena planner: buffer id,
// first kernel writing it, last kernel reading it (or one of its in-place aliases reading it,
// which share its storage and are listed in `aliases`).
struct Lifetime {
  int buffer;
  int first, last;
  std::vector<int> aliases;
};
std::vector<Lifetime> temp_lifetimes(const loop::Program& p, const Schedule& s);

}  // namespace ptc::sched
