"""problems.datasets on local data: every file format and saved folders give the JSONL
loader's Problems; field mapping; datasets of your own (math and code); clear errors."""

from __future__ import annotations

import json

import pytest
from dataset_files import (
    GSM8K,
    LOCAL,
    MATH500,
    same,
    save_folder,
    write_csv,
    write_jsonl,
    write_parquet,
)

import problems
from problems.datasets import parse_fields

pytest.importorskip("datasets", reason="the `datasets` library is not installed")


def _json_list(file, rows):
    file.write_text(json.dumps(rows))
    return file


def _json_columns(file, rows):
    file.write_text(json.dumps({k: [r[k] for r in rows] for k in rows[0]}))
    return file


WRITERS = {
    "parquet": lambda d, rows: write_parquet(d / "set.parquet", rows),
    "json-list": lambda d, rows: _json_list(d / "set.json", rows),
    "json-columns": lambda d, rows: _json_columns(d / "set.json", rows),
    "json-lines": lambda d, rows: write_jsonl(d / "set.json", rows),
    "saved": lambda d, rows: save_folder(d / "saved", rows),
    "saved-dict": lambda d, rows: save_folder(d / "saved", rows, split="test"),
}


@pytest.mark.parametrize("name", sorted(LOCAL))
@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_each_format_gives_the_jsonl_loaders_problems(name, fmt, tmp_path):
    rows = LOCAL[name]
    reference = problems.load(name, write_jsonl(tmp_path / "ref" / "set.jsonl", rows))
    assert len(reference) == len(rows)
    (tmp_path / fmt).mkdir()
    found = problems.load(name, WRITERS[fmt](tmp_path / fmt, rows))
    assert [same(p) for p in found] == [same(p) for p in reference]
    assert found[0].metadata["origin"].startswith(str(tmp_path / fmt))


def test_benchmark_files_in_a_data_folder(tmp_path, monkeypatch):
    """A data folder may hold KEY.jsonl (the shared names), KEY.parquet or a saved KEY/."""
    reference = [same(p) for p in problems.load("math500", write_jsonl(tmp_path / "a" /
                                                                       "math500.jsonl", MATH500))]
    write_parquet((tmp_path / "b").mkdir() or tmp_path / "b" / "math500.parquet", MATH500)
    save_folder(tmp_path / "c" / "math500", MATH500)
    for folder in ("a", "b", "c"):
        assert [same(p) for p in problems.load("math500", tmp_path / folder)] == reference
        monkeypatch.setenv(problems.DATA_ENV, str(tmp_path / folder))
        assert [same(p) for p in problems.load("math500")] == reference  # no hub copy cached


def test_gsm8k_answers_and_ids(tmp_path):
    found = problems.load("gsm8k", write_parquet(tmp_path / "g.parquet", GSM8K))
    assert [p.id for p in found] == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]
    assert [p.answer for p in found] == ["6", "1200", "14"]  # "1,200" loses its comma
    assert found[1].metadata["solution"] == "She has 600 + 600 = 1200."  # no <<calc>> markup


# -- datasets of your own -------------------------------------------------------------------
OWN = [{"question": "Tom has 4 pens and gets 5 more. How many pens?", "final": "9", "level": 1},
       {"question": "A box holds 12 eggs. How many in 3 boxes?", "final": "36", "level": 2},
       {"question": "Halve 1,000.", "final": "Half of 1,000 is 500.\n#### 500", "level": 2}]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "saved"])
def test_own_math_set_with_field_mapping(fmt, tmp_path):
    path = {"jsonl": lambda: write_jsonl(tmp_path / "mine.jsonl", OWN),
            "csv": lambda: write_csv(tmp_path / "mine.csv", OWN),
            "parquet": lambda: write_parquet(tmp_path / "mine.parquet", OWN),
            "saved": lambda: save_folder(tmp_path / "mine", OWN)}[fmt]()
    found = problems.load(str(path), fields={"problem": "question", "answer": "final"})
    assert [p.id for p in found] == ["mine/0", "mine/1", "mine/2"]
    assert [p.prompt for p in found] == [r["question"] for r in OWN]
    assert [p.answer for p in found] == ["9", "36", "500"]
    assert found[2].metadata["solution"] == "Half of 1,000 is 500."
    assert [p.metadata["level"] for p in found] == [1, 2, 2]  # CSV's "2" as an int
    assert {(p.domain, p.metadata["grader"], p.metadata["source"]) for p in found} == {
        ("math", "math", "mine")}


def test_own_code_tasks(tmp_path):
    rows = [{"problem": "def double(x):\n    \"\"\"Twice x.\"\"\"\n", "entry_point": "double",
             "tests": ["assert double(2) == 4", "assert double(-1) == -2"],
             "public_tests": "assert double(0) == 0", "id": "dbl"},
            {"problem": "def neg(x):\n    \"\"\"Minus x.\"\"\"\n", "entry_point": "neg",
             "tests": "assert neg(3) == -3", "id": "neg"}]
    first, second = problems.load(str(write_jsonl(tmp_path / "my.code.jsonl", rows)))
    assert (first.id, first.domain, first.answer) == ("my.code/dbl", "code", None)
    assert first.hidden_tests == ("assert double(2) == 4", "assert double(-1) == -2")
    assert first.tests == ("assert double(0) == 0",) and first.entry_point == "double"
    assert second.hidden_tests == ("assert neg(3) == -3",) and second.tests == ()
    assert first.metadata["grader"] == "code"


def test_parse_fields():
    assert parse_fields(["problem=question", " answer = final "]) == {
        "problem": "question", "answer": "final"}
    for bad in ("problem", "=question", "problem="):
        with pytest.raises(ValueError, match="FIELD=COLUMN"):
            parse_fields([bad])


# -- errors ---------------------------------------------------------------------------------
def test_missing_column_names_it_and_the_columns(tmp_path):
    file = write_jsonl(tmp_path / "mine.jsonl", OWN)
    with pytest.raises(ValueError, match=r"no column 'problem' \(columns: question, final, "
                                         r"level\); map one with --field problem=COLUMN"):
        problems.load(str(file))
    with pytest.raises(ValueError, match="no column 'answer' or 'tests'"):
        problems.load(str(file), fields={"problem": "question"})
    with pytest.raises(ValueError, match="no column 'gold' to read 'answer' from"):
        problems.load(str(file), fields={"problem": "question", "answer": "gold"})
    parquet = write_parquet(tmp_path / "m.parquet", [{k: v for k, v in r.items() if k != "level"}
                                                     for r in MATH500])
    with pytest.raises(ValueError, match=r"m.parquet: no column 'level'"):
        problems.load("math500", parquet)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_malformed_row_is_named_by_its_number(fmt, tmp_path):
    rows = [dict(r) for r in GSM8K]
    rows[1]["answer"] = "no final line"
    write = {"jsonl": write_jsonl, "parquet": write_parquet, "csv": write_csv}[fmt]
    file = write(tmp_path / f"g.{fmt}", rows)
    with pytest.raises(ValueError, match=r"g\.\w+: row 2 is malformed \(a GSM8K answer ends "
                                         r"with a '#### N' line"):
        problems.load("gsm8k", file)
    own = [{"problem": "ok?", "answer": "1"}, {"problem": "fine", "answer": "2"},
           {"problem": "bad", "answer": [1, 2]}]
    with pytest.raises(ValueError, match=r"row 3 is malformed \('answer' must be text or a "
                                         "number, got list"):
        problems.load(str(write_jsonl(tmp_path / "own.jsonl", own)))
    with pytest.raises(ValueError, match=r"row 2 lacks the field 'answer'"):
        problems.load(str(write_jsonl(tmp_path / "own2.jsonl", [own[0], {"problem": "x"}])))
    with pytest.raises(ValueError, match=r"row 2 is malformed \('problem' must be text, got "
                                         "int"):
        problems.load(str(write_jsonl(tmp_path / "own3.jsonl",
                                      [own[0], {"problem": 5, "answer": "5"}])))


def test_repeated_ids_are_refused(tmp_path):
    rows = [{"problem": "a", "answer": "1", "id": 7}, {"problem": "b", "answer": "2", "id": 7}]
    with pytest.raises(ValueError, match=r"problem ids repeat \(dup/7\)"):
        problems.load(str(write_jsonl(tmp_path / "dup.jsonl", rows)))


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".json"])
def test_non_utf8_file_is_an_error_naming_the_line(suffix, tmp_path):
    file = tmp_path / f"latin{suffix}"
    text = {".jsonl": '{"problem": "ok", "answer": "1"}\n{"problem": "caf\xe9", "answer": "2"}\n',
            ".csv": "problem,answer\nok,1\ncaf\xe9,2\n",
            ".json": '[{"problem": "ok", "answer": "1"},\n{"problem": "caf\xe9", "answer": "2"}]'}
    file.write_bytes(text[suffix].encode("latin-1"))
    line = 3 if suffix == ".csv" else 2  # the file's line, the header included
    with pytest.raises(ValueError, match=rf"latin{suffix}:{line}: not UTF-8 text \(byte 0xe9 at "
                                         r"column \d+\); save the file as UTF-8"):
        problems.load(str(file))


def test_bad_paths_and_names(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or directory: .*nowhere.jsonl"):
        problems.load(str(tmp_path / "nowhere.jsonl"))
    with pytest.raises(FileNotFoundError, match="gsm8k: no such file or directory"):
        problems.load("gsm8k", tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="unknown file type"):
        problems.load(str(tmp_path / "notes.txt"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not one written by save_to_disk"):
        problems.load(str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        (tmp_path / "torn.parquet").write_bytes(b"PAR1 not really")
        problems.load(str(tmp_path / "torn.parquet"))
    file = write_jsonl(tmp_path / "mine.jsonl", OWN)
    with pytest.raises(ValueError, match="has no splits"):
        problems.load(str(file), split="test", fields={"problem": "question", "answer": "final"})
    with pytest.raises(ValueError, match="is not a short name .path= / --data goes with one"):
        problems.load(str(file), tmp_path)


def test_saved_dataset_dict_splits(tmp_path):
    import datasets

    folder = tmp_path / "two"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(OWN[:1]),
                          "test": datasets.Dataset.from_list(OWN[1:])}).save_to_disk(str(folder))
    fields = {"problem": "question", "answer": "final"}
    assert [p.answer for p in problems.load(str(folder), split="test", fields=fields)] == [
        "36", "500"]
    with pytest.raises(ValueError, match="has several splits; name one of: test, train"):
        problems.load(str(folder), fields=fields)
    with pytest.raises(ValueError, match="has no split 'validation'; name one of: test, train"):
        problems.load(str(folder), split="validation", fields=fields)


def test_own_numeric_answers_read_as_text(tmp_path):
    rows = [{"problem": "a?", "answer": 9}, {"problem": "b?", "answer": 2.0},
            {"problem": "c?", "answer": 0.5}, {"problem": "d?", "answer": " 1,5 "}]
    found = problems.load(str(write_jsonl(tmp_path / "n.jsonl", rows)))
    assert [p.answer for p in found] == ["9", "2", "0.5", "1,5"]  # only "####" finals lose commas
