"""A scripted engine and scorer over a synthetic tree, for algorithm tests and references.

The tree is given by a function `children(path) -> [(step text, probability), ...]` where a
path is the tuple of step texts from the root. Every step is `tokens_per_step` tokens long
(default 1), so budgets are easy to reason about. A path is finished when `children` returns
no children for it or its last step text ends with `end` (default "."). Sampling draws
children by their probabilities from a seeded generator; temperature 0 takes the most likely
child (first on ties).

`expand` honours `stop` and `max_tokens` as a real engine does. Every scripted step ends at
a step delimiter, so with any stop strings a continuation is one scripted step; with none
(stop=None or ()) it runs on, step after step, until the path finishes or max_tokens is
reached (one Node whose step text is the steps' texts joined). No continuation has more than
max_tokens tokens: a scripted step is indivisible in text, so the one that crosses the cap
keeps its text and is charged only the tokens below it (stop reason "max_tokens" unless it
finished the path).

    tree = {(): [("a", .6), ("b", .4)], ("a",): [("x.", 1.0)], ("b",): [("y.", 1.0)]}
    engine = ScriptedEngine(lambda path: tree.get(path, []))
    scorer = ScriptedScorer(lambda path: 1.0 if path[-1] == "y." else 0.0)

Only `expand` and `extend`-like forcing are model-free here; the engine charges the meter
exactly like a real one: `tokens_per_step` generated tokens per child, prompt prefill once
per root, one forward pass per expand call and token position.
"""

from __future__ import annotations

import math
import random
import weakref
from collections.abc import Callable, Sequence

from search.engines.base import DEFAULT_STOP, budget_child
from search.session import Bindable
from search.types import Node, Problem, Step

Children = Callable[[tuple[str, ...]], Sequence[tuple[str, float]]]


# a step that ran on past delimiters (stop=None) -> the scripted steps it joined; weak, so an
# entry goes with the last step equal to its key
JOINED: weakref.WeakKeyDictionary[Step, tuple[str, ...]] = weakref.WeakKeyDictionary()


def path_of(node: Node) -> tuple[str, ...]:
    """The scripted steps from the root to `node` (a step that joined several counts as
    those it joined; an empty step the budget ended before its first token adds none, so a
    continuation of it continues its parent's path)."""
    return tuple(t for s in node.steps() if s.token_ids or s.stop_reason != "budget"
                 for t in JOINED.get(s, (s.text,)))


class ScriptedEngine(Bindable):
    """The Engine protocol over a synthetic tree (no model, exact probabilities)."""

    concurrent = True  # safe to share between searches in threads

    def __init__(self, children: Children, *, tokens_per_step: int = 1, end: str = ".",
                 prompt_tokens: int = 4, flops_per_token: float = 1.0) -> None:
        self.children = children
        self.tokens_per_step = tokens_per_step
        self.end = end
        self.prompt_tokens = prompt_tokens
        self.flops_per_token = flops_per_token
        self.expand_calls = 0
        self._vocab: dict[str, int] = {}
        self._prefilled: set[int] = set()  # roots whose prompt was charged once

    def _ids(self, text: str) -> tuple[int, ...]:
        tid = self._vocab.setdefault(text, len(self._vocab) + 10)
        return (tid,) * self.tokens_per_step

    def root(self, problem: Problem) -> Node:
        return self.session.kv.add(Node(problem=problem, prompt_ids=range(self.prompt_tokens)))

    def options(self, node: Node | tuple[str, ...]) -> list[tuple[str, float]]:
        """The children of `node` (or of a scripted path) with probabilities normalised to
        sum to one."""
        path = node if isinstance(node, tuple) else path_of(node)
        opts = [(t, float(p)) for t, p in self.children(path) if p > 0]
        total = math.fsum(p for _, p in opts)
        return [(t, p / total) for t, p in opts]

    def _prefill(self, nodes: Sequence[Node]) -> int:
        """Charge each new root's prompt once, as a real engine prefills it once."""
        fresh = {node.root.id for node in nodes} - self._prefilled
        self._prefilled.update(fresh)
        tokens = self.prompt_tokens * len(fresh)
        if tokens:
            self.meter.charge_model(prefill=tokens, flops=self.flops_per_token * tokens)
        return tokens

    def _step(self, text: str, prob: float, finished: bool) -> Step:
        k = self.tokens_per_step
        return Step(text, self._ids(text), (math.log(prob) / k,) * k,
                    "eos" if finished else "stop")

    def _child(self, parent: Node, text: str, prob: float) -> Node:
        return Node(parent=parent, step=self._step(text, prob, self._ends(path_of(parent)
                                                                          + (text,))))

    def _ends(self, path: tuple[str, ...]) -> bool:
        return path[-1].endswith(self.end) or not self.children(path)

    def _draw(self, node: Node, stop: Sequence[str] | None, max_tokens: int,
              temperature: float, rng: random.Random) -> Step:
        """One continuation of `node` (the module doc: one scripted step where there are
        stop strings, else steps until the path finishes or max_tokens)."""
        path, texts = path_of(node), []
        ids: list[int] = []
        logprobs: list[float] = []
        while True:
            opts = self.options(path)
            if not opts:
                raise ValueError(f"scripted tree has no children at {path}")
            if temperature == 0:
                text, prob = max(opts, key=lambda o: o[1])
            else:
                text, prob = rng.choices(opts, weights=[p for _, p in opts])[0]
            path, step = path + (text,), self._step(text, prob, False)
            texts.append(text)
            ids += step.token_ids
            logprobs += step.logprobs
            finished = self._ends(path)
            if finished or stop or len(ids) >= max_tokens:
                break
        cap = max(1, max_tokens)
        reason = "eos" if finished else "stop" if stop and len(ids) <= cap else "max_tokens"
        out = Step("".join(texts), tuple(ids[:cap]), tuple(logprobs[:cap]), reason)
        if len(texts) > 1:
            JOINED[out] = tuple(texts)
        return out

    def expand(self, nodes: Sequence[Node], n: int = 1, *, stop: Sequence[str] | None = DEFAULT_STOP,
               max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
               seed: int = 0) -> list[list[Node]]:
        del top_p
        if n < 1:
            raise ValueError("n must be positive")
        for node in nodes:
            if node.finished:
                raise ValueError(f"cannot expand a finished node: {node!r}")
        if not self._room(nodes, 1):  # no token fits the budget: empty steps, nothing drawn
            return [[budget_child(node) for _ in range(n)] for node in nodes]
        rng = random.Random(seed)
        drawn = [[self._draw(node, stop, max_tokens, temperature, rng) for _ in range(n)]
                 for node in nodes]
        want = sum(len(step.token_ids) for row in drawn for step in row)
        processed = self._room(nodes, want)
        if not processed:  # nothing fits the budget: empty steps, no model work
            return [[budget_child(node) for _ in range(n)] for node in nodes]
        out = [[Node(parent=node, step=step) for step in row] for node, row in zip(nodes, drawn)]
        if processed < want:  # the budget ends in this call
            out = self._cut(out, processed)
        self.meter.charge_model(generated=processed, flops=self.flops_per_token * processed,
                                passes=max(len(step.token_ids) for row in drawn for step in row))
        self.part.expand_calls += 1  # the engine's count, over every search
        return out

    def _room(self, nodes: Sequence[Node], want: int) -> int:
        """How many of `want` tokens this call may generate under the budget's hard limits
        (search.budget.Meter: tokens left, FLOPs left after the prompts' prefill, seconds);
        the prompts are prefilled (and charged) only where their FLOPs fit."""
        meter, fpt = self.meter, self.flops_per_token
        if meter.refuse_forward(fpt * self.prompt_tokens * len({n.root.id for n in nodes}
                                                         - self._prefilled)):
            return 0
        self._prefill(nodes)
        room = meter.token_room(want)
        limit = meter.budget.flops
        if limit is not None and meter.flops + fpt * room > limit:
            meter.refuse("flops")
            room = max(0, math.floor((limit - meter.flops) / fpt))
        return room

    @staticmethod
    def _cut(out: list[list[Node]], room: int) -> list[list[Node]]:
        """The children with `room` tokens in all, the first rows first: a row cut short
        ends its step there (stop reason "budget"; an empty step if it got no token)."""
        cut = []
        for kids in out:
            row = []
            for kid in kids:
                step = kid.step
                assert kid.parent is not None and step is not None
                keep = min(room, len(step.token_ids))
                room -= keep
                if keep == len(step.token_ids):
                    row.append(kid)
                    continue
                kid.detach()
                if not keep:
                    row.append(budget_child(kid.parent))
                    continue
                short = Step(step.text, step.token_ids[:keep], step.logprobs[:keep], "budget")
                if step in JOINED:
                    JOINED[short] = JOINED[step]
                row.append(Node(parent=kid.parent, step=short))
            cut.append(row)
        return cut

    def extend(self, nodes: Sequence[Node], continuations: Sequence[str | Sequence[int]], *,
               generated: bool = False) -> list[Node]:
        want = len(nodes) * self.tokens_per_step
        room = self._room(nodes, want) if generated else want
        if not room:
            return [budget_child(node) for node in nodes]
        self._prefill(nodes)
        out = []
        names = {v: k for k, v in self._vocab.items()}
        for node, cont in zip(nodes, continuations):
            # token ids (as topk_next gives them) name a step by its first id
            text = cont if isinstance(cont, str) else names.get(next(iter(cont), -1), "")
            prob = dict(self.options(node)).get(text, 0.0)
            if prob == 0:
                raise ValueError(f"{text!r} is not a child of {path_of(node)}")
            out.append(self._child(node, text, prob))
        if room < want:
            out = [row[0] for row in self._cut([[c] for c in out], room)]
        count = room
        self.meter.charge_model(prefill=0 if generated else count,
                                generated=count if generated else 0,
                                flops=self.flops_per_token * count)
        return out

    def topk_next(self, nodes: Sequence[Node], k: int) -> list[list[tuple[int, float]]]:
        if self.meter.refuse_forward(self.flops_per_token * self.prompt_tokens * len(
                {n.root.id for n in nodes} - self._prefilled)):
            return [[] for _ in nodes]  # the prompt's prefill does not fit the budget
        self._prefill(nodes)
        return [[(self._ids(t)[0], math.log(p)) for t, p in
                 sorted(self.options(node), key=lambda o: -o[1])[:k]] for node in nodes]

    def next_logprobs(self, nodes: Sequence[Node], token_ids: Sequence[int]) -> list[list[float]]:
        out = []
        for node in nodes:
            by_id = {self._ids(t)[0]: math.log(p) for t, p in self.options(node)}
            out.append([by_id.get(t, -math.inf) for t in token_ids])
        return out

    def decode(self, token_ids: Sequence[int]) -> str:
        names = {v: k for k, v in self._vocab.items()}
        return "".join(names.get(t, "?") for t in token_ids)


class ScriptedScorer(Bindable):
    """Scores a node by a function of its path of step texts; charges one call per node."""

    def __init__(self, value: Callable[[tuple[str, ...]], float]) -> None:
        self.value = value

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        del problem
        self.meter.charge_scorer(calls=len(nodes))
        return [float(self.value(path_of(node))) for node in nodes]
