"""Seeded program-synthesis tasks: compose a few primitives over ints, lists and strings.

    problems = generate(200, seed=1, difficulty=3)
    print(problems[0].prompt)
        def f(xs: list[int]) -> int:
            \"\"\"Take a list of integers xs. Keep only the numbers greater than 3, then multiply
            each number by 2, then take their sum. Return the result.

            >>> f([4, 9, 1])
            26
            \"\"\"

`difficulty` is the number of composed stages. The reference program (metadata["solution"],
a complete program that starts with the prompt) has one line per stage. Public tests (the
docstring examples, 2-3 asserts) are chosen so that a "decoy", a plausible wrong program such
as the reference with ">" written ">=", passes them too; the hidden tests (the public ones
plus 10 or more, edge cases included) tell the two apart. `plausible_wrong_programs(problem)`
lists such mutants, so false positives of public-test verification can be measured.

Each stage is a Python expression template; the generator evaluates the same text it writes
into the programs, so a program and the outputs recorded in its tests cannot disagree.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from problems.levels import check_request
from search.types import Problem

DEFAULT_DIFFICULTY = 3
MIN_DIFFICULTY, MAX_DIFFICULTY = 1, 6
N_HIDDEN = 12  # hidden tests besides the public ones
VAR = {"list": "xs", "str": "s", "int": "n"}  # the variable holding a value of each type
TYPE = {"list": "list[int]", "str": "str", "int": "int"}


@dataclass(frozen=True)
class Stage:
    """One primitive: `expr` maps the value in `{v}` (of type src) to a value of type dst.
    `wrong` holds plausible mistakes, as alternative expressions; dropping the stage is always
    one more. `ks` are the values the parameter {k} may take (none: no parameter)."""

    name: str
    src: str
    dst: str
    clause: str
    expr: str
    wrong: tuple[str, ...] = ()
    ks: tuple[int, ...] = ()


STAGES = (
    # list -> list
    Stage("keep_even", "list", "list", "keep only the even numbers",
          "[x for x in {v} if x % 2 == 0]", ("[x for x in {v} if x % 2 == 1]",)),
    Stage("keep_odd", "list", "list", "keep only the odd numbers",
          "[x for x in {v} if x % 2 == 1]", ("[x for x in {v} if x % 2 == 0]",)),
    Stage("keep_gt", "list", "list", "keep only the numbers greater than {k}",
          "[x for x in {v} if x > {k}]", ("[x for x in {v} if x >= {k}]",
                                          "[x for x in {v} if x < {k}]"), (0, 2, 3, 5)),
    Stage("keep_lt", "list", "list", "keep only the numbers less than {k}",
          "[x for x in {v} if x < {k}]", ("[x for x in {v} if x <= {k}]",
                                          "[x for x in {v} if x > {k}]"), (0, 4, 6, 10)),
    Stage("add_each", "list", "list", "add {k} to each number", "[x + {k} for x in {v}]",
          ("[x - {k} for x in {v}]", "[x + {k+1} for x in {v}]"), (1, 2, 3, 5)),
    Stage("mul_each", "list", "list", "multiply each number by {k}", "[x * {k} for x in {v}]",
          ("[x + {k} for x in {v}]", "[x ** {k} for x in {v}]"), (2, 3)),
    Stage("square_each", "list", "list", "square each number", "[x * x for x in {v}]",
          ("[x * 2 for x in {v}]", "[abs(x) for x in {v}]")),
    Stage("abs_each", "list", "list", "replace each number by its absolute value",
          "[abs(x) for x in {v}]", ("[-x for x in {v}]",)),
    Stage("first_k", "list", "list", "take the first {k} numbers", "{v}[:{k}]",
          ("{v}[:{k-1}]", "{v}[:{k+1}]", "{v}[-{k}:]"), (2, 3, 4)),
    Stage("drop_k", "list", "list", "remove the first {k} numbers", "{v}[{k}:]",
          ("{v}[{k+1}:]", "{v}[:-{k}]"), (2, 3)),
    Stage("last_k", "list", "list", "take the last {k} numbers", "{v}[-{k}:]",
          ("{v}[:{k}]", "{v}[-{k-1}:]"), (2, 3)),
    Stage("reverse", "list", "list", "reverse the order of the numbers", "{v}[::-1]"),
    Stage("sort_up", "list", "list", "sort the numbers in increasing order", "sorted({v})",
          ("sorted({v}, reverse=True)",)),
    Stage("sort_down", "list", "list", "sort the numbers in decreasing order",
          "sorted({v}, reverse=True)", ("sorted({v})",)),
    Stage("dedupe", "list", "list",
          "remove repeated numbers, keeping the first occurrence of each",
          "list(dict.fromkeys({v}))", ("sorted(set({v}))",)),
    Stage("even_positions", "list", "list", "keep the numbers at positions 0, 2, 4 and so on",
          "{v}[::2]", ("{v}[1::2]",)),
    # list -> int
    Stage("sum", "list", "int", "take their sum", "sum({v})",
          ("len({v})", "max({v}, default=0)")),
    Stage("count", "list", "int", "count them", "len({v})", ("sum({v})", "len(set({v}))")),
    Stage("max", "list", "int", "take the largest of them (0 if there are none)",
          "max({v}, default=0)", ("({v}[-1] if {v} else 0)", "min({v}, default=0)")),
    Stage("min", "list", "int", "take the smallest of them (0 if there are none)",
          "min({v}, default=0)", ("({v}[0] if {v} else 0)", "max({v}, default=0)")),
    Stage("count_distinct", "list", "int", "count how many different numbers there are",
          "len(set({v}))", ("len({v})",)),
    # int -> int
    Stage("add", "int", "int", "add {k} to it", "{v} + {k}", ("{v} - {k}", "{v} * {k}"),
          (1, 2, 3, 10)),
    Stage("mul", "int", "int", "multiply it by {k}", "{v} * {k}", ("{v} + {k}",), (2, 3)),
    Stage("mod", "int", "int", "take its remainder when divided by {k}", "{v} % {k}",
          ("{v} // {k}",), (3, 5, 10)),
    Stage("abs", "int", "int", "take its absolute value", "abs({v})", ("-{v}",)),
    # int -> list
    Stage("digits", "int", "list", "take the digits of n, ignoring its sign",
          "[int(c) for c in str(abs({v}))]", ("[int(c) for c in str({v})]",)),
    Stage("upto", "int", "list", "take the numbers from 1 to n (none if n < 1)",
          "list(range(1, {v} + 1))", ("list(range({v}))", "list(range(1, {v}))")),
    Stage("divisors", "int", "list", "take the positive divisors of n (none if n < 1)",
          "[d for d in range(1, {v} + 1) if {v} % d == 0]",
          ("[d for d in range(1, {v}) if {v} % d == 0]",)),
    # str -> str
    Stage("upper", "str", "str", "convert it to upper case", "{v}.upper()",
          ("{v}.title()", "{v}.capitalize()")),
    Stage("lower", "str", "str", "convert it to lower case", "{v}.lower()",
          ("{v}.swapcase()",)),
    Stage("reverse_str", "str", "str", "reverse it", "{v}[::-1]",
          ("' '.join({v}.split()[::-1])",)),
    Stage("no_vowels", "str", "str", "remove every vowel (a, e, i, o, u, in either case)",
          "''.join(c for c in {v} if c.lower() not in 'aeiou')",
          ("''.join(c for c in {v} if c not in 'aeiou')",)),
    Stage("no_spaces", "str", "str", "remove every space", "{v}.replace(' ', '')",
          ("{v}.strip()",)),
    Stage("first_chars", "str", "str", "keep its first {k} characters", "{v}[:{k}]",
          ("{v}[:{k-1}]", "{v}[-{k}:]"), (3, 4, 5)),
    Stage("swapcase", "str", "str", "swap the case of every letter", "{v}.swapcase()",
          ("{v}.lower()", "{v}.upper()")),
    # str -> int
    Stage("length", "str", "int", "take its length", "len({v})", ("len({v}.strip())",)),
    Stage("count_vowels", "str", "int", "count its vowels (a, e, i, o, u, in either case)",
          "sum(1 for c in {v} if c.lower() in 'aeiou')",
          ("sum(1 for c in {v} if c in 'aeiou')",)),
    Stage("count_words", "str", "int", "count its words (separated by spaces)",
          "len({v}.split())", ("{v}.count(' ') + 1",)),
    Stage("count_upper", "str", "int", "count its upper-case letters",
          "sum(1 for c in {v} if c.isupper())", ("sum(1 for c in {v} if c.islower())",)),
    # str -> list
    Stage("word_lengths", "str", "list", "take the length of each word (separated by spaces)",
          "[len(w) for w in {v}.split()]", ("[len(w) for w in {v}.split(' ')]",)),
)
INTRO = {"list": "Take a list of integers xs.", "str": "Take a string s.",
         "int": "Take an integer n."}
WORDS = ("apple", "code", "sky", "tree", "data", "moon", "river", "python", "blue", "cat",
         "echo", "idea", "under", "ok", "zebra", "a", "I")
EDGE_INPUTS: dict[str, tuple[Any, ...]] = {
    "list": ([], [0], [-4], [7], [3, 3, 3], [-1, -2, -3], [5, -5, 0, 2], [1, 2, 3, 4, 5, 6]),
    "str": ("", "a", "A", "  ", "hello world", "Hello World", "two  spaces", " padded ",
            "AEIOU aeiou", "xyz"),
    "int": (0, 1, -1, -15, 7, 12, 36, 60),
}


@dataclass(frozen=True)
class _Program:
    """A pipeline: (stage, k, expression) per line. Expressions are stage.expr or a mistake."""

    src: str
    lines: tuple[tuple[Stage, int | None, str], ...]

    def source(self, prompt: str) -> str:
        body = [f"    {VAR[stage.dst]} = {_fill(expr, VAR[stage.src], k)}"
                for stage, k, expr in self.lines]
        dst = self.lines[-1][0].dst if self.lines else self.src
        return prompt + "\n".join(body + [f"    return {VAR[dst]}"]) + "\n"

    def run(self, value: Any) -> Any:
        """The program's output on `value`, or an Exception instance if it raises."""
        try:
            for _, k, expr in self.lines:
                value = _compile(expr)(value, k)
            return value
        except Exception as error:  # a mistake may crash (int('-')); that fails a test
            return error


def _fill(expr: str, var: str, k: int | None) -> str:
    """The template as program text: {k-1} and {k+1} become numbers, as a person writes them."""
    if k is not None:
        expr = expr.replace("{k-1}", str(k - 1)).replace("{k+1}", str(k + 1))
    return expr.replace("{v}", var).replace("{k}", str(k))


@functools.cache
def _compile(expr: str) -> Callable[[Any, Any], Any]:
    """The template as a function of (v, k). Templates are this module's own constants, never
    generated or user text, so evaluating them is safe."""
    code = (expr.replace("{v}", "v").replace("{k}", "k")
            .replace("{k-1}", "(k - 1)").replace("{k+1}", "(k + 1)"))
    return eval(f"lambda v, k: {code}")


def generate(n: int, *, seed: int = 0, difficulty: int = DEFAULT_DIFFICULTY) -> list[Problem]:
    """n tasks of `difficulty` composed stages each; task i depends only on (seed,
    difficulty, i)."""
    check_request(n, difficulty, MIN_DIFFICULTY, MAX_DIFFICULTY, "stages")
    return [_problem(seed, difficulty, i) for i in range(n)]


def plausible_wrong_programs(problem: Problem) -> tuple[str, ...]:
    """Complete wrong programs for a generated task (one mistake each: a wrong comparison, an
    off-by-one slice, a dropped stage ...). Each fails at least one hidden test; the first,
    metadata["decoy"], passes every public test."""
    if problem.metadata.get("source") != "codegen":
        raise ValueError(f"{problem.id!r} is not a codegen task")
    return tuple(problem.metadata["wrong_programs"])


def _problem(seed: int, difficulty: int, index: int) -> Problem:
    rng = random.Random(f"codegen/{seed}/{difficulty}/{index}")
    # The input type is drawn once, so that retries below do not favour the easiest type.
    src = rng.choice(("list", "list", "str", "int"))
    for _ in range(1000):
        program = _random_program(rng, src, difficulty)
        if program is None:
            continue
        pool = _inputs(rng, program)
        outputs = [program.run(x) for x in pool]
        if any(isinstance(y, Exception) for y in outputs) or not _every_stage_matters(
                program, pool, outputs):
            continue
        mutants = [m for m in _mutants(program) if _differs(m, pool, outputs)]
        choice = _choose_tests(rng, program, mutants, pool, outputs)
        if choice is not None:
            return _assemble(seed, difficulty, index, program, mutants, pool, outputs, choice)
    raise RuntimeError(f"no codegen task found for seed={seed} difficulty={difficulty}")


def _random_program(rng: random.Random, src: str, depth: int) -> _Program | None:
    """A random well-typed pipeline, or None at a dead end (every int -> int stage used)."""
    lines: list[tuple[Stage, int | None, str]] = []
    kind = src
    for i in range(depth):
        used = {stage.name for stage, _, _ in lines}
        # An int input first becomes a list (int -> int alone is arithmetic, not a program);
        # later ints (a sum, a count) stay ints: 1..n of a sum can be a very long list.
        options = [s for s in STAGES if s.src == kind and s.name not in used
                   and (kind != "int" or (s.dst == "list") == (i == 0))]
        if not options:
            return None
        stage = rng.choice(options)
        lines.append((stage, rng.choice(stage.ks) if stage.ks else None, stage.expr))
        kind = stage.dst
    return _Program(src, tuple(lines))


def _inputs(rng: random.Random, program: _Program) -> list[Any]:
    """Edge cases first, then random inputs; deduplicated, order kept."""
    kind = program.src
    # Large n only where the output stays small (digits of n, not the numbers 1..n).
    big = kind == "int" and program.lines[0][0].name not in ("upto", "divisors")
    pool: list[Any] = list(EDGE_INPUTS[kind])
    for _ in range(40):
        if kind == "list":
            pool.append([rng.randint(-9, 20) for _ in range(rng.randint(1, 7))])
        elif kind == "str":
            words = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
            pool.append(" ".join(w.upper() if rng.random() < 0.2 else
                                 w.capitalize() if rng.random() < 0.3 else w for w in words))
        else:
            pool.append(rng.randint(100, 99999) if big and rng.random() < 0.4
                        else rng.randint(-20, 40))
    unique = {repr(x): x for x in pool}
    return list(unique.values())


def _every_stage_matters(program: _Program, pool: list[Any], outputs: list[Any]) -> bool:
    """False when dropping some stage never changes the output (sorting before a sum)."""
    return all(_differs(_replace(program, i, None), pool, outputs)
               for i, (stage, _, _) in enumerate(program.lines) if stage.src == stage.dst)


def _replace(program: _Program, i: int, expr: str | None) -> _Program:
    """Line i written as `expr` instead, or dropped (None) when its types allow."""
    lines = list(program.lines)
    if expr is None:
        stage = lines[i][0]
        if stage.src != stage.dst:
            return program  # a type-changing stage cannot simply be left out
        del lines[i]
    else:
        lines[i] = (lines[i][0], lines[i][1], expr)
    return _Program(program.src, tuple(lines))


def _mutants(program: _Program) -> list[_Program]:
    out = []
    for i, (stage, _, _) in enumerate(program.lines):
        out.extend(_replace(program, i, expr) for expr in stage.wrong)
        if stage.src == stage.dst:
            out.append(_replace(program, i, None))
    return out


def _differs(program: _Program, pool: list[Any], outputs: list[Any]) -> bool:
    return any(not _same(program.run(x), y) for x, y in zip(pool, outputs, strict=True))


def _same(a: Any, b: Any) -> bool:
    return not isinstance(a, Exception) and type(a) is type(b) and a == b


def _choose_tests(rng: random.Random, program: _Program, mutants: list[_Program],
                  pool: list[Any], outputs: list[Any]) -> tuple[_Program, list[int], list[int]] | None:
    """(decoy, public, hidden) with indices into pool, or None when no mutant fits as a decoy:
    one that agrees with the program on two inputs with different outputs."""
    n_edge = len(EDGE_INPUTS[program.src])
    for decoy in rng.sample(mutants, len(mutants)):
        agree = {i for i, x in enumerate(pool) if _same(decoy.run(x), outputs[i])}
        # Public examples should look like ordinary inputs (random ones, not edge cases)
        # and have different outputs, so that they say something.
        by_output = {repr(outputs[i]): i for i in sorted(agree) if i >= n_edge}
        if len(by_output) < 2:
            continue
        public = sorted(rng.sample(sorted(by_output.values()), min(3, len(by_output))))
        # Hidden: the edge cases, an input that catches each mutant (the decoy first), then
        # random inputs up to N_HIDDEN.
        hidden = [i for i in range(n_edge) if i not in public]
        for mutant in [decoy, *mutants]:
            if all(_same(mutant.run(pool[i]), outputs[i]) for i in public + hidden):
                hidden.append(rng.choice([i for i, x in enumerate(pool)
                                          if not _same(mutant.run(x), outputs[i])]))
        others = [i for i in range(len(pool)) if i not in public and i not in hidden]
        hidden += rng.sample(others, max(0, min(len(others), N_HIDDEN - len(hidden))))
        return decoy, public, sorted(hidden)
    return None


def _assemble(seed: int, difficulty: int, index: int, program: _Program,
              mutants: list[_Program], pool: list[Any], outputs: list[Any],
              choice: tuple[_Program, list[int], list[int]]) -> Problem:
    decoy, public, hidden = choice
    var = VAR[program.src]
    steps = ", then ".join(stage.clause.replace("{k}", str(k)) for stage, k, _ in program.lines)
    spec = f"{INTRO[program.src]} {steps[0].upper()}{steps[1:]}. Return the result."
    examples = "".join(f"    >>> f({pool[i]!r})\n    {outputs[i]!r}\n" for i in public)
    signature = f"def f({var}: {TYPE[program.src]}) -> {TYPE[program.lines[-1][0].dst]}:"
    prompt = f'{signature}\n    """{_wrap(spec)}\n\n{examples}    """\n'
    tests = tuple(_assert(pool[i], outputs[i]) for i in public)
    # Hidden tests include the public ones: passing them all implies passing the public.
    hidden_tests = tests + tuple(_assert(pool[i], outputs[i]) for i in hidden)
    wrong = list(dict.fromkeys(m.source(prompt) for m in [decoy, *mutants]))
    return Problem(
        prompt=prompt,
        id=f"codegen/d{difficulty}/s{seed}/{index}",
        answer=None,
        domain="code",
        tests=tests,
        hidden_tests=hidden_tests,
        entry_point="f",
        metadata={"solution": program.source(prompt), "decoy": wrong[0],
                  "wrong_programs": tuple(wrong),
                  "stages": tuple((stage.name, k) for stage, k, _ in program.lines),
                  "difficulty": difficulty, "seed": seed, "index": index,
                  "source": "codegen", "grader": "code"},
    )


def _assert(x: Any, y: Any) -> str:
    return f"assert f({x!r}) == {y!r}"


def _wrap(text: str, width: int = 92) -> str:
    """Word-wrap the docstring's first paragraph, continuation lines indented 4 spaces."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n    ".join(lines + [line])
