"""The embedded reasoners' tokenizers (training.train's "char" and "word"): one token per
character (char_tokenizer) or per word and digit (word_tokenizer, both committed reasoners'),
both with the specials SPECIALS.

The word-level tokenizer for the embedded reasoners, lossless on any text of its alphabet.

Text is cut into pieces by PIECE: a word with its leading space (" cookies"), a digit with
its leading space (" 5", then "8" for " 58": numbers stay digit by digit, so arithmetic is
learned on digits), an operator or punctuation mark with its leading space (" +", "."), four
spaces of indentation, or a single whitespace character. Every piece seen in a corpus of
the task's own generated text is one token; any other piece falls back to its characters,
which are all in the vocabulary too, so decode(encode(text)) == text for every text over the
alphabet and nothing is ever <unk>. A story of ~400 characters is ~100 tokens: four times
less to attend over and to train on than with one token per character.

The tokenizer is a `tokenizers` BPE trained on the corpus until no pair is left to merge:
merges never cross pieces, so every piece of the corpus ends as one token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def char_tokenizer(alphabet: Iterable[str]) -> Any:
    """A PreTrainedTokenizerFast with one token per character of `alphabet`."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(alphabet))
    if any(len(c) != 1 for c in chars):
        raise ValueError("alphabet must be single characters")
    vocab = {t: i for i, t in enumerate(list(SPECIALS) + chars)}
    # BPE with no merges and no pre-tokenizer splits text into single characters
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()  # type: ignore[assignment]
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>")


PIECE = r"    | ?[A-Za-z_]+| ?[0-9]| ?[^A-Za-z0-9_\s]|\s"


def pieces(text: str) -> list[str]:
    """The pieces of `text` in order; "".join(pieces(text)) == text."""
    return re.findall(PIECE, text)


def word_tokenizer(alphabet: Iterable[str], corpus: Iterable[str]) -> Any:
    """A PreTrainedTokenizerFast: one token per piece of `corpus` and per character of
    `alphabet` (the fallback), plus the specials <pad> <bos> <eos> <unk>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(alphabet))
    if any(len(c) != 1 for c in chars):
        raise ValueError("alphabet must be single characters")
    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE), behavior="isolated")  # type: ignore[assignment]
    core.decoder = decoders.Fuse()  # type: ignore[assignment]
    # merges never cross pieces; with room to spare, training merges until every piece of
    # the corpus is one token (the vocabulary stops growing when no pair is left)
    trainer = trainers.BpeTrainer(vocab_size=1_000_000, min_frequency=1, show_progress=False,
                                  special_tokens=list(SPECIALS), initial_alphabet=chars)
    allowed = set(chars)
    core.train_from_iterator((t for t in corpus if set(t) <= allowed), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>")
