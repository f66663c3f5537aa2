"""Real model outputs for the grader corpus: `python -m reports.grader.samples` (CPU; long:
it runs the models over every sampled problem).

Decodes n whole solutions per problem from SmolLM2-135M (MATH-500 and GSM8K problems) and from
the embedded reasoner tiny-arith (its own generated problems) and writes one JSON line per
sample to tests/data/grader_samples.jsonl: id, model, problem id, the gold for generated
problems (benchmark golds are read from ../shared/data at test time, never stored), the text,
and `expected`, null until labelled; rows without a label stay out of the corpus. How the
committed file was labelled, by no grader: tiny-arith always ends "The answer is N." (its
trained format), so a sample is right when N is the gold; every SmolLM2 sample whose last 400
characters hold the gold's digits (20 of 192) was read by a person, and one states the gold
as its final answer; the other 172 never write the gold near their end. `--label` prints the
unlabelled lines.
"""

from __future__ import annotations

import json
import sys

from reports.grader.styles import SAMPLES
from search.cli import command

SEED = 18
MAX_TOKENS = 320


def sample(per_model: int, n: int, write) -> int:
    """n whole solutions per problem from each model, decoded in one batch per model (one
    expand step with no stop string: to EOS or MAX_TOKENS; best-of-n's step-by-step search is
    too slow here)."""
    import problems
    from problems import arith
    from search.engines.hf import HFEngine

    math = problems.load("math500", limit=per_model // 2, shuffle=True, seed=SEED)
    gsm = problems.load("gsm8k", limit=per_model // 2, shuffle=True, seed=SEED)
    jobs = {"smollm2-135m": (math + gsm, False),
            "tiny-arith": (arith.generate(per_model // 2, seed=SEED, difficulty=4), True)}
    count = 0
    for model, (batch, generated) in jobs.items():
        engine = HFEngine.load(model, device="cpu")
        roots = [engine.root(p) for p in batch for _ in range(n)]
        leaves = [kids[0] for kids in engine.expand(roots, 1, stop=None, max_tokens=MAX_TOKENS,
                                                    temperature=0.7, seed=SEED)]
        for k, (root, leaf) in enumerate(zip(roots, leaves)):
            p = root.problem
            text = "".join(step.text for step in leaf.steps())
            write({"id": f"sample/{model}/{p.id}/{k % n}", "model": model, "problem": p.id,
                   "gold": p.answer if generated else None, "text": text, "expected": None})
            count += 1
        print(f"{model}: {len(leaves)} samples", file=sys.stderr)
    return count


def main() -> None:
    parser = command("python -m reports.grader.samples", __doc__)
    parser.add_argument("--per-model", type=int, default=48, help="problems per model")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--label", action="store_true", help="print the unlabelled lines")
    args = parser.parse_args()
    if args.label:
        for line in SAMPLES.read_text().splitlines():
            row = json.loads(line)
            if row["expected"] is None:
                print(json.dumps({"id": row["id"], "tail": row["text"][-300:]}))
        return
    SAMPLES.parent.mkdir(exist_ok=True)
    with SAMPLES.open("w") as f:  # line by line, flushed: an interrupted run keeps its samples

        def write(row: dict) -> None:
            f.write(json.dumps(row) + "\n")
            f.flush()

        count = sample(args.per_model, args.n, write)
    print(f"wrote {count} samples to {SAMPLES}")


if __name__ == "__main__":
    main()
