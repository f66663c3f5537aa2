"""A job's forwards: the `Pass` it yields, and how a tick's Passes run together
(`run_passes`).

Engine calls are written as *jobs*: generators that yield a `Pass` (one forward over their own
rows and their own batch cache) and get its output back, so a decode loop reads as a plain
loop. An engine's scheduler (search.runtime.sched) runs them: inline (each Pass alone, in the
calling thread) or in its lanes, which merge the Passes of many jobs into one forward per
model.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from search.runtime.sampling import Draw, sample_many

T = TypeVar("T")
PASS_TOKENS = 4096  # most tokens one merged forward takes (bounds its activations)


@dataclass(eq=False)
class Pass:
    """One forward a job asks for: input_ids/position_ids [B, q] after its own batch cache,
    under its own attention mask; `keep` is logits_to_keep (None: the forward takes none).
    draw: also draw each row's next token from its last logits (the job then gets a
    `Sampled`); the draws of every Pass in a tick are made together (sampling.sample_many)."""

    forward: Any
    input_ids: Any
    position_ids: Any
    cache: Any
    mask: Any
    keep: int | None = 1
    hidden: bool = False
    draw: Draw | None = None

    @property
    def tokens(self) -> int:
        return int(self.input_ids.numel())

    def alone(self) -> Any:
        extra = {} if self.keep is None else {"logits_to_keep": self.keep}
        return self.forward(input_ids=self.input_ids, attention_mask=self.mask,
                            position_ids=self.position_ids, use_cache=True,
                            output_hidden_states=self.hidden,
                            **{cache_arg(type(self.forward)): self.cache}, **extra)


@functools.cache
def cache_arg(kind: type) -> str:
    """The keyword a forward of this class takes its cache by: "cache" where it has one
    (transformers renamed past_key_values, which its 5.2x releases still take, deprecated),
    else "past_key_values"."""
    fn = getattr(kind, "forward", None) or kind.__call__
    return "cache" if "cache" in inspect.signature(fn).parameters else "past_key_values"


@dataclass
class Sampled:
    """What a Pass with a `draw` returns: the forward's output and the drawn tokens [B, 1]
    with their model logprobs [B, 1], and the same as host lists ([[token]], [[logprob]] a
    row: the tick's draws read back at once)."""

    out: Any
    tokens: Any
    logprobs: Any
    emits: list[list[int]]
    lps: list[list[float]]


Job = Generator[Pass, Any, T]


def run_passes(passes: Sequence[Pass], *, limit: int = PASS_TOKENS,
               apart: Callable[[], AbstractContextManager[Any]] = nullcontext) -> list[Any]:
    """Each Pass's output (or the exception it raised), merged into one forward per model
    where the model can (a forward_many that `merges`: lean.LeanLlama on packed linears, bit
    for bit, or on a GPU), in
    chunks of at most `limit` tokens; then the draws of the Passes that ask for them, all at
    once. apart: the context each Pass that cannot merge runs in (the model's own forward:
    the scheduler's lanes run those one at a time, on the process's thread count, see
    search.runtime.sched)."""
    out = _forwards(passes, limit, apart)
    todo = [i for i, p in enumerate(passes)
            if p.draw is not None and not isinstance(out[i], BaseException)]
    if todo:
        try:
            drawn = sample_many([out[i].logits[:, -1] for i in todo],
                                [passes[i].draw for i in todo], read=True)  # type: ignore[misc]
        except Exception:  # find whose: draw one by one
            drawn = [_caught(lambda i=i: sample_many(
                [out[i].logits[:, -1]], [passes[i].draw], read=True)[0])  # type: ignore[list-item]
                for i in todo]
        for i, d in zip(todo, drawn):
            out[i] = d if isinstance(d, BaseException) else Sampled(out[i], *d)
    return out


def _forwards(passes: Sequence[Pass], limit: int,
              apart: Callable[[], AbstractContextManager[Any]]) -> list[Any]:
    """Each Pass's output (or its error): those that cannot merge alone, under `apart`, as
    they come; then the others, per model, in chunks of at most `limit` tokens."""
    out: list[Any] = [None] * len(passes)
    chunks: dict[int, list[list[int]]] = {}  # per model: its chunks (indices into passes)
    size: dict[int, int] = {}  # per model: the tokens of its last chunk
    for i, p in enumerate(passes):
        if not _mergeable(p):
            with apart():
                out[i] = _caught(p.alone)
            continue
        model, n = id(p.forward), p.tokens
        own = chunks.setdefault(model, [[]])
        if own[-1] and size[model] + n > limit:
            own.append([])
            size[model] = 0
        own[-1].append(i)
        size[model] = size.get(model, 0) + n
    for chunk in [c for own in chunks.values() for c in own]:
        for i, r in zip(chunk, _merged([passes[j] for j in chunk])):
            out[i] = r
    return out


def _mergeable(p: Pass) -> bool:
    """Whether the Pass can share a forward_many (a malformed one runs alone, and fails alone)."""
    try:
        return bool(getattr(p.forward, "merges", False) and p.forward.handles(p.cache, p.mask))
    except Exception:  # noqa: BLE001  # its own forward will say what is wrong
        return False


def _caught(fn: Callable[[], Any]) -> Any:
    """fn(), or the exception it raised: the job whose Pass it was gets it."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001
        return err


def _merged(passes: list[Pass]) -> list[Any]:
    """The Passes' outputs from one forward_many; where it fails, each Pass's (or its error)
    run alone after its cache is rewound, so that only the job whose Pass fails gets an error."""
    if len(passes) == 1:
        return [_caught(passes[0].alone)]
    lengths = [p.cache.length for p in passes]
    try:
        results = passes[0].forward.forward_many(passes)
        if len(results) != len(passes):
            raise RuntimeError(f"forward_many gave {len(results)} outputs for {len(passes)} "
                               "Passes")
        return results
    except Exception:  # find whose Pass it was: rewind every cache, run each alone
        return [_rewound(p, n) for p, n in zip(passes, lengths)]


def _rewound(p: Pass, length: int) -> Any:
    """The Pass run alone after its cache is rewound to `length` (what a failed merged
    forward may have written is forgotten); the error, where it cannot be."""
    err = _caught(lambda: p.cache.rewind(length))
    return err if isinstance(err, BaseException) else _caught(p.alone)


def flatten(xs: list[torch.Tensor]) -> torch.Tensor:
    """A merged forward's input: its Passes' [B_i, q_i] ids or positions -> [N], row-major
    by Pass (one cat where every q is the same, as in a decode tick: no op a Pass)."""
    if len({x.shape[1] for x in xs}) == 1:
        return (xs[0] if len(xs) == 1 else torch.cat(xs)).reshape(-1)
    return torch.cat([x.reshape(-1) for x in xs])


def per_pass(x: torch.Tensor, kept: list[int], spans: list[tuple[int, int, int]]
              ) -> list[torch.Tensor]:
    """A merged forward's output: x [sum B_i k_i, F] (each Pass's kept positions, row-major)
    -> per Pass [B_i, k_i, F] (one view and one split where every k is the same)."""
    if len(set(kept)) == 1:
        return list(x.view(-1, kept[0], x.shape[-1]).split([B for B, _, _ in spans]))
    return [c.view(B, k, -1) for c, k, (B, _, _) in
            zip(x.split([B * k for (B, _, _), k in zip(spans, kept)]), kept, spans)]


def call(fn: Any, *args: Any) -> Job[Any]:
    """A job that runs fn(*args) and asks for no forward."""
    return fn(*args)
    yield  # unreachable: makes this a generator  # noqa: B901
