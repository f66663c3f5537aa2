"""The import graph of the project's packages, read with `ast`, and the detectors
tests/test_architecture.py runs over it (and over planted trees, to prove they can fail).

Imports are read from every module, function-level ones included; only those under
`if TYPE_CHECKING:` are left out (they never run). `import a.b` or `from a.b import c` is an
edge to the module a.b (or a.b.c when that is a module); the parent package's __init__ that
Python runs on the way is not an edge, or every package would be a cycle with its own
__init__. `import a` and `from a import name` (a a package, name not a submodule) are edges to
a's __init__."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under each package (a package is its
    __init__)."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(tree: ast.AST) -> list[tuple[int, ast.Import | ast.ImportFrom]]:
    """Every import statement that can run (at any depth: functions, try, if), skipping the
    bodies of `if TYPE_CHECKING:` (their else branches run)."""
    found: list[tuple[int, ast.Import | ast.ImportFrom]] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                walk(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node.lineno, node))
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return found


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name a (possibly relative) `from ... import` names."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def edges(root: Path, packages: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(importer, imported, "file:line") for every runtime import of a project module."""
    mods = modules(root, packages)
    out: list[tuple[str, str, str]] = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for line, node in runtime_imports(tree):
            where = f"{path.relative_to(root)}:{line}"
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _absolute(module, path, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for target in targets:
                # `import a.b.c` of a non-module attribute path: the longest module prefix
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    out.append((module, target, where))
    return out


def core_violations(root: Path, core: str, plugins: tuple[str, ...]) -> list[str]:
    """'file:line imports X' for each runtime import of a plug-in from inside the core."""
    return [f"{where} imports {dst}" for src, dst, where in edges(root, (core, *plugins))
            if src.split(".")[0] == core and dst.split(".")[0] in plugins]


def cycles(root: Path, packages: tuple[str, ...]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan's
    algorithm, iterative), each sorted: every module in one imports every other, through a
    chain of imports."""
    graph: dict[str, set[str]] = {m: set() for m in modules(root, packages)}
    for src, dst, _ in edges(root, packages):
        graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(component: list[str], root: Path, packages: tuple[str, ...]) -> str:
    """A cycle with the import lines that close it."""
    members = set(component)
    lines = [f"  {where}: {src} -> {dst}" for src, dst, where in edges(root, packages)
             if src in members and dst in members]
    return " <-> ".join(component) + "\n" + "\n".join(lines)


def private_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """'file:line from M import _name' for each import of another module's private name (a
    private submodule of the importer's own package is fine: verifiers._sandbox.host)."""
    mods = modules(root, packages)
    found = []
    for module, path in mods.items():
        for line, node in runtime_imports(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _absolute(module, path, node)
            for alias in node.names:
                own_module = f"{base}.{alias.name}" in mods and \
                    base.split(".")[0] == module.split(".")[0]
                if alias.name.startswith("_") and not alias.name.startswith("__") and \
                        not own_module:
                    found.append(f"{path.relative_to(root)}:{line} from {base} import "
                                 f"{alias.name}")
    return found


# how a search ends: `run.finish(...)` of a Run imported from search.algos, or (a search that
# hands the problem on) `Outcome.of(...)` of what another search's finish found
ENDINGS = {"finish": ("Run", "search.algos"), "of": ("Outcome", "search.types")}


def own_returns(node: ast.AST) -> list[ast.Return]:
    """The return statements of a function, not of the functions defined inside it."""
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Return):
            found.append(child)
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                          | ast.ClassDef):
            found += own_returns(child)
    return found


def unfinished_algorithms(algos: Path) -> list[str]:
    """'file:line' of each return of an algorithm (the function `name` of algos/name.py) that
    does not hand back the one ending (ENDINGS): a call of `.finish(...)` in a module that
    imports Run from search.algos (a Run's finish), or of `Outcome.of(...)` with Outcome
    imported from search.types; 'file' alone where the file has no such function."""
    found = []
    for path in sorted(algos.glob("[!_]*.py")):
        tree = ast.parse(path.read_text(), str(path))
        imported = {(node.module, alias.asname or alias.name) for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) for alias in node.names}
        fn = next((node for node in tree.body if isinstance(node, ast.FunctionDef)
                   and node.name == path.stem), None)
        if fn is None:
            found.append(path.name)
            continue
        found += [f"{path.name}:{ret.lineno}" for ret in own_returns(fn)
                  if not _ends(ret.value, imported)]
    return found


def _ends(value: ast.expr | None, imported: set[tuple[str | None, str]]) -> bool:
    """Whether a returned expression is the one ending (ENDINGS), its class imported."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    name, module = ENDINGS.get(value.func.attr, ("", ""))
    if (module, name) not in imported:
        return False
    owner = value.func.value  # any Run's finish; Outcome.of itself
    return value.func.attr == "finish" or (isinstance(owner, ast.Name) and owner.id == name)


def is_private(module: str) -> bool:
    """A module is private to its top-level package when a component of its dotted name
    below the top level starts with "_" (search.algos._smc; verifiers._sandbox.host)."""
    return any(part.startswith("_") and not part.endswith("__")  # __main__ is public
               for part in module.split(".")[1:])


def foreign_private_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """'file:line imports M' for each runtime import of a private module of another top-level
    package (a plug-in reaching into the core's internals, or into another plug-in's)."""
    return sorted({f"{where} imports {dst}" for src, dst, where in edges(root, packages)
                   if src.split(".")[0] != dst.split(".")[0] and is_private(dst)})


def _module_level_imports(tree: ast.Module, module: str, path: Path
                          ) -> dict[str, str]:
    """Name bound at module level by `from X import name` -> X (absolute)."""
    bound: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = _absolute(module, path, node)
            for alias in node.names:
                bound[alias.asname or alias.name] = base
    return bound


def _all_names(tree: ast.Module) -> list[str]:
    """The literal strings of a module-level `__all__ = [...]` (or tuple)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets) \
                and isinstance(node.value, ast.List | ast.Tuple):
            return [e.value for e in node.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def reexports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """'file: what' for each module that hands on another top-level package's objects as its
    own: a name in its `__all__` imported from another package, or a module whose whole body
    (docstring aside) is imports, one of them from another package (a shim)."""
    found = []
    for module, path in modules(root, packages).items():
        tree = ast.parse(path.read_text(), str(path))
        top = module.split(".")[0]
        foreign = {name: base for name, base in _module_level_imports(tree, module, path).items()
                   if base.split(".")[0] in packages and base.split(".")[0] != top}
        where = path.relative_to(root)
        found += [f"{where}: __all__ hands on {base}.{name}"
                  for name in _all_names(tree) if (base := foreign.get(name))]
        body = [n for n in tree.body
                if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        statements = [n for n in body if not (isinstance(n, ast.Assign) and _all_names(
            ast.Module(body=[n], type_ignores=[])))]
        if foreign and statements and all(isinstance(n, ast.Import | ast.ImportFrom)
                                          for n in statements):
            found.append(f"{where}: only imports ({', '.join(sorted(set(foreign.values())))})")
    return sorted(found)


def layer_of(module: str, layers: Sequence[Sequence[str]]) -> int | None:
    """The index of the layer holding `module` (a layer lists modules or packages: a name
    holds itself and everything under it; the longest match wins); None when unlisted."""
    best: tuple[int, int] | None = None  # (length of the matching name, layer)
    for index, names in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and \
                    (best is None or len(name) > best[0]):
                best = (len(name), index)
    return None if best is None else best[1]


def against_layers(root: Path, packages: tuple[str, ...], layers: Sequence[Sequence[str]]
                   ) -> list[str]:
    """'file:line imports M' for each runtime import from a layer of one listed below it
    (layers listed bottom first: a layer may import its own and those before it)."""
    found = set()
    for src, dst, where in edges(root, packages):
        low, high = layer_of(src, layers), layer_of(dst, layers)
        if low is not None and high is not None and high > low:
            found.add(f"{where} imports {dst}")
    return sorted(found)
