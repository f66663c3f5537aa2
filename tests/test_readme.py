"""The README's examples, run: every fenced block is checked by its kind.

- ```pycon: a doctest; the blocks run in order in one namespace, output compared with
  ELLIPSIS (`...` stands for any text) and NORMALIZE_WHITESPACE.
- ```console: each `$ python -m MODULE ARGS` line runs MODULE's `main(ARGS)` in this process;
  what it prints (stdout and stderr) must match the lines below it, ELLIPSIS as above.
- ```sh: commands too slow to run here (`make demo`, a full eval). Each `make TARGET` must be
  a target of the Makefile, and each `python -m MODULE ...` must name a module whose
  `--help` lists every `--flag` the line uses.
- ```python: a client of the HTTP server: run as a script against `python -m search.serve`'s
  app on an ephemeral loopback port (the block's `http://127.0.0.1:8000` swapped for it).
- ```toml: entry-point tables of `name = "module:attr"` lines, in groups the project reads.

Any other kind of block is an error, so no example escapes all of these.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES = 450
KINDS = ("pycon", "console", "sh", "python", "toml")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass(frozen=True)
class Block:
    kind: str
    text: str
    line: int  # where the block's first line of content sits in the README (1-based)


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a markdown text, in order."""
    out: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        out.append(Block(fence.group(1), "\n".join(lines[i + 1:end]) + "\n", i + 2))
        i = end + 1
    return out


def commands(block: Block) -> list[tuple[str, str]]:
    """(command, the output expected below it) for each `$ ` line of a console block."""
    out: list[tuple[str, list[str]]] = []
    for line in block.text.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"README line {block.line}: output before any `$ ` command"
            out[-1][1].append(line)
    return [(cmd, "\n".join(lines) + "\n") for cmd, lines in out]


def module_args(command: str) -> tuple[str, list[str]]:
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"], f"not a `python -m MODULE` command: {command}"
    return words[2], words[3:]


def run_main(module: str, argv: list[str]) -> str:
    """MODULE's main(argv) here, with what it prints to stdout and stderr. MODULE is one
    whose main() is importable (a package's __main__ runs when imported: see help_of)."""
    mod = importlib.import_module(module)
    if not hasattr(mod, "main"):  # `python -m search`: search/__main__.py guards its call
        mod = importlib.import_module(f"{module}.__main__")
    main = mod.main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        main(argv)
    return out.getvalue()


def help_of(module: str) -> str:
    """`python -m MODULE --help` in a child process: a package's __main__ runs on import,
    so it cannot be imported here."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, f"python -m {module} --help: {done.stderr}"
    return done.stdout


def mismatch(want: str, got: str) -> str | None:
    checker = doctest.OutputChecker()
    if checker.check_output(want, got, FLAGS):
        return None
    example = doctest.Example("", want)
    return checker.output_difference(example, got, FLAGS)


TEXT = README.read_text(encoding="utf-8")
BLOCKS = blocks(TEXT)


def test_blocks_parse_and_every_kind_is_checked():
    # the parser against a hand-written text: two blocks, their kinds, text and lines
    sample = "a\n```sh\nmake demo\n```\nb\n```console\n$ python -m x\nout\n```\n"
    assert blocks(sample) == [Block("sh", "make demo\n", 3), Block("console",
                                                                   "$ python -m x\nout\n", 7)]
    assert commands(blocks(sample)[1]) == [("python -m x", "out\n")]
    unknown = [(b.line, b.kind) for b in BLOCKS if b.kind not in KINDS]
    assert not unknown, f"README blocks of no checked kind (line, kind): {unknown}"
    assert {b.kind for b in BLOCKS} >= {"pycon", "console"}


def test_readme_is_short_and_names_no_issues():
    lines = TEXT.count("\n")
    assert lines <= MAX_LINES, f"README has {lines} lines, over {MAX_LINES}"
    issues = re.findall(r"(?i)\bissues? #?\d+|(?<![\w&])#\d+\b", TEXT)
    assert not issues, f"issue numbers in the README: {issues}"


def links(path: Path) -> list[str]:
    """The local pages and images a markdown file links, as paths from the repository."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8"))
    return sorted({(path.parent / t).resolve().relative_to(REPO).as_posix()
                   for t in targets if "://" not in t})


def test_links_and_figures_exist():
    pages = [README, *sorted((REPO / "docs").glob("*.md"))]
    found = {page.relative_to(REPO).as_posix(): links(page) for page in pages}
    assert found["README.md"], "the README links no page"
    assert {f"docs/{p.name}" for p in pages[1:]} <= set(found["README.md"]), \
        "a docs page the README does not link"
    missing = {(page, t) for page, ts in found.items() for t in ts if not (REPO / t).exists()}
    assert not missing, missing


def test_python_examples():
    pycon = [b for b in BLOCKS if b.kind == "pycon"]
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=FLAGS)
    globs: dict[str, object] = {"__name__": "__main__"}  # as typed at `python`'s prompt
    report = io.StringIO()
    for b in pycon:
        test = parser.get_doctest(b.text, globs, f"README.md:{b.line}", str(README), b.line)
        assert test.examples, f"README line {b.line}: a pycon block with no example"
        runner.run(test, out=report.write, clear_globs=False)
        globs.update(test.globs)  # get_doctest copied them: the next block sees these names
    assert runner.failures == 0, report.getvalue()


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "python"],
                         ids=lambda b: f"line{b.line}")
def test_server_client_examples(block):
    from test_serve import serving  # the server as test_serve runs it: uvicorn in a thread

    default = "http://127.0.0.1:8000"
    assert default in block.text, f"README line {block.line}: a client block with no server URL"
    with serving("tiny-arith") as (url, _), contextlib.redirect_stdout(io.StringIO()) as out:
        code = compile(block.text.replace(default, url), f"README.md:{block.line}", "exec")
        exec(code, {"__name__": "__main__"})
    assert out.getvalue().strip(), f"README line {block.line}: the client printed nothing"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "console"],
                         ids=lambda b: f"line{b.line}")
def test_command_line_examples(block):
    for command, want in commands(block):
        module, argv = module_args(command)
        diff = mismatch(want, run_main(module, argv))
        assert diff is None, f"README line {block.line}: `{command}`\n{diff}"


def test_slow_commands_name_real_targets_and_flags():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.M))
    checked = 0
    for b in (b for b in BLOCKS if b.kind == "sh"):
        for line in re.sub(r"\\\n\s*", " ", b.text).split("\n"):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            checked += 1
            if line.startswith("make "):
                assert line.split()[1] in targets, f"README line {b.line}: {line}"
                continue
            module, argv = module_args(line)
            helptext = help_of(module)
            unknown = [a.split("=")[0] for a in argv
                       if a.startswith("--") and a.split("=")[0] not in helptext]
            assert not unknown, f"README line {b.line}: {module} has no {unknown}"
    assert checked


def test_entry_point_groups_exist():
    from problems.datasets import DATASETS
    from search.answers import READERS
    from search.engines.kinds import ENGINE_KINDS
    from search.models import EMBEDDED
    from search.registry import ALGORITHMS
    from search.scoring import SCORERS

    groups = set()
    for b in (b for b in BLOCKS if b.kind == "toml"):
        heads = re.findall(r"^\[(.*)\]$", b.text, flags=re.M)
        for head in heads:  # tomllib is 3.11+; the project runs on 3.10
            group = re.fullmatch(r'project\.entry-points\."([\w.]+)"', head)
            assert group, f"README line {b.line}: [{head}] is not an entry-point table"
            groups.add(group.group(1))
        entries = [ln for ln in b.text.split("\n") if ln.strip() and not ln.startswith("[")]
        assert all(re.match(r'^[\w-]+ = "[\w.]+:[\w.]+"', ln) for ln in entries), entries
    assert groups
    known = {r.group for r in (DATASETS, READERS, ENGINE_KINDS, EMBEDDED, ALGORITHMS, SCORERS)}
    assert groups <= known, groups - known
