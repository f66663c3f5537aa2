"""The test suite's own device plumbing: the `device` fixture (tests/devices.py) and the
report header, which must not crash where the project is on PYTHONPATH but not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch
from conftest import REPO
from devices import DEVICES

# pytest run in a child process whose importlib.metadata knows no "tts-search" distribution:
# what a checkout on PYTHONPATH without `pip install -e .` looks like to the header hook
NOT_INSTALLED = textwrap.dedent("""
    import importlib.metadata as md, sys
    real = md.distribution
    def distribution(name):
        if name.replace("_", "-").lower() == "tts-search":
            raise md.PackageNotFoundError(name)
        return real(name)
    md.distribution = distribution
    import pytest
    sys.exit(pytest.main(sys.argv[1:]))
""")


def test_verbose_header_without_an_install():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", NOT_INSTALLED, "-v", "--co", "-p",
                          "no:cacheprovider", "tests/test_sampling.py"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "dev tool pins not checked: tts-search is not installed" in run.stdout
    assert f"engine test devices: {', '.join(DEVICES)}" in run.stdout
    assert "3 tests collected" in run.stdout


def test_devices_are_the_cpu_and_any_visible_gpu(device):
    assert DEVICES[0] == "cpu"
    assert ("cuda" in DEVICES) == torch.cuda.is_available()
    assert device in DEVICES
