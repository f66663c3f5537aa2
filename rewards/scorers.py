"""Scorers by name, for `search.solve(scorer="...")` and the command line.

Names: steps (arithmetic step checker), oracle (gold-answer verifier),
self_eval (the generator judges its own steps), unit_tests (public tests in the sandbox),
value (the value head saved next to the generator's model); a PRM by folder, embedded name or
Hugging Face id, with its format and trust_remote_code when it needs them ("prm:./my-prm",
"prm:tiny-arith-prm", "prm:/ckpt/qwen-prm,format=qwen-prm,trust_remote_code=true";
search.scoring.parse reads the string) loads through rewards.prm.load_prm.

A scorer is one file: each public module of this package declares its own scorers by
decorating their class or factory with search.scoring.registered_as(name, ..., check=,
engine=). Importing this module (search.plugins does it on first need) registers every such
declaration, read from the modules' source, so no scorer module (nor torch, which the PRM and
the value head import) loads before its scorer is made or its check runs.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search.plugins import resolve
from search.scoring import Factory, Scorer, ScorerSpec, register, register_path_loader
from search.types import Problem

PACKAGE = __name__.rpartition(".")[0]  # "rewards"
DECORATOR = "registered_as"  # search.scoring's, as a scorer module applies it


@dataclass(frozen=True)
class Check:
    """A scorer's check(problem, model) by import path "module:function", imported when it
    runs (the module's own decorator replaces it by the function once the module loads)."""

    target: str

    def __call__(self, problem: Problem, model: str) -> None:
        resolve(self.target)(problem, model)


@dataclass(frozen=True)
class Declared:
    """One name of a registered_as declaration, as read from a module's source."""

    name: str
    factory: Factory
    check: Check | None


def declared(module: str, source: str) -> list[Declared]:
    """The registered_as declarations on the top-level classes and functions of `module`
    (its `source`), one per name."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            for deco in node.decorator_list:
                if _called(deco.func if isinstance(deco, ast.Call) else deco) == DECORATOR:
                    names, engine, check = _read(module, deco)
                    factory = Factory(f"{module}:{node.name}", engine)
                    found += [Declared(n, factory, check) for n in names]
    return found


def _read(module: str, deco: ast.expr) -> tuple[list[str], bool, Check | None]:
    """A declaration's names, engine= and check=, which it must spell plainly (string
    literals, True/False, a function of the module) to be read without running it."""
    if not isinstance(deco, ast.Call):
        deco = ast.Call(deco, [], [], lineno=deco.lineno)  # no names: refused below
    kw = {k.arg: k.value for k in deco.keywords}
    engine, check = kw.pop("engine", ast.Constant(False)), kw.pop("check", None)
    names = [a.value for a in deco.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if names and len(names) == len(deco.args) and \
            not kw and isinstance(engine, ast.Constant) and isinstance(engine.value, bool) and \
            (check is None or isinstance(check, ast.Name)):
        return names, engine.value, None if check is None else Check(f"{module}:{check.id}")
    raise ValueError(f"{module}, line {deco.lineno}: {DECORATOR} takes its names as string "
                     "literals, engine=True/False and check=<a function of the module>, so "
                     "that it can be read without importing the module")


def _called(func: ast.expr) -> str:
    """The name a decorator calls: `registered_as` or `scoring.registered_as`."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def modules() -> dict[str, str]:
    """Every public module of this package (a file not starting with "_") -> its source."""
    found = {}
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.submodule_search_locations is not None
    for info in pkgutil.iter_modules(spec.submodule_search_locations):
        if info.name.startswith("_"):
            continue
        module = f"{PACKAGE}.{info.name}"
        origin = getattr(importlib.util.find_spec(module), "origin", None)
        if origin is not None and origin.endswith(".py"):
            found[module] = Path(origin).read_text(encoding="utf-8")
    return found


def _prm(path: str, **options: Any) -> Scorer:
    """The PRM at `path` (options: format=, trust_remote_code=; rewards.prm.load_prm)."""
    from rewards.prm import HFPRM

    return HFPRM.load(path, **options)


def _check_prm(spec: ScorerSpec) -> None:
    """A format= that names no format, and an embedded model that is no PRM, are refused
    before anything loads."""
    from rewards.prm import check_embedded
    from rewards.prm_formats import check_format

    if spec.format is not None:
        check_format(spec.format)
    if spec.prm is not None:
        check_embedded(spec.prm, spec.format)


# the core's registry (search.scoring.SCORERS; it holds "logprob" itself) gets this
# package's scorers
for _module, _source in modules().items():
    for _found in declared(_module, _source):
        register(_found.name, _found.factory,
                 check=None if _found.check is None else _found.check.target)
register_path_loader(_prm, check=_check_prm)
