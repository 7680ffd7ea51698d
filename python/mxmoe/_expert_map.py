"""vLLM's expert_map for fused_experts (expert parallelism): [E_global] local expert ids, -1 where another
rank holds the expert. Global topk_ids become local ids, -1 for other ranks' experts (which mxmoe drops:
no row, nothing added). The map is applied in the caller's own framework, on its device, and never
indexes out of bounds: an id outside [0, E_global) other than -1 becomes -2, which mxmoe turns into a NaN
row for that token (the ids are not read on the host)."""
from typing import Any

from ._layer import _framework
from ._mxmoe import Error


def map_ids(expert_map: Any, topk_ids: Any) -> Any:
    framework = _framework(topk_ids)
    if _framework(expert_map) != framework:
        raise Error(f"expert_map: expected a {framework} tensor like topk_ids, got {type(expert_map).__name__}")
    shape = getattr(expert_map, "shape", None)
    if shape is None or len(shape) != 1 or int(shape[0]) < 1:
        raise Error(f"expert_map: expected a [E_global] tensor of local expert ids (-1 for other ranks' "
                    f"experts), got shape {list(shape) if shape is not None else None}")
    n = int(shape[0])
    if framework == "torch":
        import torch

        ids = topk_ids.long()
        local = expert_map.to(device=ids.device).long()[ids.clamp(0, n - 1)]
        inside = (ids >= 0) & (ids < n)
        return torch.where(ids == -1, torch.full_like(ids, -1),
                           torch.where(inside, local, torch.full_like(ids, -2)))
    if framework == "jax":
        import jax.numpy as xp
    elif framework == "cupy":
        import cupy as xp
    elif framework == "numpy":
        import numpy as xp
    else:
        raise Error(f"topk_ids: expected a torch, CuPy, JAX or NumPy tensor, got {type(topk_ids).__name__}")
    ids = xp.asarray(topk_ids).astype(xp.int64)
    if framework == "numpy":  # host ids: say which one is wrong
        bad = (ids < -1) | (ids >= n)
        if bad.any():
            t, s = (int(i) for i in xp.argwhere(bad)[0])
            raise Error(f"topk_ids[{t}, {s}] = {int(ids[t, s])}: expected a global expert id in [0, {n}) "
                        "(expert_map's length) or -1")
    local = xp.asarray(expert_map).astype(xp.int64)[xp.clip(ids, 0, n - 1)]
    inside = (ids >= 0) & (ids < n)
    return xp.where(ids == -1, -1, xp.where(inside, local, -2)).astype(xp.int64)
