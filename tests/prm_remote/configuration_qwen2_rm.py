"""Test copy of the structure of Qwen2.5-Math-PRM's configuration_qwen2_rm.py (written here,
not copied): Qwen2's configuration under its own class name, as the checkpoint's auto_map
names it (AutoConfig -> configuration_qwen2_rm.Qwen2RMConfig)."""

from transformers import Qwen2Config


class Qwen2RMConfig(Qwen2Config):
    model_type = "qwen2"
