// Two error channels (docs/design.md): UserError for a bad model, an unsupported op or a bad flag —
// one clear sentence, exit code 1, no stack — and InternalError (PTC_CHECK) for broken
// invariants inside ptc, which carries the source location.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ptc {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

namespace detail {
inline void concat(std::ostringstream&) {}
template <class T, class... Rest>
void concat(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  concat(os, rest...);
}
}  // namespace detail

// Builds a message from pieces: cat("node ", name, " has ", n, " inputs").
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  detail::concat(os, parts...);
  return os.str();
}

template <class... Parts>
[[noreturn]] void user_error(const Parts&... parts) {
  throw UserError(cat(parts...));
}

}  // namespace ptc

#define PTC_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::ptc::InternalError(::ptc::cat("internal error at ", __FILE__, ":", __LINE__,   \
                                            ": check '", #cond, "' failed: ", __VA_ARGS__)); \
  } while (0)
