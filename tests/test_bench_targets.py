"""The engine's figures-of-merit command (reports.bench.targets): its line count is
checked on a file counted by hand, and its command line refuses what it cannot run."""

from __future__ import annotations

from kernel_mark import needs_kernel

from reports.bench import targets

SOURCE = '''"""A module docstring
over two lines."""

import os  # a comment


def f(x):
    """Its docstring."""
    # a comment line
    y = (x +
         1)
    return y  # trailing comment


class C:
    """One line."""

    z = """not a docstring:
    a string value"""
'''


def test_code_lines_leave_out_docstrings_comments_and_blank_lines(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    # import, def, y = (2 lines), return, class, z = (2 lines): 8
    assert targets.code_lines(path) == 8
    cpp = tmp_path / "k.cpp"
    cpp.write_text("// a comment\n#include <vector>\n\nint f() {  // trailing\n  return 1;\n}\n")
    assert targets.code_lines(cpp) == 4


def test_lines_counts_the_core_and_finds_no_module_level_scheduler():
    import re

    line, by_feature = targets.lines()
    assert "search/runtime, search/engines/hf" in line
    assert line.endswith("modules holding a Scheduler: none")
    # the features' files are the core's, and the breakdown adds up to the total
    assert all((targets.ROOT / f).is_file() for fs in targets.FEATURES.values() for f in fs)
    total = int(re.search(r"([\d,]+) of code", line)[1].replace(",", ""))  # type: ignore[index]
    parts = [int(n.replace(",", "")) for n in re.findall(r" ([\d,]+)(?:;|$)", by_feature)]
    assert len(parts) == len(targets.FEATURES) + 1 and sum(parts) == total


def test_unknown_parts_are_refused(capsys):
    assert targets.main(["--parts", "bytes,speed"]) == 2
    assert "unknown parts ['speed']" in capsys.readouterr().err


def test_a_grid_of_no_pairs_is_refused(capsys):
    assert targets.main(["--parts", "grid", "--grid-pairs", "0"]) == 2
    assert "--grid-pairs must be at least 1, got 0" in capsys.readouterr().err


def test_old_without_a_checkout_is_skipped_not_guessed(capsys, monkeypatch):
    monkeypatch.setattr(targets, "lines", lambda: ["counted"])
    assert targets.main(["--parts", "old,lines"]) == 0
    out = capsys.readouterr().out
    assert "old: skipped (give --old PATH" in out and "counted" in out


@needs_kernel
def test_layers_replays_the_merged_forwards_of_the_grid_each_way():
    import torch

    from reports.bench import layers
    from search.runtime.kvpool import BLOCK

    forwards = layers.capture(1, every=1, skip=0, keep=3)
    assert forwards, "the grid at concurrency 16 ran merged forwards on one thread"
    for a in forwards:
        f = layers.named(a)
        rows, q, owns = f["rows"], f["q"], f["owns"]
        assert len(rows) == len(q) == len(owns) >= 1 and min(rows) >= 1
        with torch.inference_mode():  # (as the lanes run it)
            # the stand-in for attention keeps the residual stream's shape
            assert layers._without_attention(a).shape == a[0].shape
    ms = layers.replay(forwards, repeats=1)
    assert set(ms) == {"whole", "no attention", "attention"}
    assert all(0 < v < float("inf") for v in ms.values())
    # the paths read through block tables; for a kernel that takes parts (an old one's): a
    # part a block, the same columns, each row's own blocks copied into its slab
    for a in forwards:
        f = layers.named(a)
        g = layers.as_parts(f)
        assert f["tables"] and not g["tables"] and not g["owns"]
        filled = {(i, e[0]): e[1] for i, t in enumerate(f["tables"])
                  for e in t.view(-1, 2).tolist() if e[0] >= 0}
        assert sum(kv.shape[3] for kv in g["parts"]) == sum(filled.values())
        assert all(kv.shape[3] <= BLOCK for kv in g["parts"])
        assert len(g["part_start"]) == len(f["rows"]) + 1
        C = f["pool"][0].shape[0]
        for i, (table, own) in enumerate(zip(f["tables"], f["owns"])):
            span = range(g["part_start"][i], g["part_start"][i + 1])
            for b in range(f["rows"][i]):  # a slot's parts: its table's blocks, in order
                want = [f["pool"][e // C][e % C, ..., :fill, :]
                        for e, fill in table[b].tolist() if e >= 0]
                got = [g["parts"][j] for j in span
                       if not len(g["readers"][j]) or b in g["readers"][j].tolist()]
                assert len(got) == len(want) and all(map(torch.equal, got, want))
                # its own blocks' written columns, copied into its slab
                w = f["n"][i] + f["q"][i]  # (past them: never written, empty memory)
                mine = torch.cat([f["pool"][e // C][e % C] for e in own[b].tolist()], 3)
                assert torch.equal(g["slabs"][i][:, :, b, :, :w], mine[:, :, :, :w])


@needs_kernel
def test_an_old_kernel_is_timed_beside_this_one_its_bits_compared(tmp_path):
    """--parts layers --old PATH: PATH's attend.cpp built beside this checkout's; here a copy
    of this one's (the same bits) and one whose scores are scaled by 1.0001 (not)."""
    import torch

    from reports.bench import layers
    from search.runtime import kernel

    forwards = layers.capture(1, every=1, skip=0, keep=2)
    src = tmp_path / "search" / "runtime" / "attend.cpp"
    src.parent.mkdir(parents=True)
    src.write_text(kernel.SOURCE.read_text())
    op = layers.old_attend(src)
    ms = layers.replay(forwards, repeats=1, old=op)
    assert 0 < ms["attention, old kernel"] < float("inf")
    line = layers.against_old(forwards, op, ms, "copy")
    assert line.startswith("attention kernel against copy's, side by side:")
    assert line.endswith("bits the same: True")
    with torch.inference_mode():  # (the op named after its source: a changed one rebuilt)
        src.write_text(kernel.SOURCE.read_text().replace("out[j] *= scale;",
                                                         "out[j] *= scale * 1.0001f;"))
        other = layers.old_attend(src)
        assert layers.against_old(forwards, other, ms, "other").endswith("bits the same: False")


@needs_kernel
def test_groups_times_grouped_attention_against_a_copy_of_the_keys_per_head():
    import torch

    from reports.bench import layers

    qk, args = layers.decode_call(6, 2, 16)
    own_qk, own = layers.own_copies(qk, 6, 2, args)
    assert args[4][0].shape[3] == 2 and own[4][0].shape[3] == 6  # every query head its own copy
    assert torch.equal(layers.attend(qk, 6, 2, args), layers.attend(own_qk, 6, 6, own))
    [line] = layers.groups(repeats=1, calls=1)
    assert "bits the same: True" in line
    assert all(f"{name} ({H}/{KV} heads, d {d})" in line for H, KV, d, name in layers.GROUPS)


def test_grid_prints_the_median_pair_and_every_pair(monkeypatch):
    """--grid-pairs N: the pair of median ratio (the lower one of an even count) is printed,
    with each pair's ratio in run order; rows count as identical only if every pair's are."""
    from reports.bench import eval as bench_eval

    runs = iter([(3.9, 100.0, True), (4.3, 86.0, True), (4.1, 82.0, False)])

    folders = []

    def fake_compare(name, grid, tmp, n, **setup):
        assert tmp not in folders, "each pair in a fresh folder (a grid resumes its rows)"
        folders.append(tmp)
        ratio, c1, same = next(runs)
        return {"ratio": ratio, "c1": c1, "cn": c1 / ratio, "identical": same}

    monkeypatch.setattr(bench_eval, "tiny_arith", lambda limit, kv=None: (None, {}))
    monkeypatch.setattr(bench_eval, "compare", fake_compare)
    (line,) = targets.grid(4, pairs=3)
    assert "aim >= 4x): 4.10x wall (82.0 s vs 20.0 s; median of 3 pairs: 3.90x, 4.30x, 4.10x)" \
        in line
    assert "rows identical: False" in line
    runs = iter([(4.3, 86.0, True), (3.9, 78.0, True)])
    folders.clear()
    (line,) = targets.grid(4, pairs=2)
    assert "3.90x wall (78.0 s vs 20.0 s; median of 2 pairs: 4.30x, 3.90x), rows identical: " \
        "True" in line
