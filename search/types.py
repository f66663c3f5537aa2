"""Core types: Problem, Step, Node, Budget, Usage, Outcome and Result.

Results, configs and steps are frozen dataclasses. A Node is the one mutable type: it is a
vertex of a live search tree (children get attached, scores get written); engines keep its
KV cache beside the tree, keyed weakly by the node.
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from search.marks import Scores

if TYPE_CHECKING:
    import networkx as nx

Message = Mapping[str, str]  # {"role": ..., "content": ...}


@dataclass(frozen=True)
class Problem:
    """A task for the search. `prompt` is the user text; `messages` (chat turns) override it.

    domain: "math" (answer graded by verifiers.math) or "code" (graded by unit tests).
    tests: public tests the search may use; hidden_tests: only for grading.
    """

    prompt: str = ""
    id: str = ""
    answer: str | None = None
    domain: str = "math"
    messages: tuple[Message, ...] = ()
    tests: tuple[str, ...] = ()
    hidden_tests: tuple[str, ...] = ()
    entry_point: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str):
            raise TypeError(f"Problem.prompt must be a string, got {type(self.prompt).__name__}")
        if not self.prompt.strip() and not any(m.get("content", "").strip() for m in self.messages):
            raise ValueError("empty problem: give a non-empty prompt or chat messages")
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tests", tuple(self.tests))
        object.__setattr__(self, "hidden_tests", tuple(self.hidden_tests))
        self._check_text()

    def _check_text(self) -> None:
        """Refuse strings a model cannot read: ones that do not encode as UTF-8 (lone
        surrogates, e.g. undecodable bytes let through by Python's surrogateescape)."""
        texts = [("prompt", self.prompt), ("id", self.id), ("answer", self.answer),
                 ("entry_point", self.entry_point)]
        texts += [(f"messages[{i}][{k!r}]", v) for i, m in enumerate(self.messages)
                  for k, v in m.items()]
        texts += [(f"{name}[{i}]", t) for name in ("tests", "hidden_tests")
                  for i, t in enumerate(getattr(self, name))]
        for name, text in texts:
            if not isinstance(text, str):
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ValueError(
                    f"Problem.{name} is not valid text: {text[err.start:err.end]!r} at "
                    f"position {err.start} is a lone surrogate, not a character (bytes that "
                    f"were not UTF-8?); give text that encodes as UTF-8") from None

    @classmethod
    def of(cls, problem: Problem | str) -> Problem:
        """Accept a Problem or a plain string (a math question)."""
        if isinstance(problem, Problem):
            return problem
        if isinstance(problem, str):
            return cls(prompt=problem, id="adhoc")
        raise TypeError(f"problem must be a Problem or a str, got {type(problem).__name__}")


@dataclass(frozen=True)
class Step:
    """One reasoning step produced by the engine.

    token_ids[i] was sampled with model log-probability logprobs[i] (temperature 1, before
    any top-p truncation), so sums of logprobs are the model's own path probabilities.
    stop_reason: "stop" (step delimiter), "eos", "max_tokens" (step cut at its token cap),
    "length" (the model's context is full; the path cannot continue), "budget" (the
    budget's limit ended the step early, possibly before its first token: an empty step).
    """

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: str

    @property
    def finished(self) -> bool:
        """The solution ends with this step (EOS or context full)."""
        return self.stop_reason in ("eos", "length")

    @property
    def logprob(self) -> float:
        return float(sum(self.logprobs))


_node_ids = itertools.count()


class Node:
    """A partial solution: the path of steps from the problem's root to here.

    The root holds the problem and its prompt token ids; every other node holds one Step.
    `scores` holds the values searches write on the node (search.marks.Scores: what every
    search shares, the scorer's reward, merged copies, ...; each algorithm's own values, A*'s
    g and f, MCTS's visits, ..., as a Mark defined in its module; scores.flat() as one
    mapping).
    Engines keep their KV caches beside the tree, keyed weakly by node.
    """

    __slots__ = ("id", "parent", "step", "problem", "prompt_ids", "depth", "children",
                 "cum_logprob", "n_tokens", "scores", "__weakref__")

    def __init__(self, *, parent: Node | None = None, step: Step | None = None,
                 problem: Problem | None = None, prompt_ids: Sequence[int] = ()) -> None:
        if (parent is None) == (step is not None) or (parent is None and problem is None):
            raise ValueError("a root needs a problem and no step; a child needs a parent and a step")
        self.id: int = next(_node_ids)
        self.parent = parent
        self.step = step
        self.children: list[Node] = []
        self.scores = Scores()
        if parent is None:
            assert problem is not None
            self.problem: Problem = problem
            self.prompt_ids: tuple[int, ...] = tuple(prompt_ids)
            self.depth = 0
            self.cum_logprob = 0.0
            self.n_tokens = len(self.prompt_ids)
        else:
            assert step is not None
            self.problem = parent.problem
            self.prompt_ids = parent.prompt_ids
            self.depth = parent.depth + 1
            self.cum_logprob = parent.cum_logprob + step.logprob
            self.n_tokens = parent.n_tokens + len(step.token_ids)
            parent.children.append(self)

    # -- paths -------------------------------------------------------------------------
    def path(self) -> list[Node]:
        """Nodes from the root to self, root first."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def steps(self) -> list[Step]:
        return [n.step for n in self.path() if n.step is not None]

    @property
    def root(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    @property
    def text(self) -> str:
        """The solution text so far (prompt excluded)."""
        return "".join(s.text for s in self.steps())

    def token_ids(self) -> list[int]:
        """Prompt ids followed by every step's ids: what the model has seen at this node."""
        ids = list(self.prompt_ids)
        for s in self.steps():
            ids.extend(s.token_ids)
        return ids

    @property
    def generated_tokens(self) -> int:
        return self.n_tokens - len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return self.step is not None and self.step.finished

    def rewards(self) -> list[float]:
        """The scorer's rewards of the steps along the path (root excluded, unscored
        skipped)."""
        return [n.scores.reward for n in self.path()[1:] if n.scores.reward is not None]

    def detach(self) -> None:
        """Remove this node (and its subtree) from its parent's children."""
        if self.parent is not None and self in self.parent.children:
            self.parent.children.remove(self)

    def walk(self) -> Iterator[Node]:
        """Every node of the subtree below self, self first (depth-first)."""
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def __repr__(self) -> str:
        tail = self.step.text[-30:] if self.step else self.problem.prompt[:30]
        return f"Node(id={self.id}, depth={self.depth}, finished={self.finished}, {tail!r})"


def tree_to_networkx(root: Node) -> nx.DiGraph:
    """The search tree as a networkx DiGraph: node attributes text/depth/scores/finished."""
    import networkx as nx

    graph = nx.DiGraph()
    for node in root.walk():
        graph.add_node(node.id, depth=node.depth, text=node.step.text if node.step else "",
                       n_tokens=node.n_tokens, cum_logprob=node.cum_logprob,
                       finished=node.finished,
                       **{f"score_{k}": v for k, v in node.scores.flat().items()})
        if node.parent is not None:
            graph.add_edge(node.parent.id, node.id)
    return graph


COUNTED = ("tokens", "scorer_calls")  # limits in whole units: ints only
LIMITS = ("tokens", "scorer_calls", "flops", "seconds")  # Budget's limits, in field order
DEFAULT_RESERVE = 0.1


@dataclass(frozen=True)
class Budget:
    """Compute limits; None means unlimited. tokens counts generated tokens.

    reserve: the share of every limit a search holds back (default 0.1). The search stops
    expanding at (1 - reserve) of any limit; if no path has finished by then, it finishes its
    best partial path greedily (temperature 0) from the reserve: up to reserve * tokens more
    tokens (each step capped at what is left of them), and for the other limits until the
    limit itself. Those tokens count in usage like all others. A search's last expansion
    batch may cross its stopping point, but never a limit: usage stays within every limit
    (search.budget: the engine and the scorer loop stop at the limit itself). reserve=0
    turns this off (the search then runs to the limits themselves).
    """

    tokens: int | None = None
    scorer_calls: int | None = None
    flops: float | None = None
    seconds: float | None = None
    reserve: float = DEFAULT_RESERVE

    def __post_init__(self) -> None:
        for name in LIMITS:
            value = getattr(self, name)
            if value is None:
                continue
            counted = name in COUNTED  # tokens and scorer calls come whole
            if isinstance(value, bool) or \
                    not isinstance(value, numbers.Integral if counted else numbers.Real):
                what = "an int" if counted else "a number"
                raise TypeError(f"Budget.{name} must be {what} or None, got {value!r}")
            if math.isnan(value) or value <= 0:
                raise ValueError(f"Budget.{name} must be positive, got {value!r}; "
                                 "use None for no limit")
            if counted:  # a plain int, whatever Integral it came as (numpy's, ...)
                object.__setattr__(self, name, operator.index(value))  # type: ignore[arg-type]
        r = self.reserve
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1:
            raise ValueError(f"Budget.reserve must be a share in [0, 1), got {r!r}")

    @property
    def unlimited(self) -> bool:
        return all(getattr(self, name) is None for name in LIMITS)

    def limits(self) -> dict[str, float]:
        """The limits that are set, by name."""
        return {name: getattr(self, name) for name in LIMITS if getattr(self, name) is not None}

    @property
    def reserve_tokens(self) -> int:
        """Tokens held back for finishing a partial path: floor(reserve * tokens)."""
        return math.floor(self.reserve * self.tokens) if self.tokens is not None else 0


@dataclass(frozen=True)
class Usage:
    """What a run spent. prefill_tokens counts tokens run through the model that it did not
    just sample (prompts, re-fed prefixes); generated_tokens counts sampled tokens."""

    generated_tokens: int = 0
    prefill_tokens: int = 0
    forward_passes: int = 0
    scorer_calls: int = 0
    scorer_tokens: int = 0
    flops: float = 0.0
    seconds: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __sub__(self, other: Usage) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Candidate:
    """A finished (or best unfinished) path considered for the final answer."""

    text: str
    answer: str | None
    score: float
    finished: bool
    node_id: int


@dataclass(frozen=True)
class Result:
    """What `search.solve` returns.

    status: "ok" (a finished solution was chosen), "budget_exhausted" (a limit of the
    budget cut the search's work short, in the engine or the scorer loop: answer is the best
    so far, None if nothing finished; or the budget stopped the search before any path
    finished, and finishing the best partial path from the reserve did not finish one
    either: answer is None, nothing is made up), "interrupted" (search.solve's `interrupt` was
    set, e.g. by Ctrl-C: the answer so far, as for a budget), "no_answer" (paths finished
    but none had an extractable answer), "unfinished" (no path finished although budget was
    left: a depth, step or batch limit, or an engine that stopped making progress).
    stats["cut_by"] names the limit on every "budget_exhausted" (or "interrupted").
    text: the chosen solution ("" with no answer: with none after a cut,
    stats["best_partial"] is the node id of the best unfinished candidate, how far it got).
    load_seconds: the time loading took before the search (usage.seconds is the search's).
    selected_by: what chose the answer: the selection rule and, where scores decided, the
    scorer and how its step scores were aggregated ("vote", "score(steps, min)",
    "weighted_vote(unit_tests, last)", "greedy (the one path)", ...; "..., after finishing
    the best partial path greedily from the reserve" when Budget.reserve produced it).
    """

    answer: str | None
    text: str
    score: float
    candidates: tuple[Candidate, ...]
    tree: Node
    usage: Usage
    seed: int
    algo: str
    status: str = "ok"
    knobs: Mapping[str, Any] = field(default_factory=dict)
    stats: Mapping[str, Any] = field(default_factory=dict)  # what the run observed (pruned...)
    selected_by: str = ""  # the rule (and scorer) that chose the answer, e.g. "score(steps, min)"
    model: str = ""  # the engine's model name (search.solve fills it in)
    scorer: str = ""  # the scorer's name (search.solve fills it in)
    # seconds search.solve spent loading the engine and scorer (or waiting for another
    # thread's load of them) before the search began: never part of usage.seconds
    load_seconds: float = 0.0

    def to_networkx(self) -> nx.DiGraph:
        return tree_to_networkx(self.tree)


@dataclass(frozen=True)
class Outcome:
    """What a search found (search.algos: Run.finish), the Result's first stage: the call
    that knows every knob's actual value, the algorithm's name and seed and the meter's
    usage makes the Result of it, once. resolved: the knobs the search resolved itself."""

    answer: str | None
    text: str
    score: float
    candidates: tuple[Candidate, ...]
    tree: Node
    status: str
    stats: Mapping[str, Any] = field(default_factory=dict)
    selected_by: str = ""
    resolved: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, result: Result, *, resolved: Mapping[str, Any], stats: Mapping[str, Any],
           selected_by: str) -> Outcome:
        """What another search found (compute_optimal's probe, or the search it chose): its
        answer, candidates, tree, status and cut stand; the rest is this search's."""
        cut = {k: result.stats[k] for k in ("cut_by", "cut_in_flight", "best_partial")
               if k in result.stats}
        return cls(answer=result.answer, text=result.text, score=result.score,
                   candidates=result.candidates, tree=result.tree, status=result.status,
                   stats={**dict(stats), **cut}, selected_by=selected_by,
                   resolved=dict(resolved))

    def result(self, *, knobs: Mapping[str, Any], stats: Mapping[str, Any], **call: Any
               ) -> Result:
        """The Result: what was found, with what the call knows (search.knobs.run: usage,
        seed, algo, and model, scorer, load_seconds); stats: the Outcome's and the call's."""
        found = {f.name: getattr(self, f.name) for f in fields(self)
                 if f.name not in ("stats", "resolved")}
        return Result(**found, knobs=dict(knobs), stats=dict(stats), **call)
