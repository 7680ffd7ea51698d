"""The implementations compared, each behind one interface: `prepare(layers)` once, then
`forward(l, hidden, logits) -> out [T, H] bf16` for layer l, from the same router logits [T, E] fp32 and
hidden rows [T, H] bf16. `capturable` says whether a forward can be captured in a CUDA graph. A missing
package raises ImportError from the constructor, which the driver reports as "unavailable".

MXFP4 implementations take the checkpoint-layout layers (peer_layers.random_layer); bf16 ones take
Bf16Layer, the same weights dequantised (exactly) to bf16 in transformers' GptOssExperts layout."""
from __future__ import annotations

from dataclasses import dataclass

import torch

import peer_layers


@dataclass
class Bf16Layer:
    gate_up: torch.Tensor  # [E, H, 2I], gate/linear interleaved along 2I
    gate_up_bias: torch.Tensor  # [E, 2I] bf16
    down: torch.Tensor  # [E, I, H]
    down_bias: torch.Tensor  # [E, H] bf16

    @staticmethod
    def from_checkpoint(layer: dict) -> "Bf16Layer":
        return Bf16Layer(peer_layers.dequantize(layer["w1_blocks"], layer["w1_scales"], transpose=True),
                         layer["w1_bias"],
                         peer_layers.dequantize(layer["w2_blocks"], layer["w2_scales"], transpose=True),
                         layer["w2_bias"])


class Mxmoe:
    """mxmoe.MoeLayer on CUDA torch tensors, backend "auto" (the planner's choice per T)."""
    name = "mxmoe"
    weights = "mxfp4"
    capturable = True

    def __init__(self, model: str, max_tokens: int):
        import mxmoe

        self.mxmoe, self.model, self.max_tokens = mxmoe, model, max_tokens
        self.about = "mxmoe.MoeLayer, backend auto (the planner's kernels per T), weights in the checkpoint layout"

    def versions(self) -> dict:
        version = getattr(self.mxmoe, "__version__", None) or self.mxmoe.probe().get("version", "unknown")
        return {"mxmoe": version}

    def prepare(self, layers: list) -> None:
        self.layers = [self.mxmoe.MoeLayer(self.model, w, backend="auto", max_tokens=self.max_tokens) for w in layers]

    def forward(self, l, hidden, logits):
        return self.layers[l](hidden, logits)

    def describe(self, tokens: int) -> str:
        return f"{self.layers[0].backend}: {self.layers[0].describe_plan(tokens)}"


class TritonKernels:
    """OpenAI's triton_kernels as vLLM calls it for gpt-oss MXFP4 on Hopper (gpt_oss_triton_kernels_moe.py
    and mxfp4_utils._swizzle_mxfp4): topk with the softmax over the k, ragged metadata, matmul_ogs with
    the gather and the fused SwiGLU (alpha 1.702, limit 7.0), then matmul_ogs with the scatter and the
    routing weights as gammas; weights in the Hopper MXFP4 value and scale layouts, split_k forced to 1."""
    name = "triton_kernels"
    weights = "mxfp4"
    capturable = True

    def __init__(self, experts: int, top_k: int, hidden: int, intermediate: int):
        import triton
        import triton_kernels
        import triton_kernels.matmul_ogs as ogs
        import triton_kernels.swiglu
        from triton_kernels.matmul_ogs_details import opt_flags
        from triton_kernels.tensor import make_ragged_tensor_metadata
        from triton_kernels.topk import topk

        self.triton, self.tk, self.ogs, self.topk = triton, triton_kernels, ogs, topk
        self.make_ragged = make_ragged_tensor_metadata
        self.e, self.k, self.h, self.i = experts, top_k, hidden, intermediate
        self.act = ogs.FusedActivation(
            ogs.FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit"), reduction_n=2),
            (peer_layers.ALPHA, peer_layers.LIMIT))
        if torch.cuda.get_device_capability()[0] == 9:
            opt_flags.update_opt_flags_constraints({"split_k": 1})  # as vLLM on Hopper
        self.about = ("triton_kernels matmul_ogs MXFP4 x bf16, Hopper layouts, fused SwiGLU, "
                      "as vLLM's gpt_oss_triton_kernels_moe")

    def versions(self) -> dict:
        return {"triton": self.triton.__version__, "triton_kernels": getattr(self.tk, "__file__", "")}

    def _swizzle(self, blocks, scales):
        """Checkpoint [E, N, K/32, 16] and [E, N, K/32] -> the [E, K, N] FP4 tensor and its scales in the
        layouts this GPU's matmul_ogs reads (vLLM's _swizzle_mxfp4, num_warps 8)."""
        from triton_kernels.numerics import InFlexData
        from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor
        from triton_kernels.tensor_details import layout

        e, n, kb, _ = blocks.shape
        values = blocks.reshape(e, n, kb * 16).transpose(-2, -1)
        scales = scales.transpose(-2, -1)
        value_layout, value_opts = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        scale_layout, scale_opts = layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=8)
        w = convert_layout(wrap_torch_tensor(values, dtype=FP4), value_layout, **value_opts)
        s = convert_layout(wrap_torch_tensor(scales), scale_layout, **scale_opts)
        return w, self.ogs.PrecisionConfig(weight_scale=s, flex_ctx=self.ogs.FlexCtx(rhs_data=InFlexData()))

    def prepare(self, layers: list) -> None:
        self.layers = []
        for w in layers:
            w1, pc1 = self._swizzle(w["w1_blocks"], w["w1_scales"])
            w2, pc2 = self._swizzle(w["w2_blocks"], w["w2_scales"])
            self.layers.append((w1, pc1, w["w1_bias"].float(), w2, pc2, w["w2_bias"].float()))

    def forward(self, l, hidden, logits):
        ogs, (w1, pc1, b1, w2, pc2, b2) = self.ogs, self.layers[l]
        t = hidden.shape[0]
        sparse = self.topk(logits, self.k, apply_softmax=True)
        meta = sparse.mask_metadata
        dispatch, combine = meta.row_sorted_indx, meta.col_sorted_indx
        ragged = self.make_ragged(meta.col_sum, dispatch.shape[0])
        gate_scal = sparse.vals.flatten()[combine]
        routing = ogs.RoutingData(gate_scal, ragged.slice_sizes, self.e, self.k, ragged)
        inter = torch.empty((1, t * self.k, self.i), dtype=hidden.dtype, device=hidden.device)
        ogs.matmul_ogs(hidden, w1, b1, routing, gather_indx=ogs.GatherIndx(combine, dispatch), precision_config=pc1,
                       fused_activation=self.act, y=inter)
        out = torch.empty((1, t, self.h), dtype=hidden.dtype, device=hidden.device)
        ogs.matmul_ogs(inter.view(t * self.k, self.i), w2, b2, routing, scatter_indx=ogs.ScatterIndx(dispatch, combine),
                       precision_config=pc2, gammas=gate_scal, y=out)
        return out.view(t, self.h)


class TransformersExperts:
    """transformers' GptOssExperts on the dequantised bf16 weights, with its router's math (top-k of the
    logits, softmax over the k) on the given logits (the router's linear precedes the layer in every
    implementation). implementation: "grouped_mm" (what from_pretrained picks by default where
    torch's grouped_mm runs) or "eager" (the per-expert loop; its host syncs keep it out of CUDA graphs)."""
    weights = "bf16"

    def __init__(self, experts: int, top_k: int, hidden: int, intermediate: int, implementation: str):
        import transformers
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

        self.transformers, self.cls = transformers, GptOssExperts
        self.config = GptOssConfig(num_local_experts=experts, num_experts_per_tok=top_k, hidden_size=hidden,
                                   intermediate_size=intermediate, experts_implementation=implementation)
        self.config._experts_implementation = implementation
        self.k, self.implementation = top_k, implementation
        self.name = "transformers" if implementation == "grouped_mm" else f"transformers-{implementation}"
        self.capturable = implementation != "eager"
        self.about = f"transformers GptOssExperts, experts_implementation={implementation}, bf16 weights"

    def versions(self) -> dict:
        return {"transformers": self.transformers.__version__}

    def prepare(self, layers: list) -> None:
        self.layers = []
        for w in layers:
            with torch.device("meta"):
                m = self.cls(self.config)
            m.gate_up_proj = torch.nn.Parameter(w.gate_up, requires_grad=False)
            m.gate_up_proj_bias = torch.nn.Parameter(w.gate_up_bias, requires_grad=False)
            m.down_proj = torch.nn.Parameter(w.down, requires_grad=False)
            m.down_proj_bias = torch.nn.Parameter(w.down_bias, requires_grad=False)
            self.layers.append(m)

    def forward(self, l, hidden, logits):
        values, indices = torch.topk(logits, self.k, dim=-1)  # GptOssTopKRouter after its linear
        scores = torch.softmax(values, dim=1, dtype=values.dtype)
        return self.layers[l](hidden, indices, scores)


def grouped_mm_function():
    """torch.nn.functional.grouped_mm (torch >= 2.10) or torch._grouped_mm; None where neither exists."""
    return getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


class TorchGroupedMm:
    """Plain torch on the dequantised bf16 weights: the same routing, rows sorted by expert, one grouped
    bf16 matmul per GEMM (torch's grouped_mm over per-expert offsets), biases, the clamped SwiGLU in fp32,
    and the weighted sum in fp32. No host syncs, so it is captured in a CUDA graph."""
    name = "torch-grouped-mm"
    weights = "bf16"
    capturable = True

    def __init__(self, experts: int, top_k: int):
        self.mm = grouped_mm_function()
        if self.mm is None:
            raise ImportError(f"torch {torch.__version__} has neither nn.functional.grouped_mm nor _grouped_mm")
        self.e, self.k = experts, top_k
        self.about = f"torch {self.mm.__module__}.{self.mm.__name__} bf16 on dequantised weights"

    def versions(self) -> dict:
        return {"torch": torch.__version__}

    def prepare(self, layers: list) -> None:
        self.layers = layers

    def forward(self, l, hidden, logits):
        w = self.layers[l]
        values, experts = torch.topk(logits, self.k, dim=1)
        weights = torch.softmax(values.float(), dim=1).flatten()
        ids = experts.flatten()
        order = torch.argsort(ids, stable=True)
        ids_sorted, tokens = ids[order], order // self.k
        counts = torch.zeros(self.e, dtype=torch.int32, device=ids.device)
        counts.scatter_add_(0, ids, torch.ones_like(ids, dtype=torch.int32))
        offsets = torch.cumsum(counts, 0, dtype=torch.int32)
        h = self.mm(hidden[tokens], w.gate_up, offs=offsets).float() + w.gate_up_bias[ids_sorted].float()
        a = peer_layers.swiglu(h).to(torch.bfloat16)
        y = self.mm(a, w.down, offs=offsets).float() + w.down_bias[ids_sorted].float()
        out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
        out.index_add_(0, tokens, y * weights[order].unsqueeze(1))
        return out.to(torch.bfloat16)
