"""mxmoe: the fused MXFP4 Mixture-of-Experts layer of gpt-oss, from Python.

Tensors go in and out through DLPack (PyTorch, CuPy, JAX, NumPy): CUDA tensors run on the GPU
backends on the caller's current CUDA stream; CPU tensors run the fp64 CPU reference. Weights stay
in the gpt-oss checkpoint layout (MXFP4 blocks of 32 with e8m0 scales) and are prepared once per
layer object. bfloat16 tensors may be torch or JAX bfloat16, ml_dtypes.bfloat16 NumPy arrays, or
the bf16 bit patterns as uint16.

    import mxmoe
    print(mxmoe.__version__, mxmoe.probe())
    config, weights = mxmoe.load_gpt_oss("/models/gpt-oss-20b", layer=0)
    layer = mxmoe.MoeLayer(config, weights)
    out = layer(hidden, router_logits)          # hidden [T, H] bf16, router_logits [T, E] fp32
    out = layer(hidden, topk_ids=ids, topk_weights=weights)  # the caller's routing: [T, k] int32/int64, fp32

    out = mxmoe.fused_moe(hidden, router_logits, w1_blocks, w1_scales, w1_bias,
                          w2_blocks, w2_scales, w2_bias, top_k=4)
    out = mxmoe.fused_experts(hidden, w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias,
                              topk_weights, topk_ids)

    # Several GPUs (docs/multi-gpu.md): rank r of W, summed over a torch.distributed group.
    spec = mxmoe.ShardSpec("tp", rank=r, world_size=W)     # or "ep"
    config, part = mxmoe.load_gpt_oss("/models/gpt-oss-120b", layer=0, shard=spec)  # only r's bytes
    layer = mxmoe.MoeLayer(config, part, shard=spec, group=True)
    out = layer(hidden, router_logits)          # the layer's output on every rank
"""
from ._mxmoe import Error, MoeConfig, ShardSpec, backend_names, load_gpt_oss, write_random_checkpoint
from ._layer import MoeLayer, fused_experts, fused_moe

__version__: str  # the installed version (module __getattr__ below)

__all__ = [
    "Error",
    "MoeConfig",
    "MoeLayer",
    "ShardSpec",
    "__version__",
    "backend_names",
    "fused_experts",
    "fused_moe",
    "load_gpt_oss",
    "probe",
    "write_random_checkpoint",
]


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, which the build stamps into the package
    metadata); from a build tree without metadata, the C++ library's (CMake's project version)."""
    from importlib import metadata

    try:
        return metadata.version("mxmoe")
    except metadata.PackageNotFoundError:
        return probe()["version"]


def __getattr__(name: str):
    # Computed on first use: the fallback loads the probe, which importing mxmoe should not do.
    if name == "__version__":
        global __version__
        __version__ = _version()
        return __version__
    raise AttributeError(f"module 'mxmoe' has no attribute {name!r}")


def probe() -> dict:
    """What this build can do here: version, compiled CUDA architectures, the GPUs found (with the
    backends validated on each) and, without a usable GPU, the reason. Needs no GPU."""
    import json

    from ._mxmoe import probe_json

    return json.loads(probe_json())
