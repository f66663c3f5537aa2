"""OS-level confinement for the sandbox's processes: namespaces, Landlock, capabilities.

Exec'd, after seccomp.py (the seccomp filter), by `runner.py` (the untrusted
program's process) and `judge.py` (the trusted judge) before anything else runs; its
source travels in their payloads, so nothing needs to be importable inside the sandbox. All of it goes through libc with ctypes (x86_64 Linux).
"""

import os
import struct

# -- process attributes -----------------------------------------------------------------

def die_with_parent(libc, ctypes, parent):
    """SIGKILL this process when its parent goes (PR_SET_PDEATHSIG), and exit now if the parent
    (pid `parent`, 0 to skip the check) is already gone."""
    if libc.prctl(1, 9, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "PR_SET_PDEATHSIG")
    if parent and os.getppid() != parent:
        os._exit(70)


def undumpable(libc, ctypes):
    """PR_SET_DUMPABLE 0: other processes of the same uid cannot open this one's /proc files
    (mem, fd, environ) or ptrace it without CAP_SYS_PTRACE."""
    if libc.prctl(4, 0, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "PR_SET_DUMPABLE")


def drop_capabilities(libc, ctypes):
    """Empty effective, permitted and inheritable sets (capset, version 3). uid 0 then still
    owns root's files but can no longer override permissions, trace or signal others."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    data = (ctypes.c_uint32 * 6)()
    if libc.capset(ctypes.byref(Header(0x20080522, 0)), data):
        raise OSError(ctypes.get_errno(), "capset")


# -- Landlock ---------------------------------------------------------------------------
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
FS_READ = 1 | 4 | 8  # execute, read_file, read_dir
FS_FILE = 1 | 2 | 4 | (1 << 14)  # the rights a rule on a file (not a directory) may grant


def landlock(libc, ctypes, readable, writable):
    """Restrict this process's filesystem access to reading beneath `readable` paths and all
    of it beneath `writable` ones (nothing else, /proc included); on ABI 6+ also no signals
    or abstract unix sockets beyond the sandbox. Returns the ABI, 0 where Landlock is off."""
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(LANDLOCK_CREATE_RULESET, None, 0, 1)
    if abi <= 0:
        return 0
    fs = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)
    attr = struct.pack("QQQ", fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, attr, size, 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for paths, rights in ((readable, FS_READ), (writable, fs)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # absent here: nothing to allow
                try:
                    allowed = rights & FS_FILE if not os.path.isdir(path) else rights
                    if path.startswith("/dev/"):
                        allowed |= 2  # device files: write (to /dev/null) too
                    rule = struct.pack("=Qi", allowed, fd)
                    if libc.syscall(LANDLOCK_ADD_RULE, ruleset, 1, rule, 0):
                        raise OSError(ctypes.get_errno(), f"landlock rule for {path}")
                finally:
                    os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) or libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


# -- unshare mode: what bwrap would do ---------------------------------------------------
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x20000, 0x40000000, 0x20000000
CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP = 0x08000000, 0x04000000, 0x02000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 0x1000, 0x4000, 0x40000
MS_MOVE = 0x2000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2
SYS_PIVOT_ROOT, SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MNT_DETACH = 155, 442, -100, 0x8000, 2


def enter_unshare(libc, ctypes, layout, tmp_bytes, tmp_inodes, info_fd):
    """Own user, mount, pid, net, ipc, uts and cgroup namespaces, and a new root built from
    `layout` (the entries code.py also gives bwrap): read-only binds of the system and the
    interpreter, device nodes, capped tmpfs /tmp and /work, no /proc; nothing else of the
    host (its home dirs, projects, data) exists inside. Then fork twice: this process stays
    outside and waits; its child is pid 1 of the new namespace (when it dies, everything in
    the namespace dies); the grandchild, pid 2, returns from here to run the program, after a
    nested user namespace took every capability over these mounts."""

    check = _checker(ctypes, "unshare setup")
    libc.syscall.restype = ctypes.c_long
    _enter_user_namespace(libc, check, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
                          | CLONE_NEWUTS | CLONE_NEWCGROUP, as_root=True)
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    # the new root is a tmpfs staged over /proc (not /tmp: a venv there is a source), then
    # pivoted to; each bind is made read-only as it is made, then the root itself
    root, tmpfs = "/proc", []
    check(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                     b"size=1m,mode=0755"), "root tmpfs")

    class MountAttr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]

    def read_only(path, flags):
        attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
        check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr),
                           ctypes.sizeof(attr)), f"read-only {path}")

    for kind, *args in layout:
        if kind == "tmpfs":
            os.makedirs(root + args[0], exist_ok=True)
            check(libc.mount(b"tmpfs", (root + args[0]).encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                             f"size={tmp_bytes},nr_inodes={tmp_inodes},mode=0700".encode()),
                  f"tmpfs {args[0]}")
            tmpfs.append(args[0])
        elif kind == "symlink":
            os.makedirs(os.path.dirname(root + args[1]), exist_ok=True)
            os.symlink(args[0], root + args[1])
        elif kind in ("mask", "mask-file"):
            _mask(libc, check, kind, root + args[0])
        else:  # ro-bind, ro-bind-try, dev
            binds = [(f"/dev/{n}", f"/dev/{n}") for n in DEVICES] if kind == "dev" else [args]
            for src, dst in binds:
                if kind != "ro-bind-try" or os.path.exists(src):
                    _bind(libc, check, src, root + dst)
                    read_only(root + dst, AT_RECURSIVE)
    os.chdir(root)
    check(libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    read_only("/", 0)
    os.chdir(tmpfs[-1] if tmpfs else "/")
    _fork_init(libc, ctypes, info_fd)
    check(libc.unshare(CLONE_NEWUSER), "drop capabilities")


DEVICES = ("null", "zero", "full", "random", "urandom")


def finish_bwrap(libc, ctypes, layout, tmp_bytes, tmp_inodes):
    """bwrap mode: what bwrap 0.8 cannot do, or does slowly. In a user and mount namespace of
    its own, this process mounts the layout's tmpfs capped in size and inodes (inodes are
    kernel memory; bwrap caps only the size), hides site-packages' data files (a bind each
    costs bwrap milliseconds), covers /proc (bwrap mounted it for the uid map written here)
    with an empty read-only tmpfs, then gives the capabilities up in a nested user namespace."""

    check = _checker(ctypes, "bwrap setup")

    _enter_user_namespace(libc, check, CLONE_NEWNS, as_root=False)
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    paths = [path for kind, path, *_ in layout if kind == "tmpfs"]
    # binds bwrap made below a tmpfs (a venv under /tmp): moved aside onto a staging tmpfs
    # over /proc while the capped tmpfs go on, then back on top of them
    below = [dst for kind, *rest in layout if kind in ("ro-bind", "ro-bind-try")
             for dst in rest[1:] if any(dst.startswith(p + "/") for p in paths)
             and os.path.exists(dst)]
    check(libc.mount(b"tmpfs", b"/proc", b"tmpfs", MS_NOSUID | MS_NODEV,
                     b"size=64k,mode=0700"), "staging tmpfs")
    for i, dst in enumerate(below):
        _target(f"/proc/{i}", os.path.isdir(dst))
        check(libc.mount(dst.encode(), f"/proc/{i}".encode(), None, MS_BIND | MS_REC, None),
              f"stage {dst}")
    for path in paths:
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                         f"size={tmp_bytes},nr_inodes={tmp_inodes},mode=0700".encode()),
              f"tmpfs {path}")
    for i, dst in enumerate(below):
        _target(dst, os.path.isdir(f"/proc/{i}"))
        check(libc.mount(f"/proc/{i}".encode(), dst.encode(), None, MS_MOVE, None), f"move {dst}")
    for kind, path, *_ in layout:
        if kind in ("mask", "mask-file"):
            _mask(libc, check, kind, path)
    check(libc.mount(b"tmpfs", b"/proc", b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                     b"size=4k,nr_inodes=1,mode=0555"), "cover /proc")
    os.chdir(paths[-1])
    check(libc.unshare(CLONE_NEWUSER), "drop capabilities")


def _enter_user_namespace(libc, check, flags, as_root):
    """unshare a new user namespace (and `flags`), mapping this process's uid and gid to 0
    (as_root) or to themselves; /proc must be mounted."""
    uid, gid = os.geteuid(), os.getegid()
    check(libc.unshare(CLONE_NEWUSER | flags), "unshare")
    inside = (0, 0) if as_root else (uid, gid)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{inside[0]} {uid} 1"),
                       ("gid_map", f"{inside[1]} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _checker(ctypes, stage):
    """check(result, what): raise OSError (errno, what failed) for a nonzero libc result."""

    def check(result, what):
        if result != 0:
            raise OSError(ctypes.get_errno(), f"{stage}: {what}")

    return check


def _mask(libc, check, kind, path):
    """Hide a data dir under an empty read-only tmpfs, a data file under /dev/null."""
    if kind == "mask":
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                         b"size=4k,nr_inodes=1,mode=0555"), f"mask {path}")
    else:
        check(libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None), f"mask {path}")


def _target(path, is_dir):
    """An empty dir or file to mount on, its parents made."""
    if is_dir:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()


def _bind(libc, check, src, dst):
    _target(dst, os.path.isdir(src))
    check(libc.mount(src.encode(), dst.encode(), None, MS_BIND | MS_REC, None), f"bind {src}")


def _fork_init(libc, ctypes, info_fd):
    """This process waits outside the new pid namespace; its child becomes the namespace's
    pid 1 (fork_init), whose child returns."""
    init = os.fork()
    if init:  # outside: tell the parent which pid to kill, then wait
        os.write(info_fd, f'{{"child-pid": {init}}}'.encode())
        os.closerange(3, 1 << 16)
        os._exit(_status(os.waitpid(init, 0)[1]))
    fork_init(libc, ctypes)
    os.close(info_fd)


def fork_init(libc, ctypes):
    """Called as pid 1 of a pid namespace: stay there as its init, reaping until the program
    (the child, which returns from here) is gone, and exit with its status, a signal n as
    128 + n as bwrap does. When pid 1 dies, the kernel kills everything in its namespace.
    Under bwrap (--as-pid-1) this replaces bwrap's own init, which can exit before bwrap has
    reaped it and so leaves a zombie to the host's pid 1."""
    die_with_parent(libc, ctypes, 0)
    program = os.fork()
    if program:
        os.closerange(3, 1 << 16)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == program:
                os._exit(_status(status))
    die_with_parent(libc, ctypes, 0)


def _status(status):
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code
