"""A detector of state keyed by which thread is calling, read with `ast` (issue 34): what
tests/test_architecture.py runs over the project's packages and over planted trees.

A search's state travels with it (search.session.Session); nothing may find it by thread:
  - per-thread storage anywhere: threading.local() (or a subclass of it), _thread._local,
    _threading_local.local, contextvars.ContextVar (each thread starts its own context);
  - a thread's identity (threading.get_ident(), get_native_id(), current_thread(), and the
    _thread ones) used for anything but a comparison (`current_thread() is owner` asks who
    is running; using it as a dict key, a WeakKeyDictionary key, a set member, an attribute
    holder, a stored value or a call's argument keys state by thread).
Names are resolved through the module's imports (`import threading as t`, `from threading
import local as L`), so an alias does not hide a use.
"""

from __future__ import annotations

import ast
from pathlib import Path

PER_THREAD = {"threading.local", "_thread._local", "_threading_local.local",
              "contextvars.ContextVar"}
IDENTITY = {"threading.get_ident", "threading.get_native_id", "threading.current_thread",
            "threading.currentThread", "_thread.get_ident", "_thread.get_native_id"}
WATCHED = ("threading", "_thread", "_threading_local", "contextvars")
COMPARE = (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the qualified name it stands for, for the watched modules' imports."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in WATCHED:
                    names[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in WATCHED and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _qualified(expr: ast.expr, names: dict[str, str]) -> str | None:
    """`threading.local`, `t.local` or `L` as the qualified name it resolves to, if any."""
    if isinstance(expr, ast.Name):
        return names.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _qualified(expr.value, names)
        return f"{base}.{expr.attr}" if base is not None else None
    return None


def _compared(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether an identity call's value is only compared (`x is current_thread()`)."""
    parent = parents.get(node)
    return isinstance(parent, ast.Compare) and all(isinstance(op, COMPARE) for op in parent.ops)


def thread_keyed(path: Path, root: Path) -> list[str]:
    """'file:line: what' for every use of per-thread state in one module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = _aliases(tree)
    if not names:
        return []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    where = path.relative_to(root)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name | ast.Attribute):
            continue
        name = _qualified(node, names)
        if name not in PER_THREAD and name not in IDENTITY:
            continue
        parent = parents.get(node)
        line = f"{where}:{node.lineno}: {name}"
        if isinstance(parent, ast.ClassDef):
            found.append(f"{line} as a base of class {parent.name} (per-thread storage)")
        elif name in PER_THREAD:
            called = isinstance(parent, ast.Call) and parent.func is node
            found.append(f"{line}{'()' if called else ''} keeps state per thread")
        elif not isinstance(parent, ast.Call) or parent.func is not node:
            found.append(f"{line} passed on (a thread's identity: compare it, key nothing by it)")
        elif not _compared(parent, parents):
            found.append(f"{line}() used other than in a comparison (state keyed by the "
                         "calling thread)")
    return found


def thread_keyed_state(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Every use of per-thread state in the packages' modules (see the module doc)."""
    return [hit for pkg in packages for path in sorted((root / pkg).rglob("*.py"))
            for hit in thread_keyed(path, root)]
