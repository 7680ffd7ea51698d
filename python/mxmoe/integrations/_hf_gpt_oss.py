"""A transformers gpt-oss model built without its experts' bf16 parameters, and its other tensors read
from a checkpoint directory: the pieces under mxmoe.integrations.transformers.load_gpt_oss_model.

The model is built on the meta device (nothing allocated), the experts' parameters are deleted, and only
then is storage made on the target device: no bf16 copy of the experts ever exists."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from .._mxmoe import Error

# The experts' parameters of transformers' GptOssExperts (bf16, [E, H, 2I] and [E, I, H] plus biases):
# mxmoe holds the experts instead, in the checkpoint's MXFP4 bytes.
EXPERT_PARAMETERS = ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")
# Checkpoint tensors of the experts (Hugging Face naming), read by mxmoe.load_gpt_oss, not by this module.
_EXPERT_TENSOR = re.compile(r"^model\.layers\.\d+\.mlp\.experts\.(gate_up_proj|down_proj)_(blocks|scales|bias)$")


def is_expert_tensor(name: str) -> bool:
    return _EXPERT_TENSOR.match(name) is not None


def drop_expert_parameters(model: torch.nn.Module) -> int:
    """Deletes the bf16 expert parameters of every GptOssExperts module (freeing them where they were
    materialised); returns the number of experts modules."""
    count = 0
    for module in model.modules():
        if type(module).__name__ == "GptOssExperts":
            for name in EXPERT_PARAMETERS:
                if name in module._parameters:
                    delattr(module, name)
            count += 1
    return count


def _checkpoint_files(path: Path) -> list[Path]:
    if not path.is_dir():
        raise Error(f"path: '{path}' is not a directory")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise Error(f"path: no *.safetensors files in '{path}'")
    return files


def build_model(path: Path, device: torch.device, attn_implementation: str | None) -> torch.nn.Module:
    """GptOssForCausalLM from path/config.json in bf16 on `device`, every tensor but the experts' read
    from the checkpoint, in eval mode."""
    from transformers import AutoConfig, GenerationConfig

    files = _checkpoint_files(path)
    config = AutoConfig.from_pretrained(path)
    if getattr(config, "model_type", None) != "gpt_oss":
        raise Error(f"path: '{path}/config.json' has model_type {getattr(config, 'model_type', None)!r}, "
                    "expected 'gpt_oss'")
    model = build_empty_model(config, device, attn_implementation)
    wanted = dict(model.state_dict(keep_vars=True))
    _load_tensors(files, wanted, device)
    model.eval()
    try:
        model.generation_config = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json: keep the one made from the model config
        pass
    return model


def build_empty_model(config, device: torch.device, attn_implementation: str | None = None) -> torch.nn.Module:
    """GptOssForCausalLM of `config` in bf16 on `device` without the experts' parameters; every other
    parameter allocated but not initialised (the rotary frequencies computed)."""
    from transformers import GptOssForCausalLM

    kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    with torch.device("meta"):
        model = GptOssForCausalLM._from_config(config, dtype=torch.bfloat16, **kwargs)
    drop_expert_parameters(model)
    model.to_empty(device=device)
    _rebuild_rotary(model, config, device)
    return model


def _rebuild_rotary(model: torch.nn.Module, config, device: torch.device) -> None:
    """The rotary embedding's inv_freq is a non-persistent buffer computed at construction: on the meta
    device it was never computed, and no checkpoint holds it. Built again on the CPU, as from_pretrained
    builds it, then moved. Any other non-persistent buffer would be left empty: refuse instead."""
    for name, module in model.named_modules():
        if not module._non_persistent_buffers_set:
            continue
        if type(module).__name__ != "GptOssRotaryEmbedding":
            raise Error(f"model: module '{name}' ({type(module).__name__}) has non-persistent buffers this "
                        "loader does not know how to compute")
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, type(module)(config).to(device))


def _load_tensors(files: list[Path], wanted: dict, device: torch.device) -> None:
    """Copies every checkpoint tensor named in `wanted` (the model's state dict without the experts) into
    its parameter or buffer. The experts' tensors are skipped (mxmoe reads them); a missing tensor, or a
    tensor that is neither the model's nor an expert's, raises mxmoe.Error naming it."""
    from safetensors import safe_open

    seen = set()
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                if is_expert_tensor(name):
                    continue
                target = wanted.get(name)
                if target is None:
                    raise Error(f"checkpoint: tensor '{name}' in '{file.name}' is not a gpt-oss parameter")
                value = f.get_tensor(name)
                if tuple(value.shape) != tuple(target.shape):
                    raise Error(f"checkpoint: tensor '{name}' has shape {tuple(value.shape)}, the model expects "
                                f"{tuple(target.shape)}")
                with torch.no_grad():
                    target.copy_(value.to(device=device, dtype=target.dtype))
                seen.add(name)
    missing = sorted(set(wanted) - seen)
    if missing == ["lm_head.weight"] and wanted["lm_head.weight"] is wanted.get("model.embed_tokens.weight"):
        missing = []  # tied to the embedding, which was read
    if missing:
        raise Error(f"checkpoint: missing tensor '{missing[0]}'" + (f" (and {len(missing) - 1} more)"
                                                                    if len(missing) > 1 else ""))
