"""Host syncs of the decode loop without drafts (search/engines/hf/decode.py: Decoder): the host
reads the device once per token step, whatever the rows, the tokens or the stop strings.

Counted on every device by wrapping the Tensor methods that read a device value on the host
(.item, .tolist, .cpu, .numpy, bool/int/float/index of a tensor, .to a CPU device), and on
CUDA also by torch's own sync debug mode (every synchronising CUDA call warns), which sees
the syncs those wrappers cannot (a pageable host-to-device copy, a nonzero, ...).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator

import pytest
import torch

from search.engines.hf import HFEngine
from search.runtime import lean
from search.types import Problem

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


@contextlib.contextmanager
def counting_reads(monkeypatch: pytest.MonkeyPatch, seen: list[str]) -> Iterator[None]:
    """Append the name of every host read of a tensor made inside the block to `seen`."""
    def wrap(name, real):
        def read(self, *args, **kwargs):
            seen.append(name)
            return real(self, *args, **kwargs)
        return read

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu":
            seen.append("to")
        return real_to(self, *args, **kwargs)

    real_to = torch.Tensor.to
    with monkeypatch.context() as m:
        for name in READS:
            m.setattr(torch.Tensor, name, wrap(name, getattr(torch.Tensor, name)))
        m.setattr(torch.Tensor, "to", to)
        yield


@contextlib.contextmanager
def cuda_syncs(device: str, seen: list[str]) -> Iterator[None]:
    """On CUDA: append one entry per synchronising CUDA call in the block (sync debug mode)."""
    if device != "cuda":
        yield
        return
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
    seen += [str(w.message)[:80] for w in caught if "synchroniz" in str(w.message)]


def syncs(eng: HFEngine, device: str, monkeypatch, n: int, tokens: int, stop) -> tuple[int, int]:
    """(host reads, CUDA syncs) of one expand of n rows x `tokens` tokens each (EOS off, stop
    strings that never match), the prompt prefilled before counting."""
    root = eng.root(Problem(prompt="12+34=56 and 7*8="))
    eng.kv.ensure([root], eng.session)
    reads: list[str] = []
    cuda: list[str] = []
    with counting_reads(monkeypatch, reads), cuda_syncs(device, cuda):
        kids = eng.expand([root], n, stop=stop, max_tokens=tokens, temperature=0.8, top_p=0.9,
                          seed=1)[0]
    assert [len(k.step.token_ids) if k.step else 0 for k in kids] == [tokens] * n  # to the end
    return len(reads), len(cuda)


@pytest.mark.parametrize("stop", [None, ("zz", "QQQ")], ids=["no-stop", "stop-strings"])
def test_one_host_read_per_token_step(tiny_model, device, monkeypatch, stop):
    """One expand of n rows x T tokens takes T token steps (the first token drawn from the
    stored logits, then T - 1 forwards): the host reads the device exactly T times, the same
    for 1 row and 8, and CUDA syncs at most once a step."""
    model, tok = tiny_model
    eng = HFEngine(copy.deepcopy(model), tok, chat=False, device=device)
    assert isinstance(eng.forward, lean.LeanLlama)  # the engine's own forward, no fallback
    eng.eos_ids = frozenset()
    for n in (1, 8):
        for tokens in (4, 12):
            reads, cuda = syncs(eng, device, monkeypatch, n, tokens, stop)
            assert reads == tokens, (n, tokens)
            assert cuda <= tokens, (n, tokens)
