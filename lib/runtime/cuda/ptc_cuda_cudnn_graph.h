// ptc_cuda_cudnn_graph.h — forward convolutions through cuDNN's graph (backend) API, for
// ptc_cuda_cudnn.cu. Linked with it (and -lcudnn) only into libraries that have convolutions.
//
// The legacy API (cudnnConvolutionForward) sets up its engine again on every call: tens of
// microseconds of host time per convolution, which in half precision is longer than the
// convolution runs (resnet18 at batch 32 in bfloat16 on an H100: 0.81 ms of GPU time, 2.2 ms a
// call). Here each shape gets an execution plan once (cuDNN's heuristics, the first few timed on
// the call's buffers), and a call is one cudnnBackendExecute with a cached variant pack. The
// plan fuses the epilogue (bias, residual, ReLU / ReLU6) as pointwise operations on the float32
// accumulator, rounded once to the output type.
#pragma once

#include <cudnn.h>

#include "ptc_cuda_rt.h"

namespace ptc_cuda {

struct GraphConvPlans;
GraphConvPlans* graph_conv_plans_create();
void graph_conv_plans_destroy(GraphConvPlans* plans);

// Runs the forward convolution `a` (bfloat16 / float16) on `stream` with handle `h` (already
// bound to the stream; the caller holds the handle's lock). `transforms`: FFT and Winograd
// engines may run. Returns an error text or nullptr; *unsupported is set, with nullptr, where no
// engine takes this convolution (remembered per shape): the caller then runs the legacy API.
const char* graph_conv_forward(GraphConvPlans* plans, cudnnHandle_t h, const Ctx& ctx, const CudnnConv& a, bool transforms,
                               cudaStream_t stream, bool* unsupported);

}  // namespace ptc_cuda
