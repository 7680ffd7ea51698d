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

  const std::set<std::string> absent = absent_tensors();
  auto load_u8 = [&](const std::string& name, const std::vector<int64_t>& shape, ShardTensor which) {
    const SafetensorsFile* file = checked_tensor(name, {"U8"}, shape, false, absent);
    return file->read_runs(name, shard_byte_runs(shard, which, 1));
  };
  auto load_bias = [&](const std::string& name, const std::vector<int64_t>& shape, ShardTensor which) {
    const SafetensorsFile* file = checked_tensor(name, {"BF16", "F32"}, shape, true, absent);
    if (file == nullptr) return std::vector<uint16_t>{};
    const std::string& dtype = file->info(name).dtype;
    return cd::bf16_values(dtype, file->read_runs(name, shard_byte_runs(shard, which, dtype == "BF16" ? 2 : 4)));
  };
  auto load_router = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const SafetensorsFile* file = checked_tensor(name, {"BF16", "F32"}, shape, true, absent);
    return file == nullptr ? std::vector<uint16_t>{} : cd::bf16_values(file->info(name).dtype, file->read(name));
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
