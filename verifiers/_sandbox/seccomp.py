"""The sandbox's seccomp filter: an allowlist, every other system call fails with EPERM.

Exec'd (its source travels in the payloads, in front of confine.py's) by the untrusted
program's process (role "runner") and the trusted judge ("judge"); x86_64 only.

The list is a measurement: `python -m reports.studies.sandbox_syscalls` runs HumanEval's canonical
solutions, the project's code tasks (problems.codegen) and a few honest stdlib programs under
strace with this filter swapped for an allow-all one, and prints every call each role made
once confined. Why each family is allowed:

- memory: mmap, munmap, mprotect, mremap, brk (the allocator, extension modules mapped in);
  madvise only to free or hint (not WILLNEED, COLD, PAGEOUT, MERGEABLE, POPULATE: those move
  pages in or out of the page cache another run could observe, or merge pages across processes).
- reading files: openat (read-only unless the role may write), read, pread64, readv, lseek,
  close, newfstatat, fstat, statx, getdents64, readlink(at), faccessat(2), getcwd: imports.
- own fds: write, writev, dup, dup2, dup3, fcntl (descriptor flags, dup, O_NONBLOCK only: no
  signal owners, leases, locks, seals, pipe resizing), ioctl (TCGETS, TIOCGWINSZ, FIONBIO,
  FIOCLEX, FIONCLEX: isatty and blocking mode only).
- time: gettimeofday, time, nanosleep; clock_gettime, clock_getres and clock_nanosleep on the
  system clocks and its own CPU clocks only (ids 0-11: no other process's CPU time).
- itself: getpid, gettid, getppid, get[e]uid, get[e]gid, getgroups, uname, getrusage, times,
  sched_getaffinity (pid 0 or its own), prlimit64 (read its own limits only), getrandom,
  sched_yield, futex (FUTEX_PRIVATE_FLAG only: a shared futex is keyed by the file page it
  sits on, so two runs mapping the same interpreter image could wait and wake each other),
  rt_sigprocmask, rt_sigreturn, kill and tgkill (itself only: abort),
  exit, exit_group.
- writing its tmpfs (runner under bwrap/unshare only, where /tmp and /work are size-capped
  tmpfs that die with the run): openat for writing, pwrite64, ftruncate, fsync, fdatasync,
  mkdir(at), rmdir, unlink(at), rename(at,at2), symlink(at), chmod, fchmod, fchmodat,
  utimensat, chdir, fchdir; ftruncate in every role (read-only roles have no writable file
  but the stdin memfd, made before the filter: a case's input is written there).
- judge only: poll (its pipes to the program, with a deadline).

Denied by omission, among others: processes and threads (clone, fork, exec), sockets and
socketpair (no fds parked in flight with SCM_RIGHTS), pipes, SysV and POSIX IPC, memfd_create,
fallocate, io_setup and io_uring (memory and quotas past the rlimits), mincore, readahead,
fadvise64, preadv2/pwritev2 (RWF_NOWAIT) and cachestat (page-cache residency: a channel
between runs), mlock, inotify, fanotify, eventfd, epoll, signalfd, timerfd, userfaultfd,
keyrings, bpf, perf, ptrace, mounts and namespaces, rt_sigaction (no signal handlers),
setrlimit, scheduling, priorities, sysinfo.
"""

import os
import struct

SYSCALLS = {  # x86_64 numbers
    "read": 0, "write": 1, "close": 3, "fstat": 5, "poll": 7, "lseek": 8, "mmap": 9,
    "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigprocmask": 14, "rt_sigreturn": 15,
    "ioctl": 16, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "sched_yield": 24,
    "mremap": 25, "madvise": 28, "dup": 32, "dup2": 33, "nanosleep": 35, "getpid": 39,
    "exit": 60, "kill": 62, "uname": 63, "fcntl": 72, "fsync": 74, "fdatasync": 75,
    "ftruncate": 77, "getcwd": 79, "chdir": 80, "fchdir": 81, "rename": 82, "mkdir": 83,
    "rmdir": 84, "unlink": 87, "symlink": 88, "readlink": 89, "chmod": 90, "fchmod": 91,
    "gettimeofday": 96, "getrusage": 98, "times": 100, "getuid": 102, "getgid": 104,
    "geteuid": 107, "getegid": 108, "getppid": 110, "getgroups": 115, "gettid": 186,
    "time": 201, "futex": 202, "sched_getaffinity": 204, "getdents64": 217,
    "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230, "exit_group": 231,
    "tgkill": 234, "openat": 257, "mkdirat": 258, "newfstatat": 262, "unlinkat": 263,
    "renameat": 264, "symlinkat": 266, "readlinkat": 267, "fchmodat": 268, "faccessat": 269,
    "utimensat": 280, "dup3": 292, "prlimit64": 302, "renameat2": 316, "getrandom": 318,
    "statx": 332, "faccessat2": 439,
}
_PLAIN = (  # allowed whatever the arguments (see the module docstring)
    "mmap", "munmap", "mprotect", "mremap", "brk", "read", "pread64", "readv", "lseek", "close",
    "newfstatat", "fstat", "statx", "getdents64", "readlink", "readlinkat", "faccessat",
    "faccessat2", "getcwd", "write", "writev", "dup", "dup2", "dup3",
    "gettimeofday", "time", "nanosleep", "getpid", "gettid",
    "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "uname", "getrusage",
    "times", "getrandom", "sched_yield", "rt_sigprocmask", "rt_sigreturn", "exit",
    "exit_group", "ftruncate")
_TMPFS_WRITES = ("pwrite64", "fsync", "fdatasync", "mkdir", "mkdirat", "rmdir",
                 "unlink", "unlinkat", "rename", "renameat", "renameat2", "symlink", "symlinkat",
                 "chmod", "fchmod", "fchmodat", "utimensat", "chdir", "fchdir")
MADVISE_ALLOWED = (0, 1, 2, 4, 8, 14, 15)  # NORMAL RANDOM SEQUENTIAL DONTNEED FREE (NO)HUGEPAGE
# F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL (checked below), F_DUPFD_CLOEXEC, F_GETPIPE_SZ
FCNTL_ALLOWED = (0, 1, 2, 3, 1030, 1032)
F_SETFL, O_ASYNC = 4, 0x2000
# clock ids 0-11: REALTIME, MONOTONIC, its own PROCESS/THREAD_CPUTIME, MONOTONIC_RAW, the COARSE
# ones, BOOTTIME, the ALARMs, TAI; a negative id is another process's or thread's CPU clock
CLOCKS_END = 12
IOCTL_ALLOWED = (0x5401, 0x5413, 0x5421, 0x5451, 0x5450)  # TCGETS TIOCGWINSZ FIONBIO FIO(N)CLEX
# openat flags that write or create: O_WRONLY O_RDWR O_CREAT O_TRUNC __O_TMPFILE
OPEN_WRITING = 0x1 | 0x2 | 0x40 | 0x200 | 0x400000
FUTEX_PRIVATE_FLAG = 128

AUDIT_ARCH_X86_64, X32_BIT = 0xC000003E, 0x40000000
# classic BPF opcodes and seccomp return values
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
NR, ARCH = 0, 4  # offsets into struct seccomp_data; argument i's low 32 bits at 16 + 8 i
ALLOW, KILL_PROCESS, EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | 1


def _op(code, k, jt=0, jf=0):  # jt/jf: instructions to skip if the test is true/false
    return struct.pack("HBBI", code, jt, jf, k)


def _arg(i, high=False):
    return 16 + 8 * i + 4 * high


def _check(nr, body):
    """Instructions that, for syscall `nr`, run `body` and return; other syscalls skip them.
    body: (code, k, jt, jf) with jt/jf None (next instruction), an int (skip that many),
    "allow" or "deny"; falling
    off its end denies."""
    n = len(body)
    where = {"deny": n, "allow": n + 1}
    prog = [_op(code, k, *(0 if t is None else t if type(t) is int else where[t] - i - 1
                           for t in (jt, jf)))
            for i, (code, k, jt, jf) in enumerate(body)]
    prog += [_op(RET_K, EPERM), _op(RET_K, ALLOW)]
    return [_op(JEQ_K, nr, 0, len(prog)), *prog]


def _one_of(arg, values):
    """Allow when argument `arg` (low 32 bits) is one of `values`."""
    return [(LD_ABS_W, _arg(arg), None, None), *((JEQ_K, v, "allow", None) for v in values)]


def allowed(role):
    """The syscall numbers allowed with any arguments, for a role: "judge", "runner" (the
    program under bwrap or unshare: its tmpfs is writable) or "runner-readonly" (rlimits)."""
    names = (_PLAIN + (("poll",) if role == "judge" else ())
             + (("openat", *_TMPFS_WRITES) if role == "runner" else ()))
    return sorted(SYSCALLS[name] for name in names)


def _rules(own_pid, role):
    """{call: BPF body} for the calls allowed in some forms only (see _check)."""
    rules = {
        "kill": _one_of(0, (own_pid,)), "tgkill": _one_of(0, (own_pid,)),
        "sched_getaffinity": _one_of(0, (0, own_pid)),
        # read its own limits: pid 0 or its own, and no new limit (a NULL pointer)
        "prlimit64": [(LD_ABS_W, _arg(0), None, None), (JEQ_K, 0, 1, None),
                      (JEQ_K, own_pid, None, "deny"), (LD_ABS_W, _arg(2), None, None),
                      (JEQ_K, 0, None, "deny"), (LD_ABS_W, _arg(2, True), None, None),
                      (JEQ_K, 0, "allow", "deny")],
        "madvise": _one_of(2, MADVISE_ALLOWED),
        **dict.fromkeys(("clock_gettime", "clock_getres", "clock_nanosleep"),
                        [(LD_ABS_W, _arg(0), None, None), (JGE_K, CLOCKS_END, "deny", "allow")]),
        "ioctl": _one_of(1, IOCTL_ALLOWED),
        "futex": [(LD_ABS_W, _arg(1), None, None), (JSET_K, FUTEX_PRIVATE_FLAG, "allow", "deny")],
        "fcntl": [*_one_of(1, FCNTL_ALLOWED), (JEQ_K, F_SETFL, None, "deny"),
                  (LD_ABS_W, _arg(2), None, None), (JSET_K, O_ASYNC, "deny", "allow")],
    }
    if role != "runner":  # read-only: no flag that writes or creates
        rules["openat"] = [(LD_ABS_W, _arg(2), None, None), (JSET_K, OPEN_WRITING, "deny", "allow")]
    return rules


FILTERED = tuple(_rules(0, "judge"))  # the calls allowed in some forms only, in some role


def syscall_filter(own_pid, role):
    """The seccomp program, as a list of 8-byte BPF instructions (see the module docstring)."""
    prog = [_op(LD_ABS_W, ARCH), _op(JEQ_K, AUDIT_ARCH_X86_64, 1, 0), _op(RET_K, KILL_PROCESS),
            _op(LD_ABS_W, NR), _op(JGE_K, X32_BIT, 0, 1), _op(RET_K, EPERM)]
    for nr in allowed(role):
        prog += [_op(JEQ_K, nr, 0, 1), _op(RET_K, ALLOW)]
    for name, body in _rules(own_pid, role).items():
        prog += _check(SYSCALLS[name], body)
    return prog + [_op(RET_K, EPERM)]


def install_seccomp(libc, ctypes, role):
    """Load the filter for `role` into this process for good; False where it does not apply
    (not x86_64). Unlike RLIMIT_NPROC it also holds for uid 0."""
    if os.uname().machine != "x86_64":
        return False
    prog = syscall_filter(os.getpid(), role)
    code = ctypes.create_string_buffer(b"".join(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(code))
    # PR_SET_NO_NEW_PRIVS (required for unprivileged filters), then PR_SET_SECCOMP FILTER
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0):
        raise OSError(ctypes.get_errno(), "seccomp")
    return True
