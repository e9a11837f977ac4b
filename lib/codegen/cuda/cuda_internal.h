// Internal interface between the CUDA kernel printer and the CUDA wrapper printer.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "ptc/loop.h"
#include "ptc/schedule.h"

namespace ptc::cuda {

// Prints kernel `index` of the schedule: its __global__ function (if any) and its host launcher
// `const char* ptc_launch_<index>(const int64_t* sym, void* const* buf, cudaStream_t stream,
// const ptc_cuda::Ctx& ctx)` (sym in `syms` order; buf[<buffer id>] = device pointers).
void emit_kernel(std::ostream& os, const loop::Program& p, const sched::Schedule& s, size_t index, const std::vector<std::string>& syms);

// Whether a kernel calls cuDNN (the library then links ptc_cuda_cudnn.cu and libcudnn).
bool uses_cudnn(const loop::Program& p, const sched::Schedule& s);

}  // namespace ptc::cuda
