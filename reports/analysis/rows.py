"""Reading eval-run rows (JSONL written by reports.eval) and grouping them for the analyses.

One row per eval cell (problem x algorithm x budget x seed), schema 1:
    {"schema": 1, "key", "dataset", "problem_id", "difficulty", "model", "scorer", "algo",
     "knobs": {...}, "budget": {"width", "tokens"}, "seed", "answer", "gold", "correct",
     "status", "error", "usage": {"generated_tokens", "prefill_tokens", "forward_passes",
     "scorer_calls", "scorer_tokens", "flops", "seconds"},
     "candidates": [{"answer", "score", "finished", "correct", "verified", "text"?}],
     "text"?, "time", "reused_from_seed"?}
("?": only some rows: texts with --keep-text; reused_from_seed on the copies of a
deterministic algorithm's run, which are not independent samples: see `independent`.)

A file being appended to (or one whose writer was killed) may end in a partial line: that
last line is skipped. A malformed line anywhere else is an error naming file and line, since
it means the file is damaged rather than unfinished.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

Row = dict[str, Any]
SCHEMA = 1
USAGE_KEYS = ("generated_tokens", "prefill_tokens", "forward_passes", "scorer_calls",
              "scorer_tokens", "flops", "seconds")
REQUIRED = ("problem_id", "algo", "seed", "correct")


def _paths(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    if isinstance(paths, (str, Path)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def read_rows(paths: str | Path | Iterable[str | Path], *, latest: bool = True) -> list[Row]:
    """All rows of one or more JSONL files, in file order.

    latest: when several rows share a "key" (a cell re-run), keep only the last one written,
    at the position of the first (so the order stays the order of the grid).
    """
    rows: list[Row] = []
    for path in _paths(paths):
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                if i == len(lines) - 1:  # no newline after it: a write cut short, skip it
                    continue
                raise ValueError(f"{path}:{i + 1}: not a JSON row ({err})") from None
            rows.append(check_row(row, where=f"{path}:{i + 1}"))
    return dedupe(rows) if latest else rows


def check_row(row: Any, *, where: str = "row") -> Row:
    """row itself, after checking it is a schema-1 row with the fields the analyses need."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    if row.get("schema", SCHEMA) != SCHEMA:
        raise ValueError(f"{where}: row schema {row.get('schema')!r}, this reader knows "
                         f"{SCHEMA}")
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ValueError(f"{where}: row lacks {', '.join(missing)}")
    return row


def dedupe(rows: Iterable[Row]) -> list[Row]:
    """One row per "key" (the last written wins); rows without a key are all kept."""
    out: list[Row | None] = []
    at: dict[str, int] = {}
    for row in rows:
        key = row.get("key")
        if key is None:
            out.append(row)
        elif key in at:
            out[at[key]] = row
        else:
            at[key] = len(out)
            out.append(row)
    return [r for r in out if r is not None]


K = TypeVar("K", bound=Hashable)


def group(rows: Iterable[Row], by: Callable[[Row], K]) -> dict[K, list[Row]]:
    """Rows bucketed by by(row), buckets in order of first appearance."""
    out: dict[K, list[Row]] = {}
    for row in rows:
        out.setdefault(by(row), []).append(row)
    return out


def budget_key(row: Mapping[str, Any]) -> tuple[float, float]:
    """A sortable form of row["budget"]: (width, tokens), a missing part as +inf."""
    b = row.get("budget") or {}
    return (_num(b.get("width")), _num(b.get("tokens")))


def budget_label(row: Mapping[str, Any]) -> str:
    """"w=4", "t=2000", "w=4,t=2000" or "none"."""
    b = row.get("budget") or {}
    parts = [f"{tag}={b[k]}" for tag, k in (("w", "width"), ("t", "tokens"))
             if b.get(k) is not None]
    return ",".join(parts) or "none"


def _num(v: Any) -> float:
    return math.inf if v is None else float(v)


def usage(row: Mapping[str, Any], name: str) -> float | None:
    """row["usage"][name] as a float, or None when the row did not record it."""
    if name not in USAGE_KEYS:
        raise ValueError(f"unknown usage field {name!r}; choose from {', '.join(USAGE_KEYS)}")
    v = (row.get("usage") or {}).get(name)
    return None if v is None else float(v)


def curve_label(row: Mapping[str, Any], knobs: Sequence[str] = ()) -> str:
    """The algorithm name, with the listed knobs appended ("beam m=4") to split curves."""
    parts = [str(row["algo"])]
    parts += [f"{k}={row.get('knobs', {})[k]}" for k in knobs if k in row.get("knobs", {})]
    return " ".join(parts)


def provenance(rows: Iterable[Row]) -> dict[str, list[str]]:
    """The models and scorers the rows came from (sorted; "?" for a row without a model).
    A row whose run consulted no scorer (scorer null: greedy, a plain vote) adds none."""
    rows = list(rows)
    return {"models": sorted({str(r.get("model") or "?") for r in rows}),
            "scorers": sorted({str(r["scorer"]) for r in rows if r.get("scorer")})}


def curve_labeler(rows: Iterable[Row], knobs: Sequence[str] = ()) -> Callable[[Row], str]:
    """curve_label, plus the model and/or scorer where the rows mix several of them (curves
    of different models or scorers are never pooled)."""
    prov = provenance(rows)
    parts = [what for what in ("model", "scorer") if len(prov[f"{what}s"]) > 1]

    def label(row: Row) -> str:
        extra = [f"model {row.get('model') or '?'}" if what == "model" else
                 f"scorer {row['scorer']}" if row.get("scorer") else "no scorer"
                 for what in parts]
        return curve_label(row, knobs) + (f" [{', '.join(extra)}]" if extra else "")

    return label


def facets(rows: Iterable[Row]) -> list[tuple[int | None, list[Row]]]:
    """The rows split by difficulty level (ascending; rows without a level last) when they
    hold at least two levels; else one facet of every row, under its one level (or None)."""
    rows = list(rows)
    levels = sorted({r["difficulty"] for r in rows if r.get("difficulty") is not None})
    if len(levels) < 2:
        return [(levels[0] if levels else None, rows)] if rows else []
    out: list[tuple[int | None, list[Row]]] = [
        (d, [r for r in rows if r.get("difficulty") == d]) for d in levels]
    rest = [r for r in rows if r.get("difficulty") is None]
    return out + ([(None, rest)] if rest else [])


def candidates(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """row["candidates"], [] when absent."""
    return list(row.get("candidates") or [])


def independent(rows: Iterable[Row]) -> list[Row]:
    """The rows that are runs of their own: copies of a deterministic algorithm's run for
    another seed (reused_from_seed) are left out, so they never count as extra samples."""
    return [r for r in rows if r.get("reused_from_seed") is None]


def widest(rows: Sequence[Row]) -> list[Row]:
    """The rows (all seeds) of the budget whose rows hold the most candidates in all, ties to
    the larger budget: the largest pool of samples of one problem that no smaller run of the
    same seed can repeat."""
    by_budget = group(rows, budget_key)
    best = max(by_budget, key=lambda b: (sum(len(candidates(r)) for r in by_budget[b]), b))
    return by_budget[best]
