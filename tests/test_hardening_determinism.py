"""Determinism (issue 9, item 6): the same seed gives identical Results for every registered
algorithm in two separate processes on CPU.

Each process loads the same tiny random-initialised Llama (saved to a local folder once)
through HFEngine.load, scores with a real scorer (the generator's own self-evaluation: extra
forward passes through the same engine), runs every algorithm with small knobs and a token
budget, and writes a canonical dump of each Result: answer, text, status, score, candidates,
usage (all but seconds), stats and the whole tree (step texts, token ids, log-probabilities
bit for bit, stop reasons, every score). The two dumps must be equal; a second seed must
change what sampling algorithms do (so the dump is not blind to the seed).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SEED, OTHER_SEED = 7, 8
SMALL = {"n": 4, "m": 2, "groups": 2, "width": 2, "k": 2, "iterations": 4, "batch": 2,
         "rollouts": 4, "step_tokens": 6, "max_depth": 5, "horizon": 16,
         "chunk_tokens": 6, "max_tokens": 30}
TOKENS = 160  # the budget: some runs end by it, others by their depth limits
SAMPLING = ("best_of_n", "beam", "particle_filter", "rpc")  # must differ between the seeds


def _float(x: float) -> str | float:
    return x.hex() if math.isfinite(x) else repr(x)  # bit-exact, and JSON-safe


def dump(result: Any) -> dict[str, Any]:
    """A canonical, JSON-able form of a Result; node ids become walk-order indices."""
    nodes = list(result.tree.walk())
    index = {node.id: i for i, node in enumerate(nodes)}
    tree = [{"parent": None if n.parent is None else index[n.parent.id],
             "text": n.step.text if n.step else n.problem.prompt,
             "ids": list(n.step.token_ids) if n.step else list(n.prompt_ids),
             "logprobs": [_float(x) for x in n.step.logprobs] if n.step else [],
             "stop": n.step.stop_reason if n.step else None,
             "scores": {k: _float(v) for k, v in sorted(n.scores.flat().items())
                        if k not in ("merged_into",)}} for n in nodes]
    usage = {k: v for k, v in result.usage.as_dict().items() if k != "seconds"}
    return {"answer": result.answer, "text": result.text, "status": result.status,
            "score": _float(result.score), "usage": usage,
            "candidates": [[c.text, c.answer, _float(c.score), c.finished, index.get(c.node_id)]
                           for c in result.candidates],
            "stats": json.loads(json.dumps(result.stats, default=repr)), "tree": tree}


def child(folder: str, out: str) -> None:
    """What each process runs: every algorithm at SEED, and the sampling ones at OTHER_SEED."""
    import torch

    import search
    from rewards.self_eval import SelfEvalScorer
    from search.engines.hf import HFEngine
    from search.registry import get, names, uses_scorer

    torch.set_num_threads(1)
    engine = HFEngine.load(folder, device="cpu")
    problem = search.Problem(prompt="12+34=", id="det", answer="46")
    runs: dict[str, Any] = {}
    for algo in names():
        params = inspect.signature(get(algo)).parameters
        knobs: dict[str, Any] = {k: v for k, v in SMALL.items() if k in params}
        for seed in (SEED, OTHER_SEED) if algo in SAMPLING else (SEED,):
            result = search.solve(problem, algo, search.Budget(tokens=TOKENS), engine=engine,
                                  scorer=SelfEvalScorer(engine) if uses_scorer(algo, knobs)
                                  else None, seed=seed, **knobs)
            runs[f"{algo}@{seed}"] = dump(result)
    Path(out).write_text(json.dumps(runs, sort_keys=True))


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    from helpers import tiny_llama

    model, tok = tiny_llama(seed=3)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def run_children(folder: Path, outs: list[Path]) -> list[dict[str, Any]]:
    """Run `child` in len(outs) processes at once; their dumps."""
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; "
            "import test_hardening_determinism as t; t.child(sys.argv[2], sys.argv[3])")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(REPO), str(folder), str(out)],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for out in outs]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-3000:]
    return [json.loads(out.read_text()) for out in outs]


@pytest.mark.slow
def test_every_algorithm_is_deterministic_across_processes(model_folder, tmp_path):
    from search.registry import names, uses_scorer

    first, second = run_children(model_folder, [tmp_path / "a.json", tmp_path / "b.json"])
    assert set(first) == {f"{a}@{SEED}" for a in names()} | {f"{a}@{OTHER_SEED}"
                                                            for a in SAMPLING}
    for key in sorted(first):
        assert first[key] == second[key], f"{key} differs between two processes"
        run = first[key]
        assert run["usage"]["generated_tokens"] > 0 and len(run["tree"]) > 1, key
        if uses_scorer(key.split("@")[0], {}):  # the real scorer ran and was recorded
            assert any("reward" in node["scores"] for node in run["tree"]), key
    for algo in SAMPLING:  # the seed reaches the sampler: another seed, another tree
        assert first[f"{algo}@{SEED}"]["tree"] != first[f"{algo}@{OTHER_SEED}"]["tree"], algo
