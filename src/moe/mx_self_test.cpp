// The MX atoms' known-answer test and the gate built on it (mx_self_test.hpp).
#include "moe/mx_self_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "kernels/common/code_arch.hpp"
#include "moe/backend.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {
namespace {

// The test layer: small enough to take a few milliseconds, shaped to reach every part of the MX
// data path: K = 320 ends in a half chunk of 128 (10 MX blocks), I = 192 is not a multiple of 128,
// two m-tiles of some experts, an expert with no tokens is likely at E = 8, k = 2, T = 37.
constexpr int64_t kTokens = 37;
constexpr uint64_t kSeed = 0x5e1f7e57;

MoeConfig test_config() {
  MoeConfig c;
  c.name = "mx self-test";
  c.num_experts = 8;
  c.top_k = 2;
  c.hidden = 320;
  c.intermediate = 192;
  return c;
}

// Scales that differ between neighbouring rows and blocks, so that an atom which reads the wrong
// row's, column's or block's scale gives a wrong answer (the random layer's exponents are spread
// already; this widens them by up to 2^3 either way).
void spread_scales(std::vector<uint8_t>& scales) {
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(scales[i] + static_cast<int>((i * 5 + i / 7) % 7) - 3);
}

double relative_l2(std::span<const uint16_t> out, std::span<const double> ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = bf16_to_float(out[i]);
    if (!std::isfinite(o)) return INFINITY;
    num += (o - ref[i]) * (o - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// One forward of `backend` (the MX path with `atom`, or W4A16) on the device, on a private stream.
std::vector<uint16_t> run_layer(Backend backend, std::optional<mma::MxAtom> atom, const MoeConfig& cfg,
                                const MoeLayerData& layer, const std::vector<uint16_t>& hidden,
                                const std::vector<float>& logits) {
  RunnerOptions options;
  options.backend = backend;
  options.max_tokens = kTokens;
  options.use_env = false;
  const std::unique_ptr<BackendImpl> impl = make_gpu_backend(backend, cfg, layer.view(), options, atom);
  const size_t out_elems = static_cast<size_t>(kTokens) * cfg.hidden;
  const DeviceBuffer d_hidden(hidden.data(), hidden.size() * 2), d_logits(logits.data(), logits.size() * 4);
  DeviceBuffer d_out(out_elems * 2), ws(std::max<size_t>(impl->workspace_bytes(kTokens), 1));
  cudaStream_t stream = nullptr;
  MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<uint16_t> out(out_elems);
  try {
    MXMOE_CUDA_CHECK(cudaMemsetAsync(d_out.get(), 0xFF, d_out.bytes(), stream));  // poisoned: NaN if unwritten
    MXMOE_CUDA_CHECK(cudaMemsetAsync(ws.get(), 0xFF, ws.bytes(), stream));
    impl->forward(d_hidden.get<uint16_t>(), d_logits.get<float>(), kTokens, d_out.get<uint16_t>(), ws.get(), stream,
                  MoeRunner::kAllStages);
    MXMOE_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost, stream));
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
  MXMOE_CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

}  // namespace

const char* to_string(mma::MxAtom atom) {
  switch (atom) {
    case mma::MxAtom::Native: return "native";
    case mma::MxAtom::Emulated: return "emulated";
    case mma::MxAtom::PlantedFault: return "planted-fault";
  }
  return "?";
}

std::string MxSelfTest::to_string() const {
  char errors[160];
  std::snprintf(errors, sizeof errors, "%.1e to the MXFP8 reference (bound %.0e), %.1e to W4A16 (bound %.0e)",
                rel_to_mx_reference, kSelfTestMxBound, rel_to_w4a16, kSelfTestW4a16Bound);
  const std::string what = std::string(mxmoe::to_string(atom)) + " atom";
  if (!ran) return "not run (" + what + ": " + detail + ")";
  return (passed ? "passed (" : "FAILED (") + what + ": " + errors + (detail.empty() ? "" : "; " + detail) + ")";
}

MxSelfTest run_mx_self_test(mma::MxAtom atom) {
  MxSelfTest r;
  r.atom = atom;
  // The code's compute capability (code_arch.hpp): sm_80 code on a Hopper has no FP8 mma.sync.
  const int code = kernels::current_code_arch(), major = code / 10, minor = code % 10;
  const mma::MxAtom runs_as = atom == mma::MxAtom::PlantedFault ? mma::MxAtom::Emulated : atom;
  if (!mma::mx_supported(runs_as, major, minor)) {
    r.detail = "needs " + std::string(atom == mma::MxAtom::Native ? "compute capability 12.x" : "8.9 or newer") +
               ", this GPU runs " + std::to_string(major) + "." + std::to_string(minor) + " code";
    return r;
  }
  const MoeConfig cfg = test_config();
  MoeLayerData layer = MoeLayerData::random(cfg, kSeed);
  spread_scales(layer.w1_scales);
  spread_scales(layer.w2_scales);
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> hidden(static_cast<size_t>(kTokens) * cfg.hidden);
  for (uint16_t& h : hidden) h = float_to_bf16(normal(rng));
  std::vector<float> logits(static_cast<size_t>(kTokens) * cfg.num_experts);
  for (float& l : logits) l = 2.f * normal(rng);

  const Backend mx_backend = atom == mma::MxAtom::Native ? Backend::Mx : Backend::MxEmulated;
  const std::vector<uint16_t> out = run_layer(mx_backend, atom, cfg, layer, hidden, logits);
  const std::vector<uint16_t> w4a16 = run_layer(Backend::Gemv, std::nullopt, cfg, layer, hidden, logits);
  ReferenceOptions quantised;
  quantised.mxfp8_gemm1_input = quantised.mxfp8_gemm2_input = true;
  std::vector<double> ref(out.size());
  reference_moe_f64(cfg, layer.view(), hidden, logits, kTokens, ref, quantised);
  std::vector<double> w4a16_f64(w4a16.size());
  for (size_t i = 0; i < w4a16.size(); ++i) w4a16_f64[i] = bf16_to_float(w4a16[i]);
  r.ran = true;
  r.rel_to_mx_reference = relative_l2(out, ref);
  r.rel_to_w4a16 = relative_l2(out, w4a16_f64);
  r.passed = r.rel_to_mx_reference <= kSelfTestMxBound && r.rel_to_w4a16 <= kSelfTestW4a16Bound;
  if (!std::isfinite(r.rel_to_mx_reference)) r.detail = "non-finite or unwritten outputs";
  return r;
}

namespace {
struct GateState {
  std::mutex mutex;
  std::map<std::pair<int, mma::MxAtom>, MxSelfTest> results;
  bool planted = false;
};
GateState& gate_state() {
  static GateState state;
  return state;
}
}  // namespace

const MxSelfTest& mx_self_test(mma::MxAtom atom) {
  GateState& g = gate_state();
  int device = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(g.mutex);
  const auto key = std::make_pair(device, atom);
  if (const auto it = g.results.find(key); it != g.results.end()) return it->second;
  const MxSelfTest& r = g.results.emplace(key, run_mx_self_test(g.planted ? mma::MxAtom::PlantedFault : atom)).first->second;
  if (r.ran && !r.passed) {
    cudaDeviceProp prop{};
    MXMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::cerr << "mxmoe: the " << to_string(atom) << " MX atom failed its self-test on GPU " << device << " ("
              << prop.name << ", compute capability " << prop.major << "." << prop.minor << "): " << r.to_string()
              << ". The block-scaled (MXFP8) path is off for this process and the W4A16 path runs instead. "
              << "Please report this with the output of `mxmoe probe`.\n";
  }
  return r;
}

void plant_mx_self_test_fault(bool planted) {
  GateState& g = gate_state();
  const std::lock_guard lock(g.mutex);
  g.planted = planted;
  g.results.clear();
}

Backend gate_mx_backend(Backend backend, const RunnerOptions& options) {
  const std::optional<mma::MxAtom> atom = mx_atom_for(backend, options);
  return atom && !mx_self_test(*atom).passed ? Backend::Auto : backend;
}

std::optional<mma::MxAtom> mx_atom_for(Backend backend, const RunnerOptions& options) {
  if (backend != Backend::Mx && backend != Backend::MxEmulated) return std::nullopt;
  // The code's compute capability (code_arch.hpp): sm_80 code on a Hopper has no FP8 mma.sync.
  const int code = kernels::current_code_arch(), major = code / 10, minor = code % 10;
  // The native atom needs an SM12x GPU, except that a target's native plan runs the emulated atom on
  // another GPU (gpu_backend.cpp); without a target the planner says why mx cannot run here.
  if (backend == Backend::Mx && major != 12 && options.target.empty()) return std::nullopt;
  const mma::MxAtom atom = backend == Backend::Mx && major == 12 ? mma::MxAtom::Native : mma::MxAtom::Emulated;
  if (!mma::mx_supported(atom, major, minor)) return std::nullopt;
  return atom;
}

std::string mx_self_test_report(int device) {
  int count = 0;
  MXMOE_CUDA_CHECK(cudaGetDeviceCount(&count));
  MXMOE_REQUIRE(device >= 0 && device < count, "device: ", device, " is not a CUDA device (", count, " found)");
  int previous = 0, major = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&previous));
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MXMOE_CUDA_CHECK(cudaSetDevice(device));
  std::string report;
  try {
    report = mx_self_test(major == 12 ? mma::MxAtom::Native : mma::MxAtom::Emulated).to_string();
  } catch (const Error& e) {
    report = std::string("not run (") + e.what() + ")";
  }
  MXMOE_CUDA_CHECK(cudaSetDevice(previous));
  return report;
}

}  // namespace mxmoe
