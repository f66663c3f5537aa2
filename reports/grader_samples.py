"""Real model outputs for the grader corpus: `python -m reports.grader_samples` (minutes, CPU).

Samples best-of-n candidates from the embedded reasoner tiny-arith (its own generated
problems) and from SmolLM2-135M (MATH-500 and GSM8K problems), and writes one JSON line per
candidate to tests/data/grader_samples.jsonl: id, model, problem id, the gold for generated
problems (benchmark golds are read from ../shared/data at test time, never stored), the text,
and `expected`, which starts as null. A person then sets `expected` on every line (is the
final answer the gold?); `--label` prints each unlabelled line for that, and rows without a
label stay out of the corpus.
"""

from __future__ import annotations

import argparse
import json
import sys

from reports.grader_styles import SAMPLES

SEED = 18


def sample(per_model: int, n: int) -> list[dict]:
    import problems
    import search
    from problems import arith

    jobs = [("tiny-arith", p, p.answer) for p in arith.generate(per_model, seed=SEED, difficulty=4)]
    math = problems.load("math500", limit=per_model, shuffle=True, seed=SEED)
    gsm = problems.load("gsm8k", limit=per_model, shuffle=True, seed=SEED)
    jobs += [("smollm2-135m", p, None) for p in math + gsm]
    out = []
    for model, p, gold in jobs:
        result = search.solve(p, algo="best_of_n", engine=model, n=n, seed=SEED,
                              budget=search.Budget(tokens=400 * n), step_tokens=200, max_steps=8)
        for k, c in enumerate(result.candidates):
            out.append({"id": f"sample/{model}/{p.id}/{k}", "model": model, "problem": p.id,
                        "gold": gold, "text": c.text, "expected": None})
        print(f"{model} {p.id}: {len(result.candidates)} candidates", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-model", type=int, default=24)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--label", action="store_true", help="print the unlabelled lines")
    args = parser.parse_args()
    if args.label:
        for line in SAMPLES.read_text().splitlines():
            row = json.loads(line)
            if row["expected"] is None:
                print(json.dumps({"id": row["id"], "tail": row["text"][-300:]}))
        return
    rows = sample(args.per_model, args.n)
    SAMPLES.parent.mkdir(exist_ok=True)
    SAMPLES.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} samples to {SAMPLES}")


if __name__ == "__main__":
    main()
