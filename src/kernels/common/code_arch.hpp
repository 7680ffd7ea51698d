#pragma once
// Which of this build's code a device runs: the virtual target its kernels were compiled from, as
// compute capability x 10 (80, 86, 89, 90, 120, 121), read from a kernel's attributes. A build without
// the device's own target runs an older one: sm_80 SASS on an RTX 3090, or compute_80 PTX that the
// driver compiles for a Hopper. What that code has (PDL, bulk copies, clusters, wgmma), not what the
// device has, decides what is launched and planned (plan/device_caps.cpp).
namespace mxmoe::kernels {

// Cached per device; an Error when the device has no code of this build at all.
int code_arch(int device);
// code_arch of the current device.
int current_code_arch();
// Whether the current device runs sm_90 or newer code: launched with PDL, and given tensor maps.
bool runs_sm90_code();

}  // namespace mxmoe::kernels
