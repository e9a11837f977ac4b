/* The C ABI of a library that `ptc compile` generates. Version PTC_ABI_VERSION.
 *
 *   ptc_model* m;
 *   if (ptc_open(NULL, &m) != PTC_OK) fprintf(stderr, "%s\n", ptc_last_error());
 *   ptc_tensor in = {x_data, PTC_FLOAT32, 2, x_sizes};
 *   int64_t out_sizes[8]; ptc_output_shape(m, 1, &in, 0, out_sizes);
 *   ptc_tensor out = {y_data, PTC_FLOAT32, rank, out_sizes};
 *   ptc_run(m, 1, &in, 1, &out);
 *   ptc_close(m);
 *
 * Tensors are dense, row-major (contiguous), owned by the caller (bool elements are bytes holding
 * 0 or 1), in the memory of the library's
 * device (ptc_device(): host memory for CPU libraries, CUDA device memory for CUDA ones — there
 * ptc_run queues the work on the calling thread's default stream and waits for it, and
 * ptc_run_async queues it on `stream`, a cudaStream_t, and returns at once). Every call checks
 * its arguments (count, dtype, rank, sizes against the model's symbolic shapes and ranges, null
 * pointers) and returns PTC_ERROR with a message for ptc_last_error() instead of reading or
 * writing out of bounds. A model handle may be used by several threads at once: each run uses
 * its own workspace. ptc_last_error() is per thread.
 */
#ifndef PTC_RUNTIME_H
#define PTC_RUNTIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PTC_ABI_VERSION 1

#if defined(__GNUC__) || defined(__clang__)
#define PTC_API __attribute__((visibility("default")))
#else
#define PTC_API
#endif

enum { PTC_OK = 0, PTC_ERROR = 1 };
enum { PTC_DEVICE_CPU = 0, PTC_DEVICE_CUDA = 1 };

/* Element types (the numbering of torch.export's schema). */
enum {
  PTC_UINT8 = 1, PTC_INT8 = 2, PTC_INT16 = 3, PTC_INT32 = 4, PTC_INT64 = 5,
  PTC_FLOAT16 = 6, PTC_FLOAT32 = 7, PTC_FLOAT64 = 8, PTC_BOOL = 12, PTC_BFLOAT16 = 13
};

typedef struct ptc_model ptc_model;

typedef struct ptc_tensor {
  void* data;
  int32_t dtype;
  int32_t rank;
  const int64_t* sizes;
} ptc_tensor;

typedef struct ptc_tensor_info {
  const char* name;
  int32_t dtype;
  int32_t rank;
  const int64_t* sizes;      /* -1 where the size is symbolic */
  const char* const* dims;   /* each size as text: "64", "s77" */
} ptc_tensor_info;

PTC_API int ptc_abi_version(void);
/* Opens the model. `weights_path` is NULL for weights embedded in the library. */
PTC_API int ptc_open(const char* weights_path, ptc_model** out);
PTC_API void ptc_close(ptc_model* model);
PTC_API int ptc_num_inputs(const ptc_model* model);
PTC_API int ptc_num_outputs(const ptc_model* model);
PTC_API int ptc_input_info(const ptc_model* model, int index, ptc_tensor_info* info);
PTC_API int ptc_output_info(const ptc_model* model, int index, ptc_tensor_info* info);
/* Symbol names and ranges (max = -1: unbounded). */
PTC_API int ptc_num_symbols(const ptc_model* model);
PTC_API int ptc_symbol_info(const ptc_model* model, int index, const char** name, int64_t* min, int64_t* max);
/* The sizes output `index` has for these inputs (checked like ptc_run). */
PTC_API int ptc_output_shape(const ptc_model* model, int num_inputs, const ptc_tensor* inputs, int index, int64_t* sizes);
PTC_API int ptc_run(ptc_model* model, int num_inputs, const ptc_tensor* inputs, int num_outputs, ptc_tensor* outputs);
/* CUDA libraries: queue the run on `stream` (NULL: the default stream) and return; the outputs
 * are ready when the stream reaches this point. CPU libraries: stream must be NULL; runs now. */
PTC_API int ptc_run_async(ptc_model* model, int num_inputs, const ptc_tensor* inputs, int num_outputs, ptc_tensor* outputs,
                          void* stream);
/* PTC_DEVICE_CPU or PTC_DEVICE_CUDA: where the library runs and where tensor data lives. */
PTC_API int ptc_device(void);
PTC_API const char* ptc_last_error(void);
/* The library's manifest as JSON: ptc version, model name and SHA-256, inputs, outputs,
 * symbols, device, architecture and compile flags (what `ptc inspect LIB.so` prints). */
PTC_API const char* ptc_manifest(void);

/* ---- Training libraries (`ptc compile --train`) --------------------------------------------
 *
 *   ptc_saved* saved;
 *   ptc_zero_grad(m);
 *   ptc_forward_train(m, 2, inputs, 1, &loss, &saved);     // outputs, plus what backward needs
 *   ptc_tensor dloss = {&one, PTC_FLOAT32, 0, NULL};
 *   ptc_backward(m, saved, 1, &dloss, 0, NULL);            // gradients accumulate in the library
 *   ptc_saved_free(saved);
 *   ptc_adamw_step(m, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f);  // one fused step over all parameters
 *
 * The library holds the parameters (float32, initialized from the exported model, updated in
 * place by the optimizer steps or by the caller through ptc_param_data) and their gradients
 * (summed over ptc_backward calls until ptc_zero_grad, as torch's .grad). ptc_run and the
 * functions above work too (ptc_run is an inference forward with the current parameters).
 * Training calls on one handle must not run concurrently with each other. These functions exist
 * only in training libraries. */
typedef struct ptc_saved ptc_saved;

PTC_API int ptc_num_params(const ptc_model* model);
/* info->name is the parameter's state-dict name ("l1.weight"). */
PTC_API int ptc_param_info(const ptc_model* model, int index, ptc_tensor_info* info);
/* The parameter's values and its gradient: dense float32 arrays of the library, readable and
 * writable by the caller between calls (the next ptc_backward adds to gradients obtained here).
 * NULL for a bad index. */
PTC_API float* ptc_param_data(ptc_model* model, int index);
PTC_API float* ptc_grad_data(ptc_model* model, int index);
/* Runs the forward as ptc_run does and keeps in *saved what the backward needs (until
 * ptc_saved_free). */
PTC_API int ptc_forward_train(ptc_model* model, int num_inputs, const ptc_tensor* inputs, int num_outputs,
                              ptc_tensor* outputs, ptc_saved** saved);
/* The backward of one forward_train: `grad_outputs` has one entry per output (data NULL: a zero
 * gradient; outputs without a gradient, e.g. integer ones, are ignored). Adds the parameters'
 * gradients to the library's and writes the gradients of the inputs that require grad (see
 * ptc_num_input_grads) to `input_grads`. `saved` stays valid (free it with ptc_saved_free). */
PTC_API int ptc_backward(ptc_model* model, ptc_saved* saved, int num_grad_outputs, const ptc_tensor* grad_outputs,
                         int num_input_grads, ptc_tensor* input_grads);
PTC_API void ptc_saved_free(ptc_saved* saved);
/* The inputs that get a gradient (those the export marked requires_grad): their count, and the
 * input index of each. */
PTC_API int ptc_num_input_grads(const ptc_model* model);
PTC_API int ptc_input_grad_index(const ptc_model* model, int index);
PTC_API int ptc_zero_grad(ptc_model* model);
/* torch.optim.SGD's and torch.optim.AdamW's update of every parameter from its gradient, one
 * fused pass; the optimizer state (momentum buffers, Adam moments and step count) lives in the
 * handle. A handle uses one optimizer. */
PTC_API int ptc_sgd_step(ptc_model* model, float lr, float momentum, float dampening, float weight_decay, int nesterov);
PTC_API int ptc_adamw_step(ptc_model* model, float lr, float beta1, float beta2, float eps, float weight_decay);
/* Loss scaling (`--train --precision fp16`; torch.amp.GradScaler's unscale_): multiplies every
 * parameter gradient by `inv_scale` and sets *found_inf to 1 when any of them is inf or NaN, else
 * to 0. Scale the loss's gradient (the grad_outputs of ptc_backward) by S, unscale with 1 / S,
 * and skip the optimizer step when *found_inf is 1, lowering S (the Python package's
 * ptc.GradScaler does all of it). */
PTC_API int ptc_unscale_grads(ptc_model* model, float inv_scale, int* found_inf);
/* ---- State -------------------------------------------------------------------------------
 *
 * A library holds the buffers its program updates: an inference library those an export updates
 * in place or records as buffer mutations (a static KV cache, a step counter), a training library
 * the batch-norm running statistics and num_batches_tracked of a model exported in train() mode.
 * They start as the exported values, and each ptc_run (ptc_forward_train) updates them as the
 * exported module's forward does, so N runs give what N calls of the module give. Runs of a
 * library with state must not overlap. info->name is the state-dict name; ptc_buffer_data points
 * at the current contents (of info->dtype, dense; device memory in a CUDA library), readable and
 * writable between runs; NULL for a bad index. ptc_reset_state (inference libraries) sets every
 * buffer back to its exported value. A library without state has 0 buffers. */
PTC_API int ptc_num_buffers(const ptc_model* model);
PTC_API int ptc_buffer_info(const ptc_model* model, int index, ptc_tensor_info* info);
PTC_API void* ptc_buffer_data(ptc_model* model, int index);
PTC_API int ptc_reset_state(ptc_model* model);
/* Training-mode dropout draws its masks from a counter-based generator (Philox-4x32-10) keyed by
 * this seed and the number of forward calls since it was set (0 at ptc_open): the same seed
 * replays the same masks; each ptc_forward_train (and ptc_run) call draws new ones, and its
 * ptc_backward applies the same masks. */
PTC_API int ptc_manual_seed(ptc_model* model, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif /* PTC_RUNTIME_H */
