"""Integrations of mxmoe with model libraries. Each submodule imports its library only when imported
itself, so `import mxmoe` never needs them.

    from mxmoe.integrations.transformers import load_gpt_oss_model   # Hugging Face transformers
"""
