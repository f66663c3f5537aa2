"""Equation drills for a PRM of the arithmetic task: the gold derivations' own step sentences,
each left right or given a slip, each labelled by whether its own arithmetic holds.

    drills = equation_drills(24_000, seed=40_010)
    drills[0].steps[0]   'Mia now has 58 / 2 = 29 apples.\\n\\n'     label 1.0
    drills[0].steps[1]   'Ana has 23 * 7 = 171 apples.\\n\\n'        label 0.0

Why: a PRM learned from Monte-Carlo labels alone is blind to arithmetic (on the policy's own
paths its scores tell a wrong "29 * 3 = 24" from a right step no better than chance): three
quarters of the policy's first errors are arithmetic slips, and the labels say only that
something went wrong somewhere. Drills say exactly which equation is wrong, thousands of
times a minute, at no sampling cost.

A drill path holds `steps` step sentences drawn from the gold solutions of generated problems
(levels LEVELS, generator seed `seed`: name it, and keep it apart from the seeds reported on).
A path is all right with probability `clean` (so the language-model loss, which reads only
paths that are right, sees right arithmetic); otherwise each step is slipped with probability
1/2. Labels are local: 1.0 where the step's own equation holds. The story (the prompt) is
empty: a slip is wrong whatever the story says.

The slips follow what the embedded policy writes when it errs (its first-error steps on the
development problems of generator seed 40,002, which nothing is reported on): three in four
of its wrong results are within 10 of the right one, most others differ from it in one
digit. SLIPS draws them in those shares.
"""

from __future__ import annotations

import random

from problems.arith import EQUATION, STEP_DELIMITER, generate
from training.prm_labels import LabelledPath

LEVELS = (3, 4, 5, 6, 7, 8)
SMALL = (1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10)  # |wrong - right| of a near miss
# (share, kind): a near miss, one digit changed, off by tens, anything in range
SLIPS = ((0.60, "near"), (0.25, "digit"), (0.08, "tens"), (0.07, "any"))


def slip(rng: random.Random, value: int) -> int:
    """A wrong result for an equation whose result is `value`: a non-negative integer !=
    value, of the kind SLIPS draws."""
    while True:
        kind = rng.choices([k for _, k in SLIPS], weights=[w for w, _ in SLIPS])[0]
        if kind == "near":
            wrong = value + rng.choice((-1, 1)) * rng.choice(SMALL)
        elif kind == "digit":
            digits = list(str(value))
            i = rng.randrange(len(digits))
            digits[i] = rng.choice("0123456789")
            if i == 0 and digits[0] == "0" and len(digits) > 1:
                continue  # "029" is not how a number is written
            wrong = int("".join(digits))
        elif kind == "tens":
            wrong = value + rng.choice((-1, 1)) * 10 * rng.randint(1, 9)
        else:
            wrong = rng.randint(2, 999)
        if wrong >= 0 and wrong != value:
            return wrong


def gold_steps(n: int, *, seed: int) -> list[tuple[str, tuple[int, str, int, int]]]:
    """(sentence, (a, op, b, c)) of every equation step of n problems per level in LEVELS."""
    out = []
    for level in LEVELS:
        for p in generate(n, seed=seed, difficulty=level):
            sentences = p.metadata["solution"].split(STEP_DELIMITER)
            out += list(zip(sentences, p.metadata["equations"]))  # the answer step has none
    return out


def equation_drills(n: int, *, seed: int, steps: int = 8, clean: float = 0.4
                    ) -> list[LabelledPath]:
    """n drill paths (module doc); the same (n, seed, steps, clean) give the same drills."""
    if n < 0 or steps < 1 or not 0 <= clean <= 1:
        raise ValueError(f"need n >= 0, steps >= 1 and 0 <= clean <= 1; got {n}, {steps}, "
                         f"{clean}")
    # levels 3-8 average ~5.5 equations a problem: ~2 pool equations for every 3 steps drawn
    pool = gold_steps(max(1, n * steps // (8 * len(LEVELS))), seed=seed)
    rng = random.Random(f"drills/{seed}")
    paths = []
    for i in range(n):
        right_path = rng.random() < clean
        texts, labels = [], []
        for _ in range(steps):
            sentence, (a, op, b, c) = rng.choice(pool)
            right = right_path or rng.random() < 0.5
            shown = c if right else slip(rng, c)
            texts.append(EQUATION.sub(f"{a} {op} {b} = {shown}", sentence, count=1)
                         + STEP_DELIMITER)
            labels.append(1.0 if right else 0.0)
        paths.append(LabelledPath(f"drill/s{seed}/{i}", "", "", tuple(texts), tuple(labels),
                                  all(labels)))
    return paths
