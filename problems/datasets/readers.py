"""Rows from wherever a dataset lives: a local file (JSONL, JSON, CSV, Parquet), a folder
written by `Dataset.save_to_disk`, or the Hugging Face hub through the `datasets` library.

    read_path(Path("mine.parquet"))                       # -> Rows(rows, origin, columns)
    read_hub("openai/gsm8k", config="main", split="test")  # the library's cache and offline mode

JSONL, JSON and CSV are read here (exact row numbers in errors, no cache entry per file);
Parquet through pyarrow and saved folders and hub ids through `datasets`, imported only
when one is read. Errors name the file and the row (from 1) or line.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import json
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


@dataclass(frozen=True)
class Rows:
    """A dataset's rows (column -> value), where they came from, and every column seen."""

    rows: tuple[dict[str, Any], ...]
    origin: str  # a file path, or "owner/name (config main, split test)"

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns of any row, in first-seen order (a JSONL row may lack some)."""
        return tuple(dict.fromkeys(k for row in self.rows for k in row))


class HubUnavailable(ConnectionError):
    """The hub copy can be neither downloaded nor read from the cache (a reason, not a bug)."""


# -- local files ------------------------------------------------------------------------------
def _lines(file: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file (.gz too); bytes that are not UTF-8 are an
    error naming the line, not a garbled prompt."""
    opener = gzip.open if file.name.endswith(".gz") else open
    with opener(file, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{file}:{number}: not UTF-8 text (byte {raw[err.start]:#04x} at column "
                    f"{err.start + 1}); save the file as UTF-8") from None
            yield number, text.removeprefix("\ufeff") if number == 1 else text


def read_jsonl(file: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl or .jsonl.gz file (blank lines skipped); a line that is not a JSON
    object is an error naming the file and line."""
    rows = []
    for number, line in _lines(file):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{file}:{number}: not a JSON row ({err})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{file}:{number}: not a JSON row (a {type(row).__name__})")
        rows.append(row)
    return rows


def _json(file: Path) -> list[dict[str, Any]]:
    """A .json file: a list of objects, {"data": [objects]}, columns {"col": [values]}, or
    one object (one row); one object per line is read as JSONL (as `datasets` does)."""
    text = "".join(line for _, line in _lines(file))
    try:
        data = json.loads(text)
    except ValueError as err:
        if "Extra data" in str(err):  # several top-level values: JSON lines
            return read_jsonl(file)
        raise ValueError(f"{file}: not JSON ({err})") from None
    if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), list):
        data = next(iter(data.values()))  # {"data": [...]}
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        if len({len(v) for v in data.values()}) != 1:
            raise ValueError(f"{file}: columns of different lengths")
        data = [dict(zip(data, values)) for values in zip(*data.values())]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError(f"{file}: expected a list of rows, got a {type(data).__name__}")
    for number, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise ValueError(f"{file}: row {number} is not an object (a {type(row).__name__})")
    return data


def _csv(file: Path) -> list[dict[str, Any]]:
    """A CSV file with a header line; every value is text (a level column is read as an int
    later). Lines with more cells than the header are an error naming the row."""
    text = "".join(line for _, line in _lines(file))
    rows = []
    for number, row in enumerate(csv.DictReader(io.StringIO(text, newline="")), 1):
        if None in row:
            raise ValueError(f"{file}: row {number} has more cells than the header")
        rows.append({k: v for k, v in row.items() if v is not None})
    return rows


def _parquet(file: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq  # installed with `datasets`

    try:
        return pq.read_table(file).to_pylist()
    except (OSError, ValueError) as err:  # pyarrow's errors subclass these
        raise ValueError(f"{file}: not a readable Parquet file ({err})") from None


READERS = {".jsonl": read_jsonl, ".jsonl.gz": read_jsonl, ".ndjson": read_jsonl,
           ".json": _json, ".csv": _csv, ".parquet": _parquet}


def is_saved(folder: Path) -> bool:
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def read_path(path: Path, *, split: str | None = None) -> Rows:
    """A file in one of READERS' formats, or a saved folder (split: which of a DatasetDict's)."""
    if path.is_dir():
        if not is_saved(path):
            raise ValueError(f"{path}: a folder, but not one written by save_to_disk (no "
                             "dataset_dict.json or state.json); give a file in it instead")
        from datasets import load_from_disk

        return Rows(_one_split(load_from_disk(str(path)), split, str(path)), str(path))
    suffix = next((s for s in READERS if path.name.lower().endswith(s)), None)
    if suffix is None:
        raise ValueError(f"{path}: unknown file type (read: {', '.join(READERS)}, or a folder "
                         "written by save_to_disk)")
    if split is not None:
        raise ValueError(f"{path}: a {suffix} file has no splits; drop the split")
    return Rows(tuple(READERS[suffix](path)), str(path))


def _one_split(found: Any, split: str | None, origin: str) -> tuple[dict[str, Any], ...]:
    """The rows of a Dataset, or of one split of a DatasetDict (the only one when not named)."""
    if hasattr(found, "keys"):  # a DatasetDict
        splits = sorted(found.keys())
        if split is None and len(splits) == 1:
            split = splits[0]
        if split is None or split not in found:
            what = "has several splits" if split is None else f"has no split {split!r}"
            raise ValueError(f"{origin} {what}; name one of: {', '.join(splits)} (--split)")
        found = found[split]
    elif split is not None and split != str(found.split or split):
        raise ValueError(f"{origin} has no split {split!r}; it holds one: {found.split}")
    return tuple(found.to_list())


# -- the hub --------------------------------------------------------------------------------
PROBE_SECONDS = 3.0
# read_hub switches the library to cache-only for one call; one call at a time does so
_CACHE_ONLY = threading.Lock()


@functools.cache
def _unreachable(endpoint: str) -> str | None:
    """Why the hub's host cannot be reached (None: it can), found with one TCP connection
    instead of the `datasets` library's retries (about 23 s of them here, offline)."""
    url = urlparse(endpoint)
    try:
        socket.create_connection((url.hostname or "", url.port or 443), PROBE_SECONDS).close()
    except OSError as err:
        return f"{url.hostname} unreachable: {err}"
    return None


def _offline_reason() -> str | None:
    from datasets import config

    if config.HF_HUB_OFFLINE:
        return "offline mode (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE)"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # a proxy may reach what a direct connection cannot: let the library try
    return _unreachable(config.HF_ENDPOINT)


def read_hub(repo: str, *, config: str | None = None, split: str | None = None,
             revision: str | None = None, cache_dir: str | os.PathLike[str] | None = None
             ) -> Rows:
    """A hub dataset through `datasets.load_dataset`: downloaded (and cached) when the hub can
    be reached, else read from the cache ($HF_DATASETS_CACHE, or cache_dir) as the library
    does in offline mode. HubUnavailable when neither works; ValueError for a missing split
    or config."""
    try:
        import datasets
        from datasets import config as settings
    except ImportError:
        raise HubUnavailable("the `datasets` library is not installed (pip install datasets)"
                             ) from None
    where = ", ".join(f"{k} {v}" for k, v in
                      (("config", config), ("split", split), ("revision", revision)) if v)
    origin = f"{repo} ({where})" if where else repo
    offline = _offline_reason()
    with _CACHE_ONLY:
        saved = settings.HF_HUB_OFFLINE
        settings.HF_HUB_OFFLINE = saved or offline is not None  # cache only
        try:
            found = datasets.load_dataset(repo, config, split=split, revision=revision,
                                          cache_dir=None if cache_dir is None else str(cache_dir))
        except (ConnectionError, FileNotFoundError) as err:  # not cached; absent, gated, private
            why = f"not in the datasets cache and {offline}" if offline else str(err)
            raise HubUnavailable(f"{origin}: {why}") from None
        except ValueError as err:  # a split or config the dataset does not have
            raise ValueError(f"{origin}: {err}".replace("\n", "; ")) from None
        finally:
            settings.HF_HUB_OFFLINE = saved
    return Rows(_one_split(found, split, origin), origin)
