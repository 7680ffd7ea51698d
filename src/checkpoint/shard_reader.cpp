// One rank's part of a layer read straight from the checkpoint: only the byte runs of shard_byte_runs
// (an expert-parallel rank reads one run per expert and tensor; a tensor-parallel rank one run per expert
// of W1 and b1, and one per row of W2's blocks and scales), each by pread at its offset.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_absent.hpp"
#include "checkpoint/safetensors_dtype.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"

namespace mxmoe {
namespace {

namespace cd = checkpoint_detail;

// Closes the descriptor on every path out.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

std::vector<uint16_t> bf16_from(const std::string& dtype, const std::vector<uint8_t>& bytes) {
  if (dtype == "BF16") {
    std::vector<uint16_t> out(bytes.size() / 2);
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 2);  // an empty run: no pointers
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

}  // namespace

std::vector<uint8_t> SafetensorsFile::read_runs(const std::string& name, const std::vector<ByteRun>& runs) const {
  const TensorInfo& t = info(name);
  const uint64_t n = t.end - t.begin;
  uint64_t total = 0;
  for (const ByteRun& r : runs) {
    MXMOE_REQUIRE(r.offset <= n && r.size <= n - r.offset, "safetensors '", path_.string(), "', tensor '", name,
                  "': byte run [", r.offset, ", ", r.offset + r.size, ") is outside its ", n, " bytes");
    total += r.size;
  }
  std::vector<uint8_t> bytes(total);
  if (total == 0) return bytes;
  FileDescriptor file{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  MXMOE_REQUIRE(file.fd >= 0, "safetensors '", path_.string(), "': cannot reopen the file to read: ",
                std::strerror(errno));
  uint64_t at = 0;
  for (const ByteRun& r : runs) {
    uint64_t done = 0;
    while (done < r.size) {
      const ssize_t got = ::pread(file.fd, bytes.data() + at + done, r.size - done,
                                  static_cast<off_t>(data_begin_ + t.begin + r.offset + done));
      if (got < 0 && errno == EINTR) continue;
      MXMOE_REQUIRE(got > 0, "safetensors '", path_.string(), "', tensor '", name, "': short read at data offset ",
                    t.begin + r.offset + done, " (was the file changed after it was opened?)");
      done += static_cast<uint64_t>(got);
    }
    at += r.size;
  }
  return bytes;
}

MoeLayerData Checkpoint::load_layer_shard(int layer, const ShardSpec& spec) const {
  const std::string where = "checkpoint '" + dir_.string() + "': ";
  MXMOE_REQUIRE(layer >= 0 && layer < config_.num_layers, where, "layer ", layer, " is out of range [0, ",
                config_.num_layers, ")");
  const LayerShard shard = resolve_shard(config_.moe, spec);
  const LayerTensorNames names = layer_tensor_names(naming_, layer);
  const int64_t E = config_.moe.num_experts, H = config_.moe.hidden, I = config_.moe.intermediate;

  std::set<std::string> absent;
  for (const auto& file : files_) {
    const auto names_absent = cd::parse_absent(file->metadata());
    absent.insert(names_absent.begin(), names_absent.end());
  }
  // The tensor's file after checking dtype and shape (as load_layer does); null for an optional tensor
  // the writer recorded as absent.
  auto checked = [&](const std::string& name, std::initializer_list<const char*> dtypes,
                     const std::vector<int64_t>& shape, bool optional) -> const SafetensorsFile* {
    bool present = false;
    for (const auto& file : files_) present = present || file->contains(name);
    if (!present && optional && absent.count(name)) return nullptr;
    const SafetensorsFile& file = file_with(name);
    const TensorInfo& info = file.info(name);
    const std::string in = where + "tensor '" + name + "' in '" + file.path().filename().string() + "': ";
    MXMOE_REQUIRE(std::find_if(dtypes.begin(), dtypes.end(), [&](const char* d) { return info.dtype == d; }) !=
                      dtypes.end(),
                  in, "dtype ", info.dtype, " is not expected here");
    MXMOE_REQUIRE(info.shape == shape, in, "shape ", cd::shape_string(info.shape), ", expected ",
                  cd::shape_string(shape), " (E=", E, ", H=", H, ", I=", I, ")");
    return &file;
  };
  auto load_u8 = [&](const std::string& name, const std::vector<int64_t>& shape, ShardTensor which) {
    const SafetensorsFile* file = checked(name, {"U8"}, shape, false);
    return file->read_runs(name, shard_byte_runs(shard, which, 1));
  };
  auto load_bias = [&](const std::string& name, const std::vector<int64_t>& shape, ShardTensor which) {
    const SafetensorsFile* file = checked(name, {"BF16", "F32"}, shape, true);
    if (file == nullptr) return std::vector<uint16_t>{};
    const std::string& dtype = file->info(name).dtype;
    return bf16_from(dtype, file->read_runs(name, shard_byte_runs(shard, which, dtype == "BF16" ? 2 : 4)));
  };
  auto load_router = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const SafetensorsFile* file = checked(name, {"BF16", "F32"}, shape, true);
    return file == nullptr ? std::vector<uint16_t>{} : bf16_from(file->info(name).dtype, file->read(name));
  };

  MoeLayerData data;
  data.w1_blocks = load_u8(names.w1_blocks, {E, 2 * I, H / 32, 16}, ShardTensor::W1Blocks);
  data.w1_scales = load_u8(names.w1_scales, {E, 2 * I, H / 32}, ShardTensor::W1Scales);
  data.w1_bias = load_bias(names.w1_bias, {E, 2 * I}, ShardTensor::W1Bias);
  data.w2_blocks = load_u8(names.w2_blocks, {E, H, I / 32, 16}, ShardTensor::W2Blocks);
  data.w2_scales = load_u8(names.w2_scales, {E, H, I / 32}, ShardTensor::W2Scales);
  data.w2_bias = load_bias(names.w2_bias, {E, H}, ShardTensor::W2Bias);
  data.router_weight = load_router(names.router_weight, {E, H});
  data.router_bias = load_router(names.router_bias, {E});
  return data;
}

}  // namespace mxmoe
