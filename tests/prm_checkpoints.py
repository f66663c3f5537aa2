"""Small random checkpoints of every hub PRM format, saved to folders as the hub holds them
(no download): the same model classes and config layout as the published checkpoints, and
tokenizers that behave as theirs do where the formats depend on it (a sentencepiece-like one
that adds BOS and spells "+ -" as two tokens for Mistral, ChatML with "<extra_0>" for Qwen,
Llama 3's header template for RLHFlow). Each builder takes the folder and returns it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

REMOTE = Path(__file__).resolve().parent / "prm_remote"  # our copy of Qwen's PRM code layout
ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +-*/=.,:?!'()\n"
            "\\{}_ки")
SIZES: dict[str, Any] = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=1024)
QWEN_CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3_CHAT = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
               "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
               "{% endif %}")


def char_tok(*, specials: tuple[str, ...] = (), chat: str | None = None,
             bos: str | None = "<bos>") -> Any:
    """One token per character, plus the given special tokens; adds nothing on encode."""
    from training.wordtok import char_tokenizer

    tok = char_tokenizer(ALPHABET)
    if specials:
        tok.add_special_tokens({"additional_special_tokens": list(specials)})
    if bos != "<bos>":
        tok.bos_token = bos
    tok.chat_template = chat
    return tok


def byte_tok(*, specials: tuple[str, ...] = (), chat: str | None = None,
             bos: str | None = None) -> Any:
    """Byte-level as Qwen's is (transformers rebuilds a qwen2 checkpoint's tokenizer as a
    byte-level BPE): one token per byte, no merges, plus <|endoftext|> and the specials;
    adds nothing on encode."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<|endoftext|>"] + sorted(ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()  # type: ignore[assignment]
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": list(specials)})
    if bos is not None:
        tok.add_special_tokens({"bos_token": bos})
    tok.chat_template = chat
    return tok


def mistral_tok() -> Any:
    """Sentencepiece-like: spaces become "▁" starting a piece, pieces are characters except
    the merges "▁+", "▁-", "▁ки", and encode puts <s> first (as Mistral's does)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    merged = ["▁+", "▁-", "▁к", "▁ки"]
    vocab = {t: i for i, t in enumerate(specials + sorted(set(ALPHABET + "▁")) + merged)}
    merges = [("▁", "+"), ("▁", "-"), ("▁", "к"), ("▁к", "и")]
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    core.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")  # type: ignore[assignment]
    core.post_processor = processors.TemplateProcessing(  # type: ignore[assignment]
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def _save(model: Any, tok: Any, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def math_shepherd(folder: Path, seed: int = 0) -> Path:
    """Math-Shepherd's layout: a MistralForCausalLM, a tokenizer adding BOS."""
    from transformers import MistralConfig, MistralForCausalLM

    tok = mistral_tok()
    torch.manual_seed(seed)
    cfg = MistralConfig(vocab_size=len(tok), sliding_window=None, tie_word_embeddings=False,
                        **SIZES)
    return _save(MistralForCausalLM(cfg), tok, folder)


def rlhflow(folder: Path, seed: int = 1) -> Path:
    """RLHFlow's layout: a LlamaForCausalLM with Llama 3.1's chat (header tokens, BOS)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tok(specials=("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                             "<|eot_id|>"), chat=LLAMA3_CHAT, bos="<|begin_of_text|>")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), tie_word_embeddings=False, **SIZES)
    return _save(LlamaForCausalLM(cfg), tok, folder)


def qwen_prm(folder: Path, seed: int = 2, *, num_labels: int = 2) -> Path:
    """Qwen2.5-Math-PRM's layout: config.json naming Qwen2ForProcessRewardModel through
    auto_map, the class's code in the folder, ChatML with "<extra_0>"."""
    from transformers import AutoConfig, AutoModel

    tok = byte_tok(specials=("<|im_start|>", "<|im_end|>", "<extra_0>"), chat=QWEN_CHAT)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("configuration_qwen2_rm.py", "modeling_qwen2_rm.py"):
        shutil.copy(REMOTE / name, folder / name)
    config = dict(model_type="qwen2", architectures=["Qwen2ForProcessRewardModel"],
                  auto_map={"AutoConfig": "configuration_qwen2_rm.Qwen2RMConfig",
                            "AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"},
                  vocab_size=len(tok), tie_word_embeddings=False,
                  id2label={str(i): f"LABEL_{i}" for i in range(num_labels)}, **SIZES)
    (folder / "config.json").write_text(json.dumps(config))
    cfg = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    torch.manual_seed(seed)
    model = AutoModel.from_config(cfg, trust_remote_code=True)
    return _save(model, tok, folder)


def trl(folder: Path, seed: int = 3, *, num_labels: int = 2) -> Path:
    """What TRL's PRMTrainer saves: a Qwen2ForTokenClassification of two labels."""
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    tok = byte_tok(bos="<|bos|>")
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), **SIZES)
    cfg.num_labels = num_labels
    return _save(Qwen2ForTokenClassification(cfg), tok, folder)


def value_head(folder: Path, seed: int = 4, *, shape: tuple[int, ...] = (1, 32)) -> Path:
    """Skywork's layout: a Qwen2ForCausalLM's weights plus v_head.summary.{weight,bias} in the
    same safetensors file (PRM_MODEL.state_dict), a tokenizer with a bos_token."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = byte_tok(bos="<|bos|>")
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), tie_word_embeddings=False, **SIZES)
    _save(Qwen2ForCausalLM(cfg), tok, folder)
    weights = load_file(folder / "model.safetensors")
    weights["v_head.summary.weight"] = 0.1 * torch.randn(shape)
    weights["v_head.summary.bias"] = torch.randn(shape[:1])
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


BUILDERS = {"math-shepherd": math_shepherd, "qwen-prm": qwen_prm, "rlhflow": rlhflow,
            "trl": trl, "value-head": value_head}
