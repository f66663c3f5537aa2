"""problems.datasets through the `datasets` library, offline: hub ids read from cache entries
built here, short names preferring the hub copy and falling back to the data folder, the
one message when neither is there, and the command lines that take a dataset."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from dataset_files import GSM8K, LOCAL, MATH500, cache_entry, hub_rows, same, write_jsonl

import problems
from problems.datasets import BENCHMARKS
from reports.eval.sweep import main, read_rows

datasets = pytest.importorskip("datasets", reason="the `datasets` library is not installed")


def test_tests_run_offline_with_their_own_cache():
    import os

    assert datasets.config.HF_HUB_OFFLINE
    assert "tts-datasets-cache-" in os.environ["HF_DATASETS_CACHE"]


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_hub_copy_gives_the_local_copys_problems(name, tmp_path, monkeypatch):
    """Each hub copy, in its own columns (gsm8k without idx, amc23 with question only), from
    a cache entry under its hub id: the Problems of the same rows in the local file."""
    bench = BENCHMARKS[name]
    monkeypatch.setenv(problems.DATA_ENV, str(tmp_path / "empty"))
    cache = tmp_path / "cache"
    cache_entry(cache, bench.hub, hub_rows(name, LOCAL[name]), split=bench.split,
                config=bench.config or "default")
    local = problems.load(name, write_jsonl(tmp_path / "local.jsonl", LOCAL[name]))
    for how in (name, bench.hub, bench.hub.upper()):  # the short name, or the id in any case
        found = problems.load(how, cache_dir=cache)
        assert [same(p) for p in found] == [same(p) for p in local], how
        assert found[0].metadata["origin"].startswith(bench.hub)


def test_short_name_prefers_the_hub_copy_then_the_data_folder(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    write_jsonl(folder / "gsm8k_test.jsonl", GSM8K[:2])
    monkeypatch.setenv(problems.DATA_ENV, str(folder))
    cache = tmp_path / "cache"
    from_folder = problems.load("gsm8k", cache_dir=cache)  # nothing cached yet
    assert len(from_folder) == 2 and from_folder[0].metadata["origin"] == str(
        folder / "gsm8k_test.jsonl")
    cache_entry(cache, "openai/gsm8k", hub_rows("gsm8k", GSM8K), split="test", config="main")
    from_hub = problems.load("gsm8k", cache_dir=cache)
    assert len(from_hub) == 3
    assert from_hub[0].metadata["origin"] == "openai/gsm8k (config main, split test)"
    # a path names the copy: the folder's, though the hub copy is cached
    assert len(problems.load("gsm8k", folder, cache_dir=cache)) == 2


def test_neither_copy_is_one_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv(problems.DATA_ENV, str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError) as caught:
        problems.load("math500", cache_dir=tmp_path / "cache")
    message = str(caught.value)
    for part in ("math500: no copy found", "HuggingFaceH4/MATH-500", "not in the datasets cache",
                 "offline mode", f"in {tmp_path / 'nothing'} ($TTS_DATA_DIR)",
                 "HF_DATASETS_OFFLINE=1", "--data FILE_OR_FOLDER",
                 "TTS_DATA_DIR=FOLDER holding math500.jsonl"):
        assert part in message, (part, message)
    assert "\n" not in message and "Traceback" not in message


def test_hub_only_names_do_not_fall_back(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    write_jsonl(folder / "math500.jsonl", MATH500)
    monkeypatch.setenv(problems.DATA_ENV, str(folder))
    cache = tmp_path / "cache"
    assert len(problems.load("math500", cache_dir=cache)) == 3  # the short name falls back
    with pytest.raises(ConnectionError, match="HuggingFaceH4/MATH-500 .split test.: not in the "
                                              "datasets cache"):
        problems.load("HuggingFaceH4/MATH-500", cache_dir=cache)  # the id asks for the hub
    with pytest.raises(ConnectionError, match="openai/gsm8k .config main, split train"):
        problems.load("gsm8k", split="train", cache_dir=cache)  # the local copy is test only
    with pytest.raises(ConnectionError, match="someone/their-set: not in the datasets cache"):
        problems.load("someone/their-set", cache_dir=cache)


def test_missing_split_or_config_of_a_cached_dataset(tmp_path):
    cache = tmp_path / "cache"
    cache_entry(cache, "openai/gsm8k", hub_rows("gsm8k", GSM8K), split="test", config="main")
    with pytest.raises(ValueError, match=r"openai/gsm8k \(config main, split train\): Unknown "
                                         r"split \"train\". Should be one of \['test'\]"):
        problems.load("openai/gsm8k", split="train", cache_dir=cache)
    with pytest.raises(ValueError, match="Couldn't find cache for openai/gsm8k for config "
                                         "'socratic'; Available configs in the cache: .'main'."):
        problems.load("openai/gsm8k", config="socratic", cache_dir=cache)


def test_other_hub_ids_with_field_mapping_split_and_revision(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    rows = [{"q": "Two plus two?", "a": 4.0, "lvl": 1}, {"q": "Three times 3?", "a": 9.0, "lvl": 2}]
    cache_entry(cache, "someone/arith-mini", rows, split="validation")
    asked = []
    real = datasets.load_dataset

    def recording(*args, **kwargs):  # the library's own call, its arguments kept
        asked.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", recording)
    found = problems.load("someone/arith-mini", split="validation", revision="v1.0",
                          fields={"problem": "q", "answer": "a", "level": "lvl"},
                          cache_dir=cache)
    assert [(p.id, p.prompt, p.answer, p.metadata["level"]) for p in found] == [
        ("someone/arith-mini/0", "Two plus two?", "4", 1),
        ("someone/arith-mini/1", "Three times 3?", "9", 2)]  # a float 9.0 reads "9"
    (args, kwargs), = asked
    assert args == ("someone/arith-mini", None)
    assert kwargs == {"split": "validation", "revision": "v1.0", "cache_dir": str(cache)}
    # one split cached and none asked: that split
    assert len(problems.load("someone/arith-mini", fields={"problem": "q", "answer": "a"},
                             cache_dir=cache)) == 2


def test_an_unreachable_hub_is_probed_once_not_retried(tmp_path, monkeypatch):
    """Without offline mode, a hub that cannot be reached reads the cache at once instead of
    the library's retries; the probe's answer is what decides."""
    from problems.datasets import readers

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    probed = []
    monkeypatch.setattr(readers, "_unreachable",
                        lambda endpoint: probed.append(endpoint) or "no route (test)")
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "cache"
    cache_entry(cache, "openai/gsm8k", hub_rows("gsm8k", GSM8K), split="test", config="main")
    assert len(problems.load("openai/gsm8k", cache_dir=cache)) == 3
    with pytest.raises(ConnectionError, match="not in the datasets cache and no route .test."):
        problems.load("someone/elsewhere", cache_dir=cache)
    assert probed == [datasets.config.HF_ENDPOINT] * 2
    assert datasets.config.HF_HUB_OFFLINE is False  # restored after each read


# -- the command lines ------------------------------------------------------------------------
def test_eval_takes_a_saved_folder_a_parquet_file_and_fields(tmp_path, capsys):
    from dataset_files import save_folder, write_parquet

    rows = [{"question": r["problem"], "final": r["answer"]} for r in MATH500]
    for path in (save_folder(tmp_path / "saved", rows), write_parquet(tmp_path / "m.parquet", rows)):
        argv = ["--dataset", str(path), "--field", "problem=question", "--field", "answer=final",
                "--algos", "greedy,best_of_n", "--budgets", "4", "--dry-run"]
        assert main(argv) == 0
        assert capsys.readouterr().out.strip() == "3 problems, 6 runs"
    assert main(["--dataset", str(tmp_path / "saved"), "--algos", "greedy", "--dry-run"]) == 2
    assert "map one with --field problem=COLUMN" in capsys.readouterr().err
    assert main(["--dataset", "arith", "--split", "test", "--algos", "greedy", "--dry-run"]) == 2
    assert "arith is generated, not read" in capsys.readouterr().err
    assert main(["--dataset", "gsm8k", "--field", "question", "--algos", "greedy"]) == 2
    assert "expected FIELD=COLUMN" in capsys.readouterr().err


@pytest.mark.slow  # two greedy runs of the embedded model: ~7 s here
def test_eval_runs_a_jsonl_of_your_own_to_rows(tmp_path):
    """Your own questions through the embedded tiny-arith model: rows named after the file,
    graded against your answers."""
    from problems import arith

    made = arith.generate(1, seed=11, difficulty=2)
    file = write_jsonl(tmp_path / "mine.jsonl",
                       [{"question": p.prompt, "final": p.answer, "level": 2} for p in made])
    out = tmp_path / "runs.jsonl"
    grid = ["--model", "tiny-arith", "--scorer", "steps", "--algos", "greedy", "--budgets", "1",
            "--difficulty", "2", "--quiet"]
    assert main(["--dataset", str(file), "--field", "problem=question", "--field",
                 "answer=final", "--out", str(out), *grid]) == 0
    rows = read_rows(out)
    assert [(r["dataset"], r["problem_id"], r["gold"], r["difficulty"]) for r in rows] == [
        ("mine", "mine/0", made[0].answer, 2)]
    assert all(r["status"] != "error" for r in rows)
    # the same problems generated by arith itself: the same answers, graded the same
    assert main(["--dataset", "arith", "--data-seed", "11", "--limit", "1", *grid,
                 "--out", str(tmp_path / "arith.jsonl")]) == 0
    assert [(r["answer"], r["correct"]) for r in rows] == [
        (r["answer"], r["correct"]) for r in read_rows(tmp_path / "arith.jsonl")]


# -- the real sets ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["math500", "aime24", "amc23", "gsm8k"])
def test_real_sets_hub_shaped_give_the_same_problems(name, tmp_path):
    bench = BENCHMARKS[name]
    file = DATA / bench.files[0]
    if not file.is_file():
        pytest.skip(f"benchmark file not found: {file} (../shared/data is absent)")
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    cache_entry(tmp_path, bench.hub, hub_rows(name, rows), split=bench.split,
                config=bench.config or "default")
    local = problems.load(name, file)
    assert [same(p) for p in problems.load(bench.hub, cache_dir=tmp_path)] == [
        same(p) for p in local]


def test_viewer_takes_a_problem_from_a_file_of_your_own(tmp_path):
    """reports.figures.viewer's --dataset: the same options as reports.eval (nothing solved
    here)."""
    import argparse

    from reports.figures.viewer import _problem

    file = write_jsonl(tmp_path / "mine.jsonl", [{"q": "One plus one?", "a": "2"},
                                                 {"q": "Two plus two?", "a": "4"}])
    args = argparse.Namespace(problem=None, dataset=str(file), data=None, data_seed=0, index=1,
                              difficulty=None, split=None, config=None, revision=None,
                              field=["problem=q", "answer=a"])
    found = _problem(args)
    assert (found.id, found.prompt, found.answer) == ("mine/1", "Two plus two?", "4")
