r"""Seeded multi-step arithmetic word problems with a gold solution in one parseable format.

    problems = generate(500, seed=1, difficulty=5)
    generate(2, seed=1, difficulty=3)[1].prompt
        'Mia has 5 boxes with 8 apples in each box. Mia is 47 years old. Ana has 17 fewer
         apples than Mia. Ivy has 7 times as many apples as Ana. How many apples does Ivy
         have now?'
    generate(2, seed=1, difficulty=3)[1].metadata["solution"]
        'Mia has 5 * 8 = 40 apples.\n\nAna has 40 - 17 = 23 apples.\n\n'
        'Ivy has 23 * 7 = 161 apples.\n\nThe answer is 161.'

Each story tracks one running quantity through `difficulty` operations (+, -, * and exact /),
sometimes handing it to a new person ("Leo has 3 times as many shells as Tom"), with one or
two distractor sentences whose numbers do not matter. The solution has one step per
operation, steps separated by STEP_DELIMITER; a step is a short sentence with exactly one
equation "a op b = c" (matching EQUATION) and no other number; the last step is
"The answer is N.". Every value is an integer in [2, MAX_VALUE], so nothing is negative,
fractional or singular ("1 apples").
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable

from problems.levels import check_request
from search.types import Problem

STEP_DELIMITER = "\n\n"
EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
DEFAULT_DIFFICULTY = 5  # operations per problem; 2-4 are easy for a tiny character model
MIN_DIFFICULTY, MAX_DIFFICULTY = 1, 12
MAX_VALUE = 999  # intermediate results stay within three digits

NAMES = ("Tom", "Mia", "Sam", "Ana", "Ben", "Lily", "Max", "Zoe", "Leo", "Emma", "Noah", "Ivy",
         "Omar", "Rosa", "Jack", "Nina")
OBJECTS = ("apples", "marbles", "stickers", "pencils", "cookies", "books", "coins", "shells",
           "cards", "stamps", "beads", "toys", "eggs", "balloons")

# (story sentence, solution sentence) per operation. {h}: who holds the quantity before the
# step; {n}: a new holder afterwards; {o}: a bystander; {a} op {b} = {c}; {obj}: the objects.
SAME_HOLDER: dict[str, tuple[tuple[str, str], ...]] = {
    "+": (("{h} buys {b} more {obj}.", "{h} now has {a} + {b} = {c} {obj}."),
          ("{h} finds {b} more {obj}.", "{h} now has {a} + {b} = {c} {obj}."),
          ("{o} gives {h} {b} {obj}.", "{h} now has {a} + {b} = {c} {obj}.")),
    "-": (("{h} gives {b} {obj} to {o}.", "{h} now has {a} - {b} = {c} {obj}."),
          ("{h} loses {b} {obj}.", "{h} now has {a} - {b} = {c} {obj}."),
          ("{h} sells {b} {obj}.", "{h} now has {a} - {b} = {c} {obj}.")),
    "*": (("{h} ends up with {b} times as many {obj} as before.",
           "{h} now has {a} * {b} = {c} {obj}."),),
    "/": (("{h} packs the {obj} into {b} equal bags and keeps one bag.",
           "{h} now has {a} / {b} = {c} {obj}."),
          ("{h} splits the {obj} into {b} equal piles and keeps one pile.",
           "{h} now has {a} / {b} = {c} {obj}.")),
}
NEW_HOLDER: dict[str, tuple[tuple[str, str], ...]] = {
    "+": (("{n} has {b} more {obj} than {h}.", "{n} has {a} + {b} = {c} {obj}."),),
    "-": (("{n} has {b} fewer {obj} than {h}.", "{n} has {a} - {b} = {c} {obj}."),),
    "*": (("{n} has {b} times as many {obj} as {h}.", "{n} has {a} * {b} = {c} {obj}."),),
    "/": (("{h} splits the {obj} into {b} equal shares and {n} gets one share.",
           "{n} has {a} / {b} = {c} {obj}."),),
}
START = "{h} has {a} {obj}."
START_PRODUCT = ("{h} has {a} boxes with {b} {obj} in each box.", "{h} has {a} * {b} = {c} {obj}.")
QUESTION = "How many {obj} does {h} have now?"
ANSWER = "The answer is {c}."
# Irrelevant facts. {d}: a person outside the story, or its first holder; {k}: any number.
DISTRACTORS = ("{d} is {k} years old.", "{d} has {k} {other}.", "{d} reads {k} pages of a book.",
               "It takes {d} {k} minutes to walk to school.", "{d} has {k} {obj} at home.",
               "The store is {k} meters from the park.")

_TEMPLATES = [START, START_PRODUCT[0], START_PRODUCT[1], QUESTION, ANSWER, *DISTRACTORS,
              *(t for table in (SAME_HOLDER, NEW_HOLDER) for ts in table.values()
                for pair in ts for t in pair)]
# Every character a prompt or solution can contain, for a character-level tokenizer.
ALPHABET = "".join(sorted(
    set("".join(re.sub(r"\{\w+\}", "", t) for t in _TEMPLATES))
    | set("".join(NAMES + OBJECTS)) | set(string.digits) | set(" \n+-*/=")))

_APPLY: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b,
    "*": lambda a, b: a * b, "/": lambda a, b: a // b,
}


def generate(n: int, *, seed: int = 0, difficulty: int = DEFAULT_DIFFICULTY) -> list[Problem]:
    """n problems of `difficulty` operations each. Problem i depends only on (seed,
    difficulty, i): generate(10) starts with generate(5), and an id regenerates its problem."""
    check_request(n, difficulty, MIN_DIFFICULTY, MAX_DIFFICULTY, "operations")
    return [_problem(seed, difficulty, i) for i in range(n)]


def _problem(seed: int, difficulty: int, index: int) -> Problem:
    # A string seed is hashed with SHA-512, so it is stable across runs and platforms.
    rng = random.Random(f"arith/{seed}/{difficulty}/{index}")
    names = list(NAMES)
    rng.shuffle(names)  # names.pop() hands out people who have not appeared yet
    obj = rng.choice(OBJECTS)
    holder = first = names.pop()
    story: list[str] = []
    steps: list[str] = []
    equations: list[tuple[int, str, int, int]] = []

    def record(sentence: str, step: str, a: int, op: str, b: int, c: int, **who: str) -> None:
        fill = {"a": str(a), "b": str(b), "c": str(c), "obj": obj, **who}
        story.append(sentence.format(**fill))
        steps.append(step.format(**fill))
        equations.append((a, op, b, c))

    if rng.random() < 0.3:  # start from a product: "3 boxes with 12 apples in each box"
        a, b = rng.randint(2, 9), rng.randint(2, 12)
        value = a * b
        record(*START_PRODUCT, a, "*", b, value, h=holder)
    else:
        value = rng.randint(8, 60)
        story.append(START.format(h=holder, a=value, obj=obj))

    bystanders: list[str] = []  # people who give or receive; they never hold the quantity
    while len(equations) < difficulty:
        op, b = operation(rng, value)
        c = apply(value, op, b)
        if rng.random() < 0.35:
            sentence, step = rng.choice(NEW_HOLDER[op])
            new = names.pop()
            record(sentence, step, value, op, b, c, h=holder, n=new)
            holder = new
        else:
            sentence, step = rng.choice(SAME_HOLDER[op])
            if "{o}" in sentence and (not bystanders or rng.random() < 0.5):
                bystanders.append(names.pop())
            record(sentence, step, value, op, b, c, h=holder,
                   o=rng.choice(bystanders) if bystanders else "")
        value = c

    # Distractors go anywhere after the opening sentence and never touch the quantity. One
    # about the story's objects must be about an outsider, or it would contradict the story.
    others = [o for o in OBJECTS if o != obj]
    for _ in range(rng.randint(1, 2)):
        text = rng.choice(DISTRACTORS)
        who = names.pop() if "{obj}" in text or rng.random() < 0.5 else first
        text = text.format(d=who, k=rng.randint(2, 60), obj=obj, other=rng.choice(others))
        story.insert(rng.randint(1, len(story)), text)
    story.append(QUESTION.format(obj=obj, h=holder))
    steps.append(ANSWER.format(c=value))
    return Problem(
        prompt=" ".join(story),
        id=f"arith/d{difficulty}/s{seed}/{index}",
        answer=str(value),
        domain="math",
        metadata={"solution": STEP_DELIMITER.join(steps), "equations": tuple(equations),
                  "difficulty": difficulty, "seed": seed, "index": index,
                  "source": "arith", "grader": "math"},
    )


def apply(a: int, op: str, b: int) -> int:
    """a op b, with / exact (operation only draws divisors)."""
    return _APPLY[op](a, b)


def holds(a: int, op: str, b: int, c: int) -> bool:
    """Whether "a op b = c" is right arithmetic, whoever wrote it: a division only when
    exact ("58 / 4 = 14" is wrong; so is any division by 0)."""
    if op == "/":
        return b != 0 and b * c == a
    return _APPLY[op](a, b) == c


def operation(rng: random.Random, a: int) -> tuple[str, int]:
    """A random operation and operand that keep the result an integer in [2, MAX_VALUE]."""
    choices: dict[str, list[int]] = {
        "+": list(range(2, min(60, MAX_VALUE - a) + 1)),
        "-": list(range(2, min(60, a - 2) + 1)),
        "*": [b for b in range(2, 10) if a * b <= MAX_VALUE],
        "/": [b for b in range(2, 10) if a % b == 0 and a // b >= 2],
    }
    op = rng.choice([op for op, operands in choices.items() if operands])
    return op, rng.choice(choices[op])


_ANSWER = re.compile(r"answer is (-?\d+)")


def first_error(problem: Problem, steps: list[str] | tuple[str, ...]) -> int | None:
    """The index of the first erroneous step of a finished solution to `problem`, or None
    when no step errs. A step is erroneous when
      - an equation in it is wrong arithmetic ("37 * 8 = 276"), or
      - its quantities are not those of a correct derivation: the story's operations form one
        chain, so the k-th equation of every correct derivation is the gold's k-th one,
        operands in either order for + and *; a step with no equation and no answer
        statement, or one more equation than the chain has, errs too, or
      - it states an answer before the chain is complete, or one other than the gold's.
    A solution whose every step is right but that ends without stating the answer errs at
    its last step (it never reaches the conclusion)."""
    gold: list[tuple[int, str, int, int]] = list(problem.metadata["equations"])
    done = 0
    for i, text in enumerate(steps):
        found = EQUATION.findall(text)
        stated = _ANSWER.search(text)
        if not found and stated is None:
            return i
        for a, op, b, c in ((int(a), op, int(b), int(c)) for a, op, b, c in found):
            if not holds(a, op, b, c) or done >= len(gold):
                return i
            ga, gop, gb, _ = gold[done]
            if op != gop or ((a, b) != (ga, gb) and not (op in "+*" and (b, a) == (ga, gb))):
                return i
            done += 1
        if stated is not None:
            if done < len(gold) or stated.group(1) != str(problem.answer):
                return i
            return None
    return len(steps) - 1 if steps else 0


def problem_of(problem_id: str) -> Problem:
    """The problem an id names ("arith/d5/s2024/7": difficulty 5, seed 2024, index 7)."""
    try:
        kind, d, s, i = problem_id.split("/")
        if kind != "arith" or d[0] != "d" or s[0] != "s":
            raise ValueError
        return _problem(int(s[1:]), int(d[1:]), int(i))
    except ValueError:
        raise ValueError(f"not an arith problem id: {problem_id!r}") from None
