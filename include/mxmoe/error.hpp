#pragma once
// mxmoe::Error: every rejected argument, corrupt file and failed CUDA call surfaces as this type,
// with a message that names the argument and what was expected.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mxmoe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <class... Parts>
[[noreturn]] void throw_error(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}
}  // namespace detail

}  // namespace mxmoe

// MXMOE_REQUIRE(cond, "message parts", ...): throw mxmoe::Error built from the parts unless cond.
#define MXMOE_REQUIRE(cond, ...)                           \
  do {                                                     \
    if (!(cond)) ::mxmoe::detail::throw_error(__VA_ARGS__); \
  } while (0)
