"""Benchmark of the math grader (verifiers.math.verify): speed, and agreement with math-verify.

    python -m reports.bench.grader                    # MATH-500 timing + the differential corpus
    python -m reports.bench.grader --reference        # also time math-verify on the same candidates
    python -m reports.bench.grader --math-verify-tests DIR   # agreement on math-verify's own tables

1. Speed: 500 MATH-500 candidates (one per problem: its reference solution, the gold in a
   model-style sentence, or a wrong answer, picked by problem id) graded one after another in
   a fresh process, worker start-up included; total, median and slowest call.
2. The differential corpus (reports/grader/corpus.py): false positives and negatives against
   how each row was built, and agreement with math-verify's recorded verdicts.
3. The classes of model conclusion (tests/data/extract_classes.jsonl and its held-out table
   extract_held_out.jsonl: other languages, checks, refusals, hedges, number words, Unicode and
   regional number forms, units, mixed numbers, choices, markup; and the abstention rounds
   extract_unread_round*.jsonl: 28 more languages, prose algebra, decimal commas, repeating
   decimals, tables, negated boxes, bold answers with an aside, percents, cut-off texts,
   few-shot run-ons, unknown scripts): false positives and negatives per class, and the
   verdicts left unread (counted apart: an unread right output is also a false negative);
   with --reference, math-verify's on the same verdicts; with --guess, the grader reading
   the last statement where it would abstain.
4. Hostile answers (PATHOLOGICAL: towers of powers, 100,000 characters, deep nesting): the
   slowest verify against its timeout. Each makes at most one worker call, killed at the
   timeout (tests/test_verifiers_math.py checks that count); this times the in-process rest.
5. --math-verify-tests DIR: the gold/prediction tables of math-verify's own test files (the
   tests/ folder of `pip download math-verify==0.9.0 --no-binary :all:`), read at run time
   (nothing of them is stored here): how often `verify` gives the verdict they expect.
"""

from __future__ import annotations

import ast
import json
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reports.grader.corpus import BOXED, PROSE, Row, build, math_verify_verdicts, pick
from reports.grader.corpus_rows import last_digit
from search.cli import command

# predictions built to be slow or huge, each graded against "x^2+1"
PATHOLOGICAL = (
    "9^9^9^9", "9^{9^{9^{9}}}", "10**10**10", "10^{10^{10}}", "2^" * 300 + "2",
    "1" * 100_000, "(" * 50_000 + ")" * 50_000, r"\boxed{" * 20_000, "x" * 100_000,
    "(x+1)^{5000}",  # accepted by the size check, too slow to expand: the worker is killed
    "{" * 400 + "x" + "}" * 400, "1+" * 499 + "1", "100000!", r"\frac{" * 500,
    r"\boxed{1}" * 20_000, "".join(rf"\boxed{{{k}}}" for k in range(5000)),
    "Step: $x_1$ is 3 and 4. " * 5000, "$$" * 30_000,
)  # fmt: skip
PATHOLOGICAL_TIMEOUT = 1.0


def math500_candidates() -> list[tuple[str, str]]:
    """(gold, candidate solution) for each MATH-500 problem."""
    import problems

    out = []
    for p in problems.load("math500"):
        gold = str(p.answer)
        kind = pick(p.id + "bench", ["solution", "boxed", "prose", "wrong"])
        if kind == "solution":
            text = str(p.metadata["solution"])
        elif kind == "wrong" and last_digit(gold):
            text = pick(p.id, BOXED)(last_digit(gold))  # type: ignore[operator]
        else:
            text = pick(p.id, BOXED if kind == "boxed" else PROSE)(gold)  # type: ignore[operator]
        out.append((gold, text))
    return out


def timed(fn, pairs: list[tuple[str, str]]) -> tuple[float, list[float], list]:
    start, times, verdicts = time.perf_counter(), [], []
    for gold, text in pairs:
        t = time.perf_counter()
        verdicts.append(fn(gold, text))
        times.append(time.perf_counter() - t)
    return time.perf_counter() - start, times, verdicts


def speed(reference: bool) -> None:
    from verifiers.math import verify, worker_startup_seconds

    pairs = math500_candidates()
    total, times, verdicts = timed(verify, pairs)
    startup = worker_startup_seconds()
    print(f"MATH-500: {len(pairs)} candidates graded in {total:.2f} s (fresh process, worker "
          f"start-up included: {startup:.2f} s); median call {statistics.median(times) * 1e3:.2f} "
          f"ms, slowest {max(times):.2f} s (call #{times.index(max(times)) + 1}), next slowest "
          f"{sorted(times)[-2]:.3f} s; {sum(v.correct for v in verdicts)} correct; "
          f"{sum('timed out' in v.reason for v in verdicts)} timed out")
    again, times2, _ = timed(verify, pairs)
    print(f"MATH-500 again (warm workers, parses cached): {again:.2f} s; median "
          f"{statistics.median(times2) * 1e3:.2f} ms, slowest {max(times2):.3f} s")
    if reference:
        from reports.grader.corpus import reference_verdict

        ref, rtimes, _ = timed(reference_verdict, pairs)
        print(f"math-verify in-process on the same candidates: {ref:.2f} s (median "
              f"{statistics.median(rtimes) * 1e3:.2f} ms); ratio ours (fresh process, start-up "
              f"included) / math-verify: {total / ref:.2f}")


def pathological() -> None:
    """The slowest hostile answer's verify, against its timeout (warm workers)."""
    from verifiers.math import verify

    verify("x^2+1", "1+x^2")  # a warm worker: its start-up is no call's
    _, times, verdicts = timed(lambda g, p: verify(g, p, timeout=PATHOLOGICAL_TIMEOUT),
                               [("x^2+1", p) for p in PATHOLOGICAL])
    k = times.index(max(times))
    print(f"hostile answers: {len(times)}, slowest {times[k]:.2f} s = "
          f"{times[k] / PATHOLOGICAL_TIMEOUT:.2f}x the timeout of {PATHOLOGICAL_TIMEOUT:g} s "
          f"({PATHOLOGICAL[k][:20]!r}: {verdicts[k].reason}); median "
          f"{statistics.median(times) * 1e3:.1f} ms; {sum(v.correct for v in verdicts)} correct")


def corpus() -> None:
    from verifiers.math import verify

    rows = build()
    record = math_verify_verdicts(rows)

    def run(row: Row):
        t = time.perf_counter()
        return verify(row.gold, row.prediction), time.perf_counter() - t

    start = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        out = list(pool.map(run, rows))
    wall = time.perf_counter() - start
    times = [t for _, t in out]
    fp = [r for r, (v, _) in zip(rows, out) if v.correct and not r.expected]
    fn = [r for r, (v, _) in zip(rows, out) if not v.correct and r.expected]
    both = [(r, v) for r, (v, _) in zip(rows, out) if r.id in record]
    differ = [(r, v) for r, v in both if v.correct != record[r.id]]
    mv_fp = sum(record[r.id] and not r.expected for r, _ in both)
    mv_fn = sum(not record[r.id] and r.expected for r, _ in both)
    print(f"corpus: {len(rows)} rows in {wall:.1f} s (4 threads); median call "
          f"{statistics.median(times) * 1e3:.2f} ms, slowest {max(times):.2f} s")
    print(f"  this grader: {len(fp)} false positives, {len(fn)} false negatives")
    print(f"  math-verify (recorded): {mv_fp} false positives, {mv_fn} false negatives")
    print(f"  agreement with math-verify: {len(both) - len(differ)}/{len(both)} = "
          f"{(len(both) - len(differ)) / max(1, len(both)):.2%}")
    ordinary = [(r, v) for r, v in both if not r.kind.startswith("family:")]
    agree = sum(v.correct == record[r.id] for r, v in ordinary)
    print(f"  on ordinary output (parts a, b): {agree}/{len(ordinary)} = {agree / max(1, len(ordinary)):.2%}")
    families = [(r, v) for r, v in both if r.kind.startswith("family:")]
    print(f"  how models conclude (part c, {len(families)} rows): this grader "
          f"{sum(v.correct and not r.expected for r, v in families)} FP / "
          f"{sum(not v.correct and r.expected for r, v in families)} FN; math-verify "
          f"{sum(record[r.id] and not r.expected for r, _ in families)} FP / "
          f"{sum(not record[r.id] and r.expected for r, _ in families)} FN")
    print("  disagreements by kind (ours):", dict(Counter(f"{r.kind}:{v.correct}" for r, v in differ)))
    for r in fp + fn:
        print("  WRONG", r.id, r.expected, repr(r.prediction[-100:]))


def class_tables() -> list[str]:
    """The names of the class tables in tests/data, the abstention rounds last."""
    from reports.grader.corpus_rows import TESTS_DATA

    rounds = sorted(p.stem for p in TESTS_DATA.glob("extract_unread_round*.jsonl"))
    return ["extract_classes", "extract_held_out", *rounds]


def classes(reference: bool, guess: bool = False) -> None:
    """False positives / negatives per class on the class tables (see the module docstring)."""
    from reports.grader.corpus import reference_verdict
    from reports.grader.corpus_rows import TESTS_DATA
    from verifiers.math import verify

    tables = class_tables()
    rows = []  # (table, class, gold, prediction, expected)
    for table in tables:
        for line in (TESTS_DATA / f"{table}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows += [(table, row["family"], g, row["prediction"], g in row["right"])
                     for g in (*row["right"], *row["wrong"])]
    times, tally = [], Counter()
    for table, family, gold, prediction, expected in rows:
        t = time.perf_counter()
        verdict = verify(gold, prediction, guess=guess)
        correct = verdict.correct
        times.append(time.perf_counter() - t)
        tally[(table, family, "n")] += 1
        tally[(table, family, "right")] += expected
        tally[(table, family, "fp")] += correct and not expected
        tally[(table, family, "fn")] += expected and not correct
        tally[(table, family, "unread")] += verdict.unread is not None
        if reference:
            mv = reference_verdict(gold, prediction)
            tally[(table, family, "mv fp")] += mv and not expected
            tally[(table, family, "mv fn")] += expected and not mv
    print(f"classes{' (guess: no abstention)' if guess else ''}: {len(rows)} verdicts, median call "
          f"{statistics.median(times) * 1e3:.2f} ms")
    for table in tables:
        families = sorted({f for t, f, k in tally if t == table})
        for family in families:
            n, fp, fn, unread = (tally[(table, family, k)] for k in ("n", "fp", "fn", "unread"))
            mv = (f"; math-verify {tally[(table, family, 'mv fp')]} FP / {tally[(table, family, 'mv fn')]} FN"
                  if reference else "")
            print(f"  {table:22s} {family:21s} {n:4d} verdicts: {fp} FP / {fn} FN, {unread} unread{mv}")
        total = {k: sum(tally[(table, f, k)] for f in families) for k in ("n", "right", "fp", "fn", "unread")}
        print(f"  {table:22s} {'all':21s} {total['n']:4d} verdicts ({total['right']} right): {total['fp']} FP / "
              f"{total['fn']} FN ({total['fn'] / max(1, total['right']):.1%} of right), {total['unread']} unread")


def math_verify_tables(folder: Path) -> None:
    """math-verify's parametrized (gold, pred, expected) tables, with its default options."""
    from verifiers.math import verify

    rows = []
    for file in sorted(folder.glob("test_*.py")):
        for fn in ast.parse(file.read_text()).body:
            if not isinstance(fn, ast.FunctionDef) or "compare_strings" not in ast.unparse(fn):
                continue
            for dec in fn.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                    continue
                names = [n.strip() for n in ast.literal_eval(dec.args[0]).split(",")]
                try:
                    values = ast.literal_eval(dec.args[1])
                except ValueError:  # a table built by code (f-strings): not a literal table
                    continue
                for v in values:
                    row = dict(zip(names, v))
                    if row.get("strict", True) and not row.get("allow_set_relation_comp", False):
                        rows.append((f"{file.stem}::{fn.name}", row["gold"], row["pred"],
                                     bool(row["expected"])))
    verdicts = [verify(g, p).correct for _, g, p, _ in rows]
    agree = sum(v == e for v, (*_, e) in zip(verdicts, rows))
    fp = sum(v and not e for v, (*_, e) in zip(verdicts, rows))
    print(f"math-verify's tables: {agree}/{len(rows)} = {agree / max(1, len(rows)):.2%} agree; "
          f"{fp} accepted where they expect a rejection")
    for v, (name, g, p, e) in zip(verdicts, rows):
        if v != e:
            print("  differs", name, e, json.dumps(g)[:70], json.dumps(p)[-70:])


def main() -> None:
    parser = command("python -m reports.bench.grader", __doc__)
    parser.add_argument("--reference", action="store_true", help="also time math-verify")
    parser.add_argument("--math-verify-tests", type=Path, help="math-verify's tests/ folder")
    parser.add_argument("--skip-corpus", action="store_true")
    parser.add_argument("--guess", action="store_true",
                        help="also grade the class tables without abstention (verify(guess=True))")
    args = parser.parse_args()
    speed(args.reference)
    pathological()
    if not args.skip_corpus:
        corpus()
    classes(args.reference)
    if args.guess:
        classes(False, guess=True)
    if args.math_verify_tests:
        math_verify_tables(args.math_verify_tests)


if __name__ == "__main__":
    main()
