// safetensors writer (FACTS.md §2): tensors in name order, each starting 8-byte aligned, the header
// padded with spaces so that the data section starts 8-byte aligned as well.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors_dtype.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

namespace cd = checkpoint_detail;
constexpr uint64_t kAlign = 8;

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = "write_safetensors '" + path.string() + "': ";
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MXMOE_REQUIRE(name != "__metadata__", where, "'__metadata__' is reserved and cannot name a tensor");
    const uint64_t element_size = cd::dtype_size(t.dtype);
    MXMOE_REQUIRE(element_size != 0, where, "tensor '", name, "': unknown dtype '", t.dtype, "' (known: ",
                  cd::known_dtypes(), ")");
    const auto expected = cd::byte_size(t.shape, element_size);
    MXMOE_REQUIRE(expected.has_value(), where, "tensor '", name, "': invalid shape ", cd::shape_string(t.shape));
    MXMOE_REQUIRE(*expected == t.bytes.size(), where, "tensor '", name, "': ", t.bytes.size(),
                  " bytes do not match shape ", cd::shape_string(t.shape), " x ", element_size, " bytes (", t.dtype,
                  ") = ", *expected);
    offset = align_up(offset);
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    detail::throw_error(where, "cannot encode the header: ", e.what());
  }
  text.append(align_up(8 + text.size()) - 8 - text.size(), ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MXMOE_REQUIRE(out.is_open(), where, "cannot open the file for writing");
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  uint64_t written = 0;
  for (const auto& [name, t] : tensors) {
    const std::string zeros(align_up(written) - written, '\0');
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    written = align_up(written) + t.bytes.size();
  }
  out.flush();
  MXMOE_REQUIRE(out.good(), where, "write failed (disk full?)");
}

}  // namespace mxmoe
