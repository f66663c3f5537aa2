"""The engine protocol: the only thing in the toolkit that builds prompts and calls a model.

Every method is batched over nodes. `expand` returns, for each input node, its new child
nodes (already attached to the tree), each holding one Step. Searches share an engine
through its views (`engine.bind(session)`, search.session.Bindable): a view charges its
session's meter and frees its session's trees only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from search.budget import Meter
from search.session import Session
from search.types import Node, Problem, Step

DEFAULT_STOP: tuple[str, ...] = ("\n\n",)


def check_sampling(n: int, max_tokens: int, temperature: float, top_p: float) -> None:
    """The expand arguments every engine accepts; a clear ValueError otherwise."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def check_expand(nodes: Sequence[Node], n: int, max_tokens: int, temperature: float,
                 top_p: float) -> list[Node]:
    """An `expand` call's nodes as a list, once its arguments pass (check_sampling) and no
    node is finished; a clear ValueError otherwise."""
    check_sampling(n, max_tokens, temperature, top_p)
    nodes = list(nodes)
    for node in nodes:
        if node.finished:
            raise ValueError(f"cannot expand a finished node: {node!r}")
    return nodes


def budget_child(parent: Node) -> Node:
    """An empty step (stop reason "budget"): a row the budget left no token for."""
    return Node(parent=parent, step=Step("", (), (), "budget"))


def server_cap(meter: Meter, rows: int, max_tokens: int) -> int:
    """Each row's token cap in an engine that cannot stop a batch mid-way (a server's):
    the tokens left split evenly among the rows, so the batch stays within the budget;
    0 when not one token each fits or the seconds are up (recorded as the cut: the rows
    then get empty steps, budget_child)."""
    if meter.refuse_overtime():
        return 0
    left = meter.tokens_left()
    cap = max_tokens if left is None else min(max_tokens, left // rows)
    if cap < 1:
        meter.refuse("tokens")
    return max(cap, 0)


def subseed(seed: int, *index: int) -> int:
    """A 31-bit request seed derived from the call's seed and a row/sample index (the engines
    whose server or library draws the tokens: openai, vllm)."""
    text = "/".join(map(str, (seed, *index))).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little") >> 1


@runtime_checkable
class Engine(Protocol):
    @property
    def session(self) -> Session:
        """The search this view works for (an unbound engine: its own default one)."""
        ...

    @property
    def meter(self) -> Meter:
        """What the calls charge: the session's meter."""
        ...

    def bind(self, session: Session) -> Engine:
        """This engine as `session`'s search uses it (search.session.Bindable)."""
        ...

    def root(self, problem: Problem) -> Node:
        """The search tree's root for `problem`: its prompt, tokenised once."""
        ...

    def expand(self, nodes: Sequence[Node], n: int = 1, *, stop: Sequence[str] | None = DEFAULT_STOP,
               max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
               seed: int = 0) -> list[list[Node]]:
        """For every node, n continuations of one reasoning step, decoded together.

        A step ends at the first stop string (None or () = no delimiter), EOS, max_tokens,
        or the model's context length. temperature 0 is greedy.
        """
        ...

    def extend(self, nodes: Sequence[Node], continuations: Sequence[str | Sequence[int]], *,
               generated: bool = False) -> list[Node]:
        """Force a given continuation (text or token ids) after each node: one child each,
        with the model's log-probabilities of those tokens (teacher forcing).

        generated=True: the tokens were chosen by the search from the model's own next-token
        distribution (token-level search), so they count as generated (and against
        Budget.tokens); otherwise they are charged as prefill."""
        ...

    def topk_next(self, nodes: Sequence[Node], k: int) -> list[list[tuple[int, float]]]:
        """The k most likely next tokens after each node, as (token id, logprob)."""
        ...

    def next_logprobs(self, nodes: Sequence[Node], token_ids: Sequence[int]) -> list[list[float]]:
        """For each node, the log-probabilities of the given candidate next tokens."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        ...
