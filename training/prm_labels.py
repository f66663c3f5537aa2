"""Step labels for a process reward model, from the policy's own rollouts.

A step's Monte-Carlo value q(s) is the share of k completions sampled from the path ending at
s that reach the gold answer (Wang et al. 2024, "Math-Shepherd"). Three labels from it:

    soft   q(s)                                        (Math-Shepherd's soft estimate)
    hard   1 if any completion reaches the gold, else 0 (Math-Shepherd's hard estimate)
    pav    clip(q(s) + alpha * (q(s) - q(parent)), 0, 1): the value plus the step's progress,
           its advantage under the prover (Setlur et al. 2024, "Rewarding Progress"; the
           prover here is the policy itself, so Q and A come from the same rollouts)

Two ways to spend the rollouts:
    every   q at every step of every sampled path (soft, hard or pav labels);
    binary  hard labels by binary search for the first step whose completions all fail
            (Luo et al. 2024, "OmegaPRM"): a path that grades correct is positive
            throughout at no cost; a wrong one needs ~log2(steps) evaluations, since hard
            labels are monotone along a path (a completion from step j that reaches the gold
            is one from every earlier step too). Steps after the first failing one are 0.

    for each batch of problems:
        paths <- sample `paths` solutions per problem, one engine call per step depth
        grade each finished path (verifiers.grade)
        label with `every` or `binary`, every call over all of the batch's nodes at once

Completions go through the engine's shared-prefix tree (HFEngine.expand on the path's node):
each prefix is prefilled once at most and its k completions read its KV cache. The labeller
counts what it saved: `naive_prefill` is what re-reading every prefix for every row would
cost, against the engine's metered prefill.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from search.engines.base import DEFAULT_STOP
from search.types import Node, Problem

LABELS = ("soft", "hard", "pav")
SEARCHES = ("every", "binary")


@dataclass(frozen=True)
class LabelConfig:
    """How paths are sampled and labelled (see the module doc)."""

    labels: str = "hard"
    search: str = "binary"
    paths: int = 4  # sampled solutions per problem
    completions: int = 8  # k rollouts per evaluated step
    temperature: float = 0.8  # the searches' default sampling temperature
    step_tokens: int = 96
    max_steps: int = 12
    alpha: float = 1.0  # pav: weight of the progress term
    reuse: bool = True  # hard labels: completions become labelled paths too (Labeller.reused)
    stop: tuple[str, ...] = DEFAULT_STOP

    def __post_init__(self) -> None:
        if self.labels not in LABELS:
            raise ValueError(f"labels must be one of {LABELS}, got {self.labels!r}")
        if self.search not in SEARCHES:
            raise ValueError(f"search must be one of {SEARCHES}, got {self.search!r}")
        if self.search == "binary" and self.labels != "hard":
            raise ValueError("binary search gives hard labels only; use search='every' for "
                             f"{self.labels!r} labels")
        if self.paths < 1 or self.completions < 1 or self.max_steps < 1 or self.step_tokens < 1:
            raise ValueError("paths, completions, max_steps and step_tokens must be >= 1")


@dataclass(frozen=True)
class LabelledPath:
    """One sampled solution: its steps' texts and labels (None: not labelled)."""

    problem_id: str
    prompt: str
    answer: str
    steps: tuple[str, ...]
    labels: tuple[float | None, ...]
    correct: bool

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "steps": list(self.steps), "labels": list(self.labels)}

    @classmethod
    def of(cls, row: dict[str, Any]) -> LabelledPath:
        return cls(row["problem_id"], row["prompt"], row["answer"], tuple(row["steps"]),
                   tuple(row["labels"]), bool(row["correct"]))


@dataclass
class Cost:
    """Engine work spent labelling, and the prefill the shared-prefix tree saved."""

    generated: int = 0
    prefill: int = 0
    naive_prefill: int = 0  # every row re-reading its whole prefix (no shared KV)
    rollouts: int = 0

    def add(self, other: dict[str, int]) -> None:
        for key, value in other.items():
            setattr(self, key, getattr(self, key) + int(value))


class Labeller:
    """Samples and labels paths with one engine; grades with verifiers.grade (cached)."""

    def __init__(self, engine: Any, config: LabelConfig, *, seed: int = 0) -> None:
        from training.evaluate import Grader

        self.engine, self.cfg = engine, config
        self.rng = random.Random(seed)
        self.grade = Grader()
        self.cost = Cost()
        self.rolled: list[tuple[Node, list[Node]]] = []  # (node, its completions)

    # -- engine calls (the only place rows are sampled; each one counted) ------------------
    def _expand(self, nodes: Sequence[Node], n: int, *, whole: bool) -> list[list[Node]]:
        if not nodes:
            return []
        before = self.engine.meter.usage()
        cfg = self.cfg
        out = self.engine.expand(
            list(nodes), n, stop=None if whole else cfg.stop,
            max_tokens=cfg.step_tokens * cfg.max_steps if whole else cfg.step_tokens,
            temperature=cfg.temperature, seed=self.rng.getrandbits(32))
        used = self.engine.meter.usage() - before
        self.cost.add({"generated": used.generated_tokens, "prefill": used.prefill_tokens,
                       "naive_prefill": n * sum(node.n_tokens for node in nodes),
                       "rollouts": n * len(nodes) if whole else 0})
        return out

    def sample(self, problems: Sequence[Problem]) -> list[Node]:
        """`paths` solutions per problem, step by step: the leaves (finished, or cut at
        max_steps), problem by problem."""
        roots = [self.engine.root(p) for p in problems]
        frontier = [c for kids in self._expand(roots, self.cfg.paths, whole=False) for c in kids]
        for _ in range(self.cfg.max_steps - 1):
            live = [n for n in frontier if not n.finished]
            if not live:
                break
            step = iter(kids[0] for kids in self._expand(live, 1, whole=False))
            frontier = [next(step) if not n.finished else n for n in frontier]
        return frontier

    def correct(self, node: Node) -> bool:
        return self.grade(node.problem, node.text).correct

    def values(self, nodes: Sequence[Node]) -> list[float]:
        """q for each node: its own grade when finished, else the share of k completions
        from it that grade correct."""
        live = [n for n in nodes if not n.finished]
        rolled = iter(self._expand(live, self.cfg.completions, whole=True))
        out = []
        for node in nodes:
            if node.finished:
                out.append(float(self.correct(node)))
            else:
                outs = next(rolled)
                self.rolled.append((node, outs))
                out.append(sum(self.correct(o) for o in outs) / len(outs))
        return out

    # -- labels ------------------------------------------------------------------------
    def label(self, problems: Sequence[Problem]) -> list[LabelledPath]:
        leaves = self.sample(problems)
        paths = [leaf.path()[1:] for leaf in leaves]
        labels = self._binary(leaves, paths) if self.cfg.search == "binary" \
            else self._every(paths)
        out = [LabelledPath(leaf.problem.id, leaf.problem.prompt, str(leaf.problem.answer),
                            tuple(n.step.text for n in path if n.step is not None),
                            tuple(lab), leaf.finished and self.correct(leaf))
               for leaf, path, lab in zip(leaves, paths, labels)]
        if self.cfg.reuse and self.cfg.labels == "hard":
            out += self.reused(out)
        self.rolled = []
        return out

    def reused(self, seen: Sequence[LabelledPath]) -> list[LabelledPath]:
        """The completions drawn from a step that some completion took to the gold answer,
        as labelled paths (hard labels: what they cost nothing more to know). Such a step
        and its prefix are positive; so is every step of a completion that grades correct;
        a completion that grades wrong ends on a negative step, its middle steps unknown.
        Paths already labelled are not repeated."""
        out: list[LabelledPath] = []
        keys = {(p.problem_id, p.steps) for p in seen}
        for node, outs in self.rolled:
            if not any(self.correct(o) for o in outs):
                continue
            prefix = tuple(n.step.text for n in node.path()[1:] if n.step is not None)
            for o in outs:
                assert o.step is not None
                steps = prefix + split_steps(o.step.text, self.cfg.stop)
                if (node.problem.id, steps) in keys:
                    continue
                keys.add((node.problem.id, steps))
                ok = self.correct(o)
                rest = len(steps) - len(prefix)
                tail: list[float | None] = [1.0] * rest if ok else [None] * (rest - 1) + [0.0]
                out.append(LabelledPath(node.problem.id, node.problem.prompt,
                                        str(node.problem.answer), steps,
                                        (1.0,) * len(prefix) + tuple(tail), ok))
        return out

    def _every(self, paths: list[list[Node]]) -> list[list[float | None]]:
        flat = [n for path in paths for n in path]
        roots = list({id(p[0].root): p[0].root for p in paths}.values())
        q = dict(zip((n.id for n in flat), self.values(flat)))
        if self.cfg.labels == "pav":
            q.update(zip((r.id for r in roots), self.values(roots)))
        out: list[list[float | None]] = []
        for path in paths:
            row: list[float | None] = []
            for node in path:
                v = q[node.id]
                if self.cfg.labels == "hard":
                    v = float(v > 0)
                elif self.cfg.labels == "pav":
                    parent = node.parent
                    assert parent is not None
                    v = min(1.0, max(0.0, v + self.cfg.alpha * (v - q[parent.id])))
                row.append(v)
            out.append(row)
        return out

    def _binary(self, leaves: list[Node], paths: list[list[Node]]) -> list[list[float | None]]:
        # per path: steps [0, good) known positive, steps [bad, len) known negative
        good = [len(p) if leaf.finished and self.correct(leaf) else 0
                for leaf, p in zip(leaves, paths)]
        bad = [len(p) if g == len(p) else (len(p) - 1 if leaf.finished else len(p))
               for leaf, p, g in zip(leaves, paths, good)]
        while True:
            # an unfinished path's last step is evaluated like any other
            todo = [(i, (good[i] + bad[i]) // 2 if bad[i] < len(paths[i]) else len(paths[i]) - 1)
                    for i in range(len(paths)) if good[i] < bad[i]]
            if not todo:
                break
            qs = self.values([paths[i][mid] for i, mid in todo])
            for (i, mid), v in zip(todo, qs):
                if v > 0:
                    good[i] = mid + 1
                else:
                    bad[i] = mid
        return [[1.0 if j < g else 0.0 for j in range(len(p))] for p, g in zip(paths, good)]


def split_steps(text: str, stop: Sequence[str]) -> tuple[str, ...]:
    """A completion cut into steps as the engine would have cut it: each step ends with its
    delimiter (the first of `stop` found), the last step with whatever ends the text."""
    steps, rest = [], text
    while True:
        cuts = [(rest.find(s), s) for s in stop if s and rest.find(s) >= 0]
        if not cuts:
            break
        at, s = min(cuts)
        steps.append(rest[:at + len(s)])
        rest = rest[at + len(s):]
    if rest or not steps:
        steps.append(rest)
    return tuple(steps)


def _batches(items: Sequence[Problem], size: int) -> Iterator[Sequence[Problem]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def label_problems(engine: Any, problems: Sequence[Problem], out: Path, config: LabelConfig, *,
                   seed: int = 0, batch: int = 16, progress: bool = True) -> Cost:
    """Label every problem not yet in `out` (JSONL, one LabelledPath a line, appended,
    flushed and fsynced per batch: a killed run resumes where it stopped). Each batch draws
    from its own seed (seed, first problem's index), so a resumed run labels as an
    uninterrupted one would. Each batch's cost and seconds go to `out`.cost.jsonl (see
    `spent`: the whole labelling's cost across resumed runs). Returns the cost of this
    call's batches."""
    from tqdm import tqdm

    done = {r["problem_id"] for r in read_rows(out)} if out.exists() else set()
    out.parent.mkdir(parents=True, exist_ok=True)
    total = Cost()
    todo = [(i, chunk) for i, chunk in enumerate(_batches(problems, batch))
            if any(p.id not in done for p in chunk)]
    with tqdm(total=len(problems), initial=len(problems) - sum(len(c) for _, c in todo),
              desc="labelling", unit="problem", disable=not progress) as bar, \
            out.open("a", encoding="utf-8") as fh:
        for index, chunk in todo:
            t0 = time.perf_counter()
            labeller = Labeller(engine, config, seed=hash_seed(seed, index))
            rows = labeller.label(chunk)
            fh.write("".join(json.dumps(r.row()) + "\n" for r in rows))
            fh.flush()
            os.fsync(fh.fileno())
            with _cost_file(out).open("a", encoding="utf-8") as log:
                log.write(json.dumps({"batch": index, "problems": len(chunk),
                                      "seconds": round(time.perf_counter() - t0, 3),
                                      **asdict(labeller.cost)}) + "\n")
            total.add(asdict(labeller.cost))
            bar.update(len(chunk))
            bar.set_postfix_str(f"{labeller.cost.generated:,} tok, prefill saved "
                                f"{saved(labeller.cost):.0%}", refresh=False)
    return total


def _cost_file(out: Path) -> Path:
    return out.with_name(out.name + ".cost.jsonl")


def spent(out: Path) -> dict[str, float]:
    """The labelling of `out` in all: problems, seconds and engine cost summed over every
    batch of every (resumed) run, and the share of prefill saved."""
    rows = read_rows(_cost_file(out)) if _cost_file(out).is_file() else []
    total: dict[str, float] = {}
    for row in rows:
        for key, value in row.items():
            if key != "batch":
                total[key] = total.get(key, 0) + value
    cost = Cost(**{k: int(total.get(k, 0)) for k in asdict(Cost())})
    return {**total, "prefill_saved": round(saved(cost), 4)}


def hash_seed(seed: int, index: int) -> int:
    return random.Random(f"prm-labels/{seed}/{index}").getrandbits(32)


def saved(cost: Cost) -> float:
    """Share of the naive prefill the shared-prefix tree did not have to compute."""
    return 1.0 - cost.prefill / cost.naive_prefill if cost.naive_prefill else 0.0


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a labels file; a torn last line (a killed run) is dropped."""
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number != len(lines):
                raise ValueError(f"{path}:{number}: not a JSON row") from None
    return rows
