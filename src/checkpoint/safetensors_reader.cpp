// safetensors reader (FACTS.md §2). The header is validated completely at open: every length,
// offset, shape and dtype is checked before any tensor byte is read, so read() can trust it.
#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors_dtype.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

namespace cd = checkpoint_detail;
using nlohmann::json;

// Real headers are a few MB at most (gpt-oss-120b: ~100 KB); anything bigger is corruption or an
// attempt to make us allocate.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string where(const std::filesystem::path& path) { return "safetensors file '" + path.string() + "': "; }
std::string where(const std::filesystem::path& path, const std::string& tensor) {
  return where(path) + "tensor '" + tensor + "': ";
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::vector<int64_t> parse_shape(const std::filesystem::path& path, const std::string& name, const json& shape) {
  MXMOE_REQUIRE(shape.is_array(), where(path, name), "'shape' must be an array of integers, found ",
                shape.type_name());
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const json& d : shape) {
    MXMOE_REQUIRE(d.is_number_integer(), where(path, name), "'shape' must hold integers, found ", d.type_name(),
                  " ", d.dump());
    if (d.is_number_unsigned()) {
      const auto u = d.get<uint64_t>();
      MXMOE_REQUIRE(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where(path, name),
                    "shape dimension ", u, " overflows int64");
      out.push_back(static_cast<int64_t>(u));
    } else {
      const auto s = d.get<int64_t>();
      MXMOE_REQUIRE(s >= 0, where(path, name), "negative shape dimension ", s);
      out.push_back(s);
    }
  }
  return out;
}

uint64_t parse_offset(const std::filesystem::path& path, const std::string& name, const json& v) {
  MXMOE_REQUIRE(v.is_number_unsigned(), where(path, name),
                "'data_offsets' must be two non-negative integers, found ", v.dump());
  return v.get<uint64_t>();
}

TensorInfo parse_tensor(const std::filesystem::path& path, const std::string& name, const json& entry,
                        uint64_t data_size) {
  MXMOE_REQUIRE(entry.is_object(), where(path, name), "entry must be a JSON object, found ", entry.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    MXMOE_REQUIRE(entry.contains(key), where(path, name), "entry is missing '", key, "'");

  TensorInfo info;
  const json& dtype = entry["dtype"];
  MXMOE_REQUIRE(dtype.is_string(), where(path, name), "'dtype' must be a string, found ", dtype.type_name());
  info.dtype = dtype.get<std::string>();
  const uint64_t element_size = cd::dtype_size(info.dtype);
  MXMOE_REQUIRE(element_size != 0, where(path, name), "unknown dtype '", info.dtype, "' (known: ", cd::known_dtypes(),
                ")");

  info.shape = parse_shape(path, name, entry["shape"]);
  const auto expected_bytes = cd::byte_size(info.shape, element_size);
  MXMOE_REQUIRE(expected_bytes.has_value(), where(path, name), "shape ", cd::shape_string(info.shape),
                " overflows: its byte size does not fit in 64 bits");

  const json& offsets = entry["data_offsets"];
  MXMOE_REQUIRE(offsets.is_array() && offsets.size() == 2, where(path, name),
                "'data_offsets' must be an array [begin, end], found ", offsets.dump());
  info.begin = parse_offset(path, name, offsets[0]);
  info.end = parse_offset(path, name, offsets[1]);
  MXMOE_REQUIRE(info.begin <= info.end, where(path, name), "data_offsets begin ", info.begin, " > end ", info.end);
  MXMOE_REQUIRE(info.end <= data_size, where(path, name), "data_offsets end ", info.end,
                " is past the end of the data section (", data_size, " bytes)");
  MXMOE_REQUIRE(info.begin % element_size == 0, where(path, name), "misaligned data: begin offset ", info.begin,
                " is not a multiple of the ", info.dtype, " element size ", element_size);
  MXMOE_REQUIRE(info.end - info.begin == *expected_bytes, where(path, name), "byte size ", info.end - info.begin,
                " does not match shape ", cd::shape_string(info.shape), " x ", element_size, " bytes (",
                info.dtype, ") = ", *expected_bytes);
  return info;
}

std::map<std::string, std::string> parse_metadata(const std::filesystem::path& path, const json& meta) {
  MXMOE_REQUIRE(meta.is_object(), where(path), "'__metadata__' must be an object of strings, found ",
                meta.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    MXMOE_REQUIRE(value.is_string(), where(path), "'__metadata__' value of '", key, "' must be a string, found ",
                  value.type_name());
    out[key] = value.get<std::string>();
  }
  return out;
}

// Two non-empty tensors may not share a byte: a crafted file could otherwise alias weights.
void check_no_overlap(const std::filesystem::path& path, const std::map<std::string, TensorInfo>& tensors) {
  std::vector<const std::pair<const std::string, TensorInfo>*> ranges;
  for (const auto& entry : tensors)
    if (entry.second.end > entry.second.begin) ranges.push_back(&entry);
  std::sort(ranges.begin(), ranges.end(), [](auto* a, auto* b) {
    return a->second.begin != b->second.begin ? a->second.begin < b->second.begin : a->second.end < b->second.end;
  });
  const std::pair<const std::string, TensorInfo>* furthest = nullptr;  // the range ending last so far
  for (auto* r : ranges) {
    if (furthest && r->second.begin < furthest->second.end)
      detail::throw_error(where(path), "tensors '", furthest->first, "' [", furthest->second.begin, ", ",
                          furthest->second.end, ") and '", r->first, "' [", r->second.begin, ", ", r->second.end,
                          ") overlap");
    if (!furthest || r->second.end > furthest->second.end) furthest = r;
  }
}

json parse_header(const std::filesystem::path& path, const std::string& text) {
  // nlohmann keeps the last of duplicate keys silently; a duplicated tensor name is corruption.
  std::string duplicate;
  std::set<std::string> seen;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, on_event);
  } catch (const json::exception& e) {
    detail::throw_error(where(path), "header is not valid JSON: ", e.what());
  }
  MXMOE_REQUIRE(header.is_object(), where(path), "header is not a JSON object (found ", header.type_name(), ")");
  MXMOE_REQUIRE(duplicate.empty(), where(path), "header names '", duplicate, "' twice");
  return header;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  MXMOE_REQUIRE(in.is_open(), where(path), "cannot open file");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  MXMOE_REQUIRE(size >= 0, where(path), "cannot determine the file size");
  file_size_ = static_cast<uint64_t>(size);
  MXMOE_REQUIRE(file_size_ >= 8, where(path), "file is ", file_size_,
                " bytes, shorter than the 8-byte header length field (truncated?)");

  unsigned char length_bytes[8];
  in.seekg(0);
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  MXMOE_REQUIRE(in.gcount() == 8, where(path), "cannot read the header length");
  const uint64_t header_size = read_u64_le(length_bytes);
  MXMOE_REQUIRE(header_size != 0, where(path), "header length is 0");
  MXMOE_REQUIRE(header_size <= kMaxHeaderBytes, where(path), "header length ", header_size,
                " is absurdly large (limit ", kMaxHeaderBytes, " bytes)");
  MXMOE_REQUIRE(header_size <= file_size_ - 8, where(path), "header length ", header_size,
                " runs past the end of the file (", file_size_, " bytes; truncated?)");

  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  MXMOE_REQUIRE(static_cast<uint64_t>(in.gcount()) == header_size, where(path), "short read of the ", header_size,
                "-byte header");
  data_begin_ = 8 + header_size;
  const uint64_t data_size = file_size_ - data_begin_;

  const json header = parse_header(path, text);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(path, entry);
      continue;
    }
    tensors_.emplace(name, parse_tensor(path, name, entry, data_size));
  }
  check_no_overlap(path, tensors_);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  MXMOE_REQUIRE(it != tensors_.end(), where(path_), "no tensor named '", name, "' (the file has ", tensors_.size(),
                " tensors)");
  return it->second;
}

std::vector<uint8_t> SafetensorsFile::read(const std::string& name) const {
  const TensorInfo& t = info(name);
  const uint64_t n = t.end - t.begin;
  std::vector<uint8_t> bytes(n);
  if (n == 0) return bytes;
  // Only this tensor's bytes: checkpoints can be many GB.
  std::ifstream in(path_, std::ios::binary);
  MXMOE_REQUIRE(in.is_open(), where(path_, name), "cannot reopen the file to read");
  in.seekg(static_cast<std::streamoff>(data_begin_ + t.begin));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n));
  MXMOE_REQUIRE(in && static_cast<uint64_t>(in.gcount()) == n, where(path_, name), "short read: expected ", n,
                " bytes at data offset ", t.begin, " (was the file changed after it was opened?)");
  return bytes;
}

}  // namespace mxmoe
