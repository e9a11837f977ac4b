// Built when ptc is configured without libtorch (PTC_WITH_TORCHSCRIPT=OFF).
#include "ptc/error.h"
#include "ptc/frontend.h"

namespace ptc {

bool torchscript_available() { return false; }

std::unique_ptr<Graph> load_torchscript(const std::string& path, const LoadOptions&) {
  user_error(path, ": is a TorchScript archive, and this ptc was built without the TorchScript reader (PTC_WITH_TORCHSCRIPT=OFF)");
}

}  // namespace ptc
