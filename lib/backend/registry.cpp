// The registry of backends: a new target is a folder under lib/backend and one line here.
#include <string>

#include "backends.h"
#include "ptc/error.h"

namespace ptc {

const std::vector<const Backend*>& backends() {
  static const std::vector<const Backend*> all{&cpu_backend(), &cuda_backend()};
  return all;
}

const Backend& backend_named(const std::string& name) {
  std::string known;
  for (const Backend* b : backends()) {
    if (name == b->name()) return *b;
    known += std::string(known.empty() ? "" : " or ") + b->name();
  }
  user_error("--device ", name, ": expected ", known);
}

}  // namespace ptc
