#pragma once
// The block-scaled path's self-test: before a runner first uses an MX atom on a GPU, a small random
// layer runs through it and is held to a known answer (the MXFP8-quantising fp64 reference, and the
// W4A16 path of the same layer on the same GPU). The native atom has never run on its own hardware
// in this project; the gate makes a wrong fragment or scale convention a fallback to W4A16 with a
// message, never a silently wrong layer. On Hopper the same gate runs over the emulated atom.
#include <optional>
#include <string>

#include "kernels/mma/mx_gemm.hpp"
#include "mxmoe/runner.hpp"

namespace mxmoe {

struct MxSelfTest {
  bool ran = false;       // false: the atom cannot run on this device (nothing was launched)
  bool passed = false;
  mma::MxAtom atom = mma::MxAtom::Emulated;
  double rel_to_mx_reference = 0;  // relative L2 error against the MXFP8-quantising fp64 reference
  double rel_to_w4a16 = 0;         // against the W4A16 (GEMV) output of the same layer here
  std::string detail;              // why it failed or did not run
  // "passed (native atom: 2.1e-03 to the MXFP8 reference, 3.9e-02 to W4A16)", "FAILED (...)", ...
  std::string to_string() const;
};

// The bounds the gate holds the atom to: the MX GPU tests' bound against the MXFP8 reference, and
// one above the MXFP8 quantisation error itself (3-5.5% relative on random layers) against W4A16.
inline constexpr double kSelfTestMxBound = 1e-2;
inline constexpr double kSelfTestW4a16Bound = 8e-2;

const char* to_string(mma::MxAtom atom);

// Runs the test now on the current CUDA device, `atom` in the MX plan (PlantedFault: the test of
// the gate itself). Never throws for a wrong answer; a CUDA error is an Error.
MxSelfTest run_mx_self_test(mma::MxAtom atom);

// The gate: the test's result for the current device and `atom`, run once per process (thread-safe)
// and cached. On the first failure it says so on stderr, once, asking for a report.
const MxSelfTest& mx_self_test(mma::MxAtom atom);

// The atom an MX backend's runner would use on the current device under `options` (a target's
// native plan runs the emulated atom on a GPU that is not SM12x), or nullopt when `backend` is not
// an MX backend or cannot run here at all (the planner then reports why).
std::optional<mma::MxAtom> mx_atom_for(Backend backend, const RunnerOptions& options);

// The gate, as MoeRunner applies it: `backend`, or Auto (the W4A16 families, planned as usual)
// where `backend` is an MX backend whose atom failed the self-test on the current device.
Backend gate_mx_backend(Backend backend, const RunnerOptions& options);

// For the gate's own GPU test: while planted, the gate tests the planted-fault atom in place of the
// one a runner asks for. Each change clears the cached results (and the once-only message).
void plant_mx_self_test_fault(bool planted);

}  // namespace mxmoe
