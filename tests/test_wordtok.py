"""The word tokenizer of the embedded reasoners: lossless, one token per known piece."""

from __future__ import annotations

import random

import pytest

from problems import arith, codegen
from training.wordtok import pieces, word_tokenizer

CODE_ALPHABET = "".join(chr(c) for c in range(32, 127)) + "\n"


@pytest.fixture(scope="module")
def arith_tok():
    corpus = [t for p in arith.generate(200, seed=5, difficulty=4)
              for t in (p.prompt, p.metadata["solution"])]
    return word_tokenizer(arith.ALPHABET, corpus), corpus


def test_pieces_cover_the_text_in_order():
    text = "Zoe has 10 + 58 = 68 cookies.\n\nThe answer is 17."
    assert pieces(text) == ["Zoe", " has", " 1", "0", " +", " 5", "8", " =", " 6", "8",
                            " cookies", ".", "\n", "\n", "The", " answer", " is", " 1", "7", "."]
    code = "    xs = [x for x in xs]\n"
    assert pieces(code) == ["    ", "xs", " =", " [", "x", " for", " x", " in", " xs", "]", "\n"]
    rng = random.Random(0)
    for _ in range(200):
        s = "".join(rng.choice(CODE_ALPHABET) for _ in range(rng.randint(0, 40)))
        assert "".join(pieces(s)) == s


def test_every_corpus_piece_is_one_token(arith_tok):
    tok, corpus = arith_tok
    for text in corpus[:100]:
        ids = tok(text)["input_ids"]
        assert tok.convert_ids_to_tokens(ids) == pieces(text)


def test_any_text_over_the_alphabet_round_trips_without_unknowns(arith_tok):
    tok, _ = arith_tok
    rng = random.Random(1)
    letters = arith.ALPHABET
    for _ in range(300):
        s = "".join(rng.choice(letters) for _ in range(rng.randint(1, 60)))
        ids = tok(s)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == s
    # an unseen word falls back to smaller known pieces (its characters at worst)
    ids = tok(" Zebrafish")["input_ids"]
    assert len(ids) > 1 and tok.decode(ids) == " Zebrafish"


def test_code_programs_round_trip_and_compress():
    corpus = [t for p in codegen.generate(100, seed=9, difficulty=3)
              for t in (p.prompt, p.metadata["solution"])]
    tok = word_tokenizer(CODE_ALPHABET, corpus)
    chars = tokens = 0
    for p in codegen.generate(30, seed=10, difficulty=3):
        ids = tok(p.metadata["solution"])["input_ids"]
        assert tok.decode(ids) == p.metadata["solution"]
        chars, tokens = chars + len(p.metadata["solution"]), tokens + len(ids)
    assert chars / tokens > 1.8  # indentation, keywords and names are single tokens


def test_same_corpus_same_tokenizer():
    corpus = [p.prompt for p in arith.generate(50, seed=2)]
    a, b = word_tokenizer(arith.ALPHABET, corpus), word_tokenizer(arith.ALPHABET, corpus)
    assert a.get_vocab() == b.get_vocab()
    text = corpus[0]
    assert a(text)["input_ids"] == b(text)["input_ids"]
