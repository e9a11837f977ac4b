// drop_buffer_updates: an inference compile keeps no state between calls, so the outputs that
// update buffers (torch.export's buffer mutations) are dropped, with a warning (see passes.h).
#include <spdlog/spdlog.h>

#include "ptc/passes.h"

namespace ptc {

std::unique_ptr<Graph> drop_buffer_updates(const Graph& g) {
  std::unique_ptr<Graph> out = clone_graph(g);
  if (out->updated_buffers.empty()) return out;
  std::string names;
  for (const auto& b : out->updated_buffers) names += (names.empty() ? "" : ", ") + b;
  spdlog::warn("{}: the program updates buffer(s) {}; an inference library keeps no buffers, so the updates are dropped "
               "(--train keeps them)", g.name, names);
  out->outputs.resize(out->outputs.size() - out->updated_buffers.size());
  out->updated_buffers.clear();
  return out;
}

}  // namespace ptc
