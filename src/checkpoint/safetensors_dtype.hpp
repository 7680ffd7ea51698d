#pragma once
// safetensors dtype names, element sizes and shape arithmetic, shared by the reader and the writer.
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/formats.hpp"

namespace mxmoe::checkpoint_detail {

struct DtypeSize {
  std::string_view name;
  uint64_t bytes;
};
// The whole-byte dtypes of the safetensors format (sub-byte F4/F6 are not supported).
inline constexpr std::array<DtypeSize, 16> kSafetensorsDtypes{{
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
    {"I32", 4}, {"U32", 4}, {"F32", 4},
    {"I64", 8}, {"U64", 8}, {"F64", 8},
}};

// Element size in bytes; 0 for a dtype this library does not know.
inline uint64_t dtype_size(std::string_view dtype) {
  for (const auto& d : kSafetensorsDtypes)
    if (d.name == dtype) return d.bytes;
  return 0;
}

inline std::string known_dtypes() {
  std::string out;
  for (const auto& d : kSafetensorsDtypes) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

// product(shape) * element_size, or nullopt if a dimension is negative or the product overflows.
inline std::optional<uint64_t> byte_size(std::span<const int64_t> shape, uint64_t element_size) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t n = element_size;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > kMax / ud) return std::nullopt;
    n *= ud;
  }
  return n;
}

inline std::string shape_string(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// A BF16 or F32 tensor's bytes (the caller checked which) as bf16 bits; F32 rounds to nearest even.
inline std::vector<uint16_t> bf16_values(std::string_view dtype, const std::vector<uint8_t>& bytes) {
  if (dtype == "BF16") {
    std::vector<uint16_t> out(bytes.size() / 2);
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 2);  // no pointers to an empty run
    return out;
  }
  std::vector<uint16_t> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    float x;
    std::memcpy(&x, bytes.data() + 4 * i, 4);
    out[i] = float_to_bf16(x);
  }
  return out;
}

}  // namespace mxmoe::checkpoint_detail
