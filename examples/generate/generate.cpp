// Greedy generation from C++ over a ptc library's C ABI: the decode step that
// examples/generate/export.py exports (input_ids [1, 1], cache_position [1] -> logits [1, 1, V];
// the library holds the KV cache), compiled with `ptc compile decode.pt2 -o decode.so`.
//
//   ./generate N PROMPT_TOKEN...   feeds the prompt token by token, then prints N new tokens
//
// Build: c++ -O2 generate.cpp -I<dir of decode.h> -L<dir> -l:decode.so
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "decode.h"  // the generated header (its C ABI part: ptc_open, ptc_run, ...)

namespace {

int check(int rc, const char* what) {
  if (rc != PTC_OK) {
    std::fprintf(stderr, "%s: %s\n", what, ptc_last_error());
    std::exit(1);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N PROMPT_TOKEN...\n", argv[0]);
    return 2;
  }
  const int new_tokens = std::atoi(argv[1]);
  std::vector<int64_t> prompt;
  for (int i = 2; i < argc; ++i) prompt.push_back(std::atoll(argv[i]));

  ptc_model* m = nullptr;
  check(ptc_open(nullptr, &m), "ptc_open");
  ptc_tensor_info out_info;
  check(ptc_output_info(m, 0, &out_info), "ptc_output_info");
  const int64_t vocab = out_info.sizes[out_info.rank - 1];
  std::vector<float> logits(static_cast<size_t>(vocab));

  int64_t token = prompt[0], position = 0;
  const int64_t ids_sizes[] = {1, 1}, pos_sizes[] = {1}, out_sizes[] = {1, 1, vocab};
  const size_t steps = prompt.size() + static_cast<size_t>(new_tokens) - 1;
  for (size_t step = 0; step < steps; ++step, ++position) {
    ptc_tensor in[] = {{&token, PTC_INT64, 2, ids_sizes}, {&position, PTC_INT64, 1, pos_sizes}};
    ptc_tensor out = {logits.data(), PTC_FLOAT32, 3, out_sizes};
    check(ptc_run(m, 2, in, 1, &out), "ptc_run");
    if (step + 1 < prompt.size()) {  // still reading the prompt
      token = prompt[step + 1];
      continue;
    }
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (logits[static_cast<size_t>(v)] > logits[static_cast<size_t>(best)]) best = v;
    token = best;
    std::printf("%lld%s", static_cast<long long>(token), step + 1 < steps ? " " : "\n");
  }
  ptc_close(m);
  return 0;
}
