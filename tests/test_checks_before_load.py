"""Every check of a solve runs before any model loads (issue 33): a bad concurrency, a value
scorer for a model with no value head, an oracle scorer without a gold answer. The CLI can
give the gold answer (--answer), so the oracle scorer works there."""

from __future__ import annotations

import pytest

import search
from search import api
from search.__main__ import main


@pytest.fixture
def no_loading(monkeypatch):
    """Loading any model fails the test: the checks must come first."""

    def load(name, **kwargs):
        raise AssertionError(f"model {name!r} was loaded before the checks")

    monkeypatch.setattr(api, "_ENGINES", {})
    monkeypatch.setattr(api, "_load_engine", load)


@pytest.mark.parametrize("concurrency", [0, -2, 1.5, True, "4"])
def test_solve_many_refuses_a_bad_concurrency_before_loading(no_loading, concurrency):
    with pytest.raises(ValueError, match="concurrency must be a positive int"):
        search.solve_many(["What is 2+3?"], engine="tiny-arith", concurrency=concurrency)


def test_oracle_without_a_gold_answer_is_refused_before_loading(no_loading):
    with pytest.raises(ValueError, match="gold answer"):
        search.solve("What is 2+3?", "best_of_n", engine="tiny-arith", scorer="oracle",
                     progress=False)
    with pytest.raises(ValueError, match="gold answer"):
        search.solve_many(["What is 2+3?"], "best_of_n", engine="tiny-arith", scorer="oracle")


def test_value_scorer_without_a_value_head_is_refused_before_loading(no_loading, tmp_path):
    (tmp_path / "config.json").write_text("{}")  # a local model folder with no value head
    with pytest.raises(ValueError, match="value head"):
        search.solve("What is 2+3?", "beam", engine=str(tmp_path), scorer="value",
                     progress=False)


def test_the_cli_refuses_oracle_without_answer_before_loading(no_loading, capsys):
    assert main(["What is 2+3?", "--model", "tiny-arith", "--scorer", "oracle"]) == 2
    assert "gold answer" in capsys.readouterr().err


def test_the_cli_passes_a_gold_answer_to_the_oracle(capsys):
    """tiny-arith answers "2 + 3 = 5"-style sums; the oracle marks the one matching 5."""
    code = main(["What is 2 + 3?", "--model", "tiny-arith", "--scorer", "oracle",
                 "--answer", "5", "--algo", "best_of_n", "--knob", "n=4", "--quiet", "--json"])
    assert code == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["scorer"] == "oracle" and out["usage"]["scorer_calls"] > 0


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_threads_must_be_a_positive_int(bad):
    from search.runtime.omp import use_threads

    with pytest.raises(ValueError, match="threads must be a positive int"):
        use_threads(bad)


def test_the_cli_refuses_zero_threads_before_loading(no_loading, capsys):
    assert main(["What is 2+3?", "--model", "tiny-arith", "--threads", "0"]) == 2
    assert "threads must be a positive int" in capsys.readouterr().err


def test_idle_openmp_threads_sleep_by_default():
    """`import search` asks OpenMP for the passive wait policy unless the user chose one."""
    import os
    import subprocess
    import sys

    code = "import os, search; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "PASSIVE"
    chosen = subprocess.run([sys.executable, "-c", code], env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
                            capture_output=True, text=True, check=True).stdout.strip()
    assert chosen == "ACTIVE"


@pytest.mark.parametrize("code,policy,chosen", [
    ("import search", "PASSIVE", None),  # ours, set before torch loads OpenMP
    ("import torch, search", "", None),  # torch's runtime read the environment first: its default
    ("import search", "ACTIVE", "active"),  # the user's
    ("import torch, search", "PASSIVE", "passive"),  # the user's, read by torch first
])
def test_the_policy_openmp_runs_under_is_known(code, policy, chosen):
    """search.WAIT_POLICY is the wait policy OpenMP read: ours where `import search` came
    before torch, the user's where they set one, else none (OpenMP's own default)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if chosen:
        env["OMP_WAIT_POLICY"] = chosen
    out = subprocess.run([sys.executable, "-c", f"{code}; print(repr(search.WAIT_POLICY))"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == repr(policy)


def test_a_model_named_as_a_prm_is_refused_before_loading(no_loading, capsys):
    """prm:tiny-arith (the model) for prm:tiny-arith-prm: refused by name, nothing loaded."""
    from search.models import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="'tiny-arith' is no PRM"):
        search.solve("What is 2+3?", "beam", engine="tiny-arith", scorer="prm:tiny-arith",
                     progress=False)
    assert main(["What is 2+3?", "--model", "tiny-arith", "--scorer", "prm:tiny-arith"]) != 0
    assert "is no PRM" in capsys.readouterr().err
