"""The dev tools are the versions pyproject.toml pins (what CI ran), and the fresh-machine
set-up (Makefile, .ci/run) builds its own virtualenv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata

import pytest
from conftest import REPO


def pinned_dev_tools() -> dict[str, str]:
    """name -> version for every `name==version` of the installed project's dev extra."""
    pins = {}
    for req in metadata.requires("tts-search") or []:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^;\s]+)\s*;\s*extra\s*==\s*['\"]dev['\"]", req)
        if m:
            pins[m[1]] = m[2]
    return pins


def unpinned() -> list[str]:
    """'name installed X, pinned Y' for every dev tool at another version than its pin."""
    out = []
    for name, want in sorted(pinned_dev_tools().items()):
        try:
            got = metadata.version(name)
        except metadata.PackageNotFoundError:
            got = "not installed"
        if got != want:
            out.append(f"{name} {got} (pinned {want})")
    return out


def test_dev_tools_are_pinned_exactly():
    pins = pinned_dev_tools()
    assert set(pins) >= {"pytest", "ruff", "pyright", "hypothesis", "math-verify"}, pins


def test_dev_tools_run_at_their_pinned_versions():
    if os.environ.get("TTS_ALLOW_UNPINNED") == "1":  # a packager's own toolchain, knowingly
        return
    assert not unpinned(), (
        f"these dev tools are not the versions CI tested: {', '.join(unpinned())}; "
        f"run `make setup` (it installs '.[dev]' into .venv), or set TTS_ALLOW_UNPINNED=1")


def test_setup_builds_a_venv_inside_the_clone():
    """make installs into $(VENV) made by `python3 -m venv`; .ci/run makes a brand-new one
    every run and runs the README's test command with it."""
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^PYTHON := \$\(VENV\)/bin/python$", makefile, re.M)
    assert re.search(r"\$\(BOOTSTRAP\) -m venv \$\(VENV\)", makefile)
    ci = (REPO / ".ci" / "run").read_text()
    assert "rm -rf" in ci and "-m venv" in ci and "make VENV=" in ci
    readme = (REPO / "README.md").read_text().splitlines()[:6]
    assert any(line.startswith("make test") for line in readme)
    assert any(line.startswith("make demo") for line in readme)


@pytest.mark.slow
def test_make_setup_on_a_fresh_clone_gives_a_clean_venv(tmp_path):
    """A clone of HEAD set up by `make setup` alone: its venv imports this clone's packages,
    has the pinned tools, holds the SmolLM2 file in the cache, and `pip check` is clean."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    # the machine's python3, not this venv's: drop the running venv from PATH
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith(sys.prefix)]
    env = {**os.environ, "PATH": os.pathsep.join(path)}
    # a make above us (CI's `make VENV=.venv-ci test-slow`) passes its command-line variables
    # down through MAKEFLAGS: the clone must get the defaults a newcomer gets
    for name in ("VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "VENV"):
        env.pop(name, None)
    subprocess.run(["make", "-C", str(clone), "setup"], check=True, env=env,
                   capture_output=True, timeout=1200)
    python = clone / ".venv" / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import search, verifiers, rewards, problems, training, "
                            "reports; print(search.__file__)"], capture_output=True, text=True,
                           check=True, cwd=tmp_path).stdout
    assert where.startswith(str(clone)), where
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    versions = subprocess.run([str(python), "-c", "import pytest, ruff; print(pytest.__version__)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert versions == pinned_dev_tools()["pytest"]
