"""mxmoe: the fused MXFP4 Mixture-of-Experts layer of gpt-oss, from Python.

Tensors go in and out through DLPack (PyTorch, CuPy, JAX, NumPy): CUDA tensors run on the GPU
backends on the caller's current CUDA stream; CPU tensors run the fp64 CPU reference. Weights stay
in the gpt-oss checkpoint layout (MXFP4 blocks of 32 with e8m0 scales) and are prepared once per
layer object.

    import mxmoe
    print(mxmoe.probe())
    config, weights = mxmoe.load_gpt_oss("/models/gpt-oss-20b", layer=0)
    layer = mxmoe.MoeLayer(config, weights)
    out = layer(hidden, router_logits)          # hidden [T, H] bf16, router_logits [T, E] fp32

    out = mxmoe.fused_moe(hidden, router_logits, w1_blocks, w1_scales, w1_bias,
                          w2_blocks, w2_scales, w2_bias, top_k=4)
"""
from __future__ import annotations

import json

from ._mxmoe import Error, MoeConfig, backend_names, load_gpt_oss, write_random_checkpoint
from ._layer import MoeLayer, fused_moe

__all__ = [
    "Error",
    "MoeConfig",
    "MoeLayer",
    "backend_names",
    "fused_moe",
    "load_gpt_oss",
    "probe",
    "write_random_checkpoint",
]


def probe() -> dict:
    """What this build can do here: version, compiled CUDA architectures, the GPUs found (with the
    backends validated on each) and, without a usable GPU, the reason. Needs no GPU."""
    from ._mxmoe import probe_json

    return json.loads(probe_json())
