#pragma once
// Which compilation targets enable which instructions: the one place that tests nvcc's target macros
// (__CUDA_ARCH_FEAT_*, __CUDA_ARCH_FAMILY_SPECIFIC__). Kernels test the MXMOE_HAS_* names below, each
// 1 in the device pass of a target that has the instruction and 0 everywhere else (the host pass too).
//
//   MXMOE_HAS_SM90_ASYNC        what sm_90 added for moving data and ordering grids: bulk and tensor copies
//                               (cp.async.bulk*), mbarrier expect_tx / try_wait, thread-block clusters,
//                               programmatic dependent launch (griddepcontrol). sm_90 and newer; the sm_80 /
//                               sm_86 / sm_89 code replaces each (docs/ampere-ada.md).
//   MXMOE_HAS_FP8_MMA_SYNC      mma.sync ... f32.e4m3.e4m3.f32 (no scales): SM89 and newer, any target
//                               (Hopper lowers it to f16 HMMA; FACTS.md §5). The emulated MX atom.
//   MXMOE_HAS_WGMMA             wgmma.mma_async: sm_90a only (arch-specific; no family target has it).
//   MXMOE_HAS_BLOCK_SCALED_MMA  mma.sync ... kind::mxf8f6f4.block_scale (and cvt ... e2m1x2): the
//                               arch-specific targets sm_120a / sm_121a, and the family-specific ones
//                               sm_120f / sm_121f (PTX ISA 9.0: "requires sm_120a and is supported on
//                               sm_120f or higher in the same family from PTX ISA version 8.8"). nvcc
//                               13.0 defines __CUDA_ARCH_FEAT_SM12x_ALL for the `a` targets only, and
//                               __CUDA_ARCH_FAMILY_SPECIFIC__ (1200 or 1210) for both `a` and `f`; plain
//                               sm_120 / sm_121 define neither (CMakeLists.txt refuses them), as CUTLASS's
//                               cutlass/arch/config.h also reads it.
// A kernel whose instruction is missing on a target compiles to a trap there; scripts/check_sass.sh
// and scripts/check_mx_targets.sh fail a build whose MX kernels trap on any SM12x target.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MXMOE_HAS_SM90_ASYNC 1
#else
#define MXMOE_HAS_SM90_ASYNC 0
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define MXMOE_HAS_FP8_MMA_SYNC 1
#else
#define MXMOE_HAS_FP8_MMA_SYNC 0
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MXMOE_HAS_WGMMA 1
#else
#define MXMOE_HAS_WGMMA 0
#endif

#if defined(__CUDA_ARCH__) &&                                                   \
    (defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || \
     (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1200 && \
      __CUDA_ARCH_FAMILY_SPECIFIC__ < 1300))
#define MXMOE_HAS_BLOCK_SCALED_MMA 1
#else
#define MXMOE_HAS_BLOCK_SCALED_MMA 0
#endif
