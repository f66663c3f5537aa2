"""The caller's side: the sandbox's read-only file system image, on a host tmpfs (/dev/shm).

Under bwrap and unshare the program sees no host file system directly: its /usr, its Python
and the libraries they load are binds of one image, a copy of what this interpreter needs
(its binary, the standard library without its tests and GUI, lib-dynload, the shared
libraries they link, ld.so.cache), made once per interpreter and machine. A copy on a
tmpfs closes the channels a run could otherwise leave to the next through host caches:
- page cache: tmpfs pages are always in memory, so reading or mapping any file of the image
  brings nothing in and pushes nothing out; fault timing reads the same every run;
- dentries: a lookup of a name that does not exist on a tmpfs leaves no negative dentry
  behind (the dentry is dropped with its last reference); those that exist are pinned; so a
  run of stat() calls leaves nothing, and a later run cannot time what an earlier looked up;
- access times: every file, dir and link of the image has its atime set far in the future,
  so relatime (the mount's, inherited and locked in the sandbox) never updates it: a read
  changes no metadata. The binds are read-only: nothing else can change it.
Reads of the image are bounded by the image itself (tens of MiB, already in memory): reading
it again and again costs only CPU, which RLIMIT_CPU caps.

The image lives until the machine reboots or someone removes it; a newer interpreter gets
its own (the name holds a hash of what went in). It is owned by this uid, 0755 dirs.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading

PARENT = "/dev/shm"
# stdlib parts no sandboxed program needs: tests, GUIs, bundled wheels, build files
SKIPPED = frozenset({"test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo",
                     "ensurepip", "lib2to3", "site-packages", "dist-packages", "__phello__"})
FUTURE_NS = (1 << 33) * 10**9  # atime in the year 2242: relatime never moves it


def _skipped(name: str) -> bool:
    return (name in SKIPPED or name.startswith("config-") or name.endswith((".opt-1.pyc",
            ".opt-2.pyc")) or name.startswith("_tkinter"))


def _wanted() -> tuple[str, str, list[str]]:
    """(interpreter binary, stdlib dir, the shared objects they link), as host paths."""
    binary = os.path.realpath(sys.executable)
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    dynload = os.path.join(stdlib, "lib-dynload")
    objects = [binary] + sorted(os.path.join(dynload, n) for n in os.listdir(dynload)
                                if n.endswith(".so") and not _skipped(n))
    found = subprocess.run(["ldd", *objects], capture_output=True, text=True, timeout=60,
                           check=False).stdout
    libs = sorted({m for m in re.findall(r"(/\S+) \(0x", found)})
    if not any("/libc.so" in lib for lib in libs):  # ldd missing or unreadable: no image
        raise OSError("ldd did not list the interpreter's libraries")
    return binary, stdlib, [*_hops(sys.executable), *libs, "/etc/ld.so.cache"]


def _hops(path: str) -> list[str]:
    """The links from `path` to the binary outside a venv (the venv's own come from the host
    with site_packages): /venv/bin/python -> .../bin/python3 -> python3.11."""
    venv = os.path.realpath(sys.prefix) if sys.prefix != sys.base_prefix else None
    hops, seen = [], set()
    while os.path.islink(path) and path not in seen:
        seen.add(path)
        if venv is None or not os.path.realpath(os.path.dirname(path)).startswith(venv):
            hops.append(path)
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    return hops


def _mirror(path: str, root: str) -> None:
    """Copy host `path` into the image at the same path, links as links (each link on the way
    is made too, then followed), a dir whole (without the skipped parts)."""
    current = ""
    parts = path.strip("/").split("/")
    for i, part in enumerate(parts):
        current += "/" + part
        if os.path.islink(current):
            link = root + current
            if not os.path.lexists(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(os.readlink(current), link)
            target = os.path.normpath(os.path.join(os.path.dirname(current),
                                                   os.readlink(current)))
            return _mirror("/".join([target, *parts[i + 1:]]), root)
    dst = root + current
    if os.path.lexists(dst) or not os.path.exists(current):
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.isdir(current):
        shutil.copytree(current, dst, symlinks=True,
                        ignore=lambda _d, names: [n for n in names if _skipped(n)])
    else:
        shutil.copy2(current, dst)


def _freeze(root: str) -> None:
    """atime of everything far in the future (see the module docstring); dirs 0755."""
    for path, dirs, files in os.walk(root):
        os.chmod(path, 0o755)
        for name in [*dirs, *files]:
            full = os.path.join(path, name)
            info = os.lstat(full)
            os.utime(full, ns=(FUTURE_NS, info.st_mtime_ns), follow_symlinks=False)
    info = os.lstat(root)
    os.utime(root, ns=(FUTURE_NS, info.st_mtime_ns))


def _on_tmpfs(path: str) -> bool:
    """Whether `path` is a mount point of a tmpfs (from /proc/self/mounts)."""
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1:3] == [path, "tmpfs"] for line in mounts)


def _usable(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (os.path.isdir(path) and not os.path.islink(path) and info.st_uid == os.geteuid()
            and not info.st_mode & 0o022)


_lock = threading.Lock()


def image_root() -> str | None:
    """The image for this interpreter (built on first use, again if it was removed); None
    where there is no writable tmpfs at PARENT or the copy fails (the sandbox then binds
    the host's dirs: host.gaps says what that leaves open)."""
    with _lock:
        root = _built()
        if root is not None and not os.path.isdir(root):
            _built.cache_clear()
            root = _built()
        return root


@functools.cache
def _built() -> str | None:
    try:
        binary, stdlib, libs = _wanted()
        info = os.stat(binary)
        key = hashlib.sha256(repr((binary, info.st_mtime_ns, info.st_size, stdlib, libs,
                                   sorted(SKIPPED), 1)).encode()).hexdigest()[:16]
        final = os.path.join(PARENT, f"tts-sandbox-image-{os.geteuid()}-{key}")
        if _usable(final):
            return final
        if not _on_tmpfs(PARENT):
            return None
        build = tempfile.mkdtemp(prefix=".tts-sandbox-image-", dir=PARENT)
        try:
            for path in (binary, stdlib, *libs):
                _mirror(path, build)
            _freeze(build)
            os.rename(build, final)
        except OSError:
            shutil.rmtree(build, ignore_errors=True)
            if not _usable(final):  # another caller may have won the race
                return None
        return final
    except (OSError, subprocess.SubprocessError, KeyError):
        return None


def entries(root: str) -> list[tuple[str, ...]]:
    """Layout entries (see host.layout) putting the image's top-level dirs and links in place."""
    out: list[tuple[str, ...]] = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if os.path.islink(full):
            out.append(("symlink", os.readlink(full), "/" + name))
        else:
            out.append(("ro-bind", full, "/" + name))
    return out


def library_path(root: str) -> str:
    """LD_LIBRARY_PATH for the image's interpreter run outside a mount namespace (rlimits):
    the image's dirs of shared libraries, so that no library is read from the host."""
    dirs = {os.path.dirname(os.path.join(path, name)) for path, _dirs, files in os.walk(root)
            for name in files if (name.endswith(".so") or ".so." in name)
            and "/lib-dynload" not in path}
    return ":".join(sorted(dirs))
