#include "fuzz_common.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "ptc/backend.h"
#include "ptc/codegen.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/frontend.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "ptc/schedule.h"

namespace ptc::fuzz {

void compile_front_half(std::string bytes) {
  static const bool strict = std::getenv("PTC_FUZZ_STRICT") != nullptr;
  static const bool verbose = std::getenv("PTC_FUZZ_VERBOSE") != nullptr;
  try {
    std::unique_ptr<Graph> g = load_pt2_bytes(std::move(bytes), "fuzz.pt2");
    g = run_graph_passes(*g);
    bool external = false;  // both weight layouts, one per backend
    for (const Backend* b : backends()) {
      loop::Program prog = lower_to_loops(*g, b->lower_options(/*channels_last=*/false, CompileOptions{}));
      sched::Schedule s = sched::schedule(prog, b->schedule_options());
      WeightLayout w = layout_weights(prog, *g, external);
      external = !external;
      LibrarySource src = b->generate(prog, s, *g, w, CodegenOptions{});
      (void)src;
    }
    if (verbose) std::fprintf(stderr, "compiled: %zu nodes\n", g->nodes().size());
  } catch (const UserError& e) {
    // The expected outcome for bad input: one sentence for the user.
    if (verbose) std::fprintf(stderr, "user error: %s\n", e.what());
  } catch (const std::overflow_error& e) {  // absurd sizes: exit 1 with a sentence in ptc's main
    if (verbose) std::fprintf(stderr, "overflow: %s\n", e.what());
  } catch (const std::bad_alloc&) {  // likewise (out of memory)
    if (verbose) std::fprintf(stderr, "out of memory\n");
  } catch (const InternalError& e) {
    if (verbose) std::fprintf(stderr, "internal error: %s\n", e.what());
    if (strict) {
      std::fprintf(stderr, "internal error: %s\n", e.what());
      std::abort();
    }
  }
}

}  // namespace ptc::fuzz
