"""OS-level confinement for the sandbox's processes: seccomp, namespaces, Landlock, capabilities.

Exec'd by `_sandbox_runner` (the untrusted program's process) and `_sandbox_judge` (the trusted
judge) before anything else runs; its source travels in their payloads, so nothing needs to be
importable inside the sandbox. All of it goes through libc with ctypes (x86_64 Linux).
"""

import os
import struct

# -- seccomp ----------------------------------------------------------------------------
# x86_64 syscall numbers the processes never need. A deny list, because an allow list for
# CPython and the C extensions it loads is brittle; namespaces and limits do the rest.
DENIED_SYSCALLS = (
    56, 57, 58, 59, 322,  # clone (processes and threads), fork, vfork, execve, execveat
    13, 129, 297, 200, 424, 434, 438,  # rt_sigaction (no handlers), queued signals, tkill, pidfd_*
    101, 310, 311, 312,  # ptrace, process_vm_readv/writev, kcmp
    41,  # socket (socketpair stays: it reaches nothing outside)
    272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442,  # namespaces and mounts
    321, 298, 323, 425, 426, 427,  # bpf, perf_event_open, userfaultfd, io_uring (skips seccomp)
    248, 249, 250,  # kernel keyrings
    303, 304,  # name_to_handle_at, open_by_handle_at: opens files past mount boundaries
    141, 251, 256, 279, 440, 448,  # setpriority, ioprio_set, migrate/move_pages, process_madvise/mrelease
    73, 162, 306, 324, 300,  # flock (blocks others' locks), sync, syncfs, membarrier, fanotify_init
    159, 164, 227, 305, 170, 171, 172, 173, 103, 153, 163, 179,  # clocks, host names, port I/O, syslog...
    246, 320, 175, 313, 176, 169, 167, 168,  # kexec, kernel modules, reboot, swap
)
KILL, TGKILL, PRLIMIT64, CLONE3 = 62, 234, 302, 435
SCHED_SETPARAM, SCHED_SETSCHEDULER, SCHED_SETAFFINITY, SCHED_SETATTR = 142, 144, 203, 314
FCNTL, IOCTL = 72, 16
# fcntl commands that signal or stall another process: F_SETOWN, F_SETSIG, F_SETOWN_EX (SIGIO
# and SIGURG to any pid), F_SETLEASE (an opener waits for the lease break), record locks
FCNTL_DENIED = (8, 10, 15, 1024, 6, 7, 37, 38)
F_SETFL, O_ASYNC = 4, 0x2000
# ioctls that do the same: FIOSETOWN, SIOCSPGRP, FIOASYNC; on terminals TIOCSPGRP, TIOCSTI
# (typing into another's terminal), TIOCSCTTY, TIOCSIG, TIOCCONS, TIOCLINUX
IOCTL_DENIED = (0x8901, 0x8902, 0x5452, 0x5410, 0x5412, 0x540E, 0x40045436, 0x541D, 0x541C)
AUDIT_ARCH_X86_64, X32_BIT = 0xC000003E, 0x40000000
# classic BPF opcodes and seccomp return values
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
NR, ARCH = 0, 4  # offsets into struct seccomp_data; argument i's low 32 bits at 16 + 8 i
ALLOW, KILL_PROCESS = 0x7FFF0000, 0x80000000
EPERM, ENOSYS = 0x00050000 | 1, 0x00050000 | 38


def _op(code, k, jt=0, jf=0):  # jt/jf: instructions to skip if the test is true/false
    return struct.pack("HBBI", code, jt, jf, k)


def _arg(i):
    return 16 + 8 * i


def _check(nr, body, default):
    """Instructions that, for syscall `nr`, run `body` and return; other syscalls skip them.
    body: (code, k, jt, jf) with jt/jf None (next instruction), "allow" or "deny"; falling
    off its end returns `default`."""
    n = len(body)
    where = {"allow": n + (default != ALLOW), "deny": n + (default == ALLOW)}
    prog = [_op(code, k, *(0 if t is None else where[t] - i - 1 for t in (jt, jf)))
            for i, (code, k, jt, jf) in enumerate(body)]
    prog += [_op(RET_K, default), _op(RET_K, EPERM if default == ALLOW else ALLOW)]
    return [_op(JEQ_K, nr, 0, len(prog)), *prog]


def syscall_filter(own_pid):
    """The seccomp program, as a list of 8-byte BPF instructions. Besides the deny list: signals,
    rlimits and scheduling only for the process itself (pid 0 means "self" where the call allows
    it); no fcntl/ioctl that makes the kernel signal another process or makes it wait."""
    prog = [_op(LD_ABS_W, ARCH), _op(JEQ_K, AUDIT_ARCH_X86_64, 1, 0), _op(RET_K, KILL_PROCESS),
            _op(LD_ABS_W, NR), _op(JGE_K, X32_BIT, 0, 1), _op(RET_K, EPERM),
            _op(JEQ_K, CLONE3, 0, 1), _op(RET_K, ENOSYS)]  # ENOSYS: glibc falls back to clone
    for nr in DENIED_SYSCALLS:
        prog += [_op(JEQ_K, nr, 0, 1), _op(RET_K, EPERM)]
    self_pids: dict = {KILL: (own_pid,), TGKILL: (own_pid,)}
    for nr in (PRLIMIT64, SCHED_SETPARAM, SCHED_SETSCHEDULER, SCHED_SETAFFINITY, SCHED_SETATTR):
        self_pids[nr] = (own_pid, 0)
    for nr, pids in self_pids.items():
        prog += _check(nr, [(LD_ABS_W, _arg(0), None, None),
                            *((JEQ_K, pid, "allow", None) for pid in pids)], default=EPERM)
    prog += _check(FCNTL, [(LD_ABS_W, _arg(1), None, None),
                           *((JEQ_K, cmd, "deny", None) for cmd in FCNTL_DENIED),
                           (JEQ_K, F_SETFL, None, "allow"), (LD_ABS_W, _arg(2), None, None),
                           (JSET_K, O_ASYNC, "deny", None)], default=ALLOW)
    prog += _check(IOCTL, [(LD_ABS_W, _arg(1), None, None),
                           *((JEQ_K, cmd, "deny", None) for cmd in IOCTL_DENIED)], default=ALLOW)
    return prog + [_op(RET_K, ALLOW)]


def install_seccomp(libc, ctypes):
    """Load the filter into this process for good; False where it does not apply (not x86_64).
    Unlike RLIMIT_NPROC it also holds for uid 0."""
    if os.uname().machine != "x86_64":
        return False
    prog = syscall_filter(os.getpid())
    code = ctypes.create_string_buffer(b"".join(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(code))
    # PR_SET_NO_NEW_PRIVS (required for unprivileged filters), then PR_SET_SECCOMP FILTER
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0):
        raise OSError(ctypes.get_errno(), "seccomp")
    return True


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
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2
SYS_PIVOT_ROOT, SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MNT_DETACH = 155, 442, -100, 0x8000, 2


def enter_unshare(libc, ctypes, layout, tmp_bytes, info_fd):
    """Own user, mount, pid, net, ipc, uts and cgroup namespaces, and a new root built from
    `layout` (the entries code.py also gives bwrap): read-only binds of the system and the
    interpreter, device nodes, capped tmpfs /tmp and /work, no /proc; nothing else of the
    host (its home dirs, projects, data) exists inside. Then fork twice: this process stays
    outside and waits; its child is pid 1 of the new namespace (when it dies, everything in
    the namespace dies); the grandchild, pid 2, returns from here to run the program, after a
    nested user namespace took every capability over these mounts."""

    def check(result, what):
        if result != 0:
            raise OSError(ctypes.get_errno(), f"unshare setup: {what}")

    libc.syscall.restype = ctypes.c_long
    uid, gid = os.geteuid(), os.getegid()
    check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
                       | CLONE_NEWUTS | CLONE_NEWCGROUP), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    root, tmpfs = "/tmp", []  # the new root is a tmpfs mounted over /tmp, then pivoted to
    check(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                     b"size=1m,mode=0755"), "root tmpfs")
    for kind, *args in layout:
        if kind == "tmpfs":
            os.makedirs(root + args[0], exist_ok=True)
            tmpfs.append(args[0])
        elif kind == "symlink":
            os.makedirs(os.path.dirname(root + args[1]), exist_ok=True)
            os.symlink(args[0], root + args[1])
        else:  # ro-bind, ro-bind-try, dev
            binds = [(f"/dev/{n}", f"/dev/{n}") for n in DEVICES] if kind == "dev" else [args]
            for src, dst in binds:
                if kind != "ro-bind-try" or os.path.exists(src):
                    _bind(libc, check, src, root + dst)
    os.chdir(root)
    check(libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")

    class MountAttr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]

    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr),
                       ctypes.sizeof(attr)), "read-only /")
    for path in tmpfs:
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                         f"size={tmp_bytes},mode=0700".encode()), f"tmpfs {path}")
    os.chdir(tmpfs[-1] if tmpfs else "/")
    _fork_init(libc, ctypes, info_fd)
    check(libc.unshare(CLONE_NEWUSER), "drop capabilities")


DEVICES = ("null", "zero", "full", "random", "urandom")


def _bind(libc, check, src, dst):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
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
