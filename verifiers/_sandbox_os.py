"""OS-level confinement for the sandbox child: a seccomp filter and namespace setup.

Used by `_sandbox_runner` inside the child before any untrusted code runs (its source travels in
the payload, so nothing needs to be readable inside the sandbox). ctypes is fine here: the
runner drops it and blocks re-imports before the program starts.
"""

import os
import struct

# x86_64 syscall numbers the program never needs. A deny list, because an allow list for
# CPython and the C extensions it loads is brittle; namespaces and limits do the rest.
DENIED_SYSCALLS = (
    56, 57, 58, 59, 322,  # clone (processes and threads), fork, vfork, execve, execveat
    13, 129, 297, 200, 424, 434, 438,  # rt_sigaction (no handlers), queued signals, tkill, pidfd_*
    101, 310, 311,  # ptrace, process_vm_readv/writev
    41,  # socket (socketpair stays: it reaches nothing outside)
    272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442,  # namespaces and mounts
    321, 298, 323, 425, 426, 427,  # bpf, perf_event_open, userfaultfd, io_uring (skips seccomp)
    248, 249, 250,  # kernel keyrings
    303, 304,  # name_to_handle_at, open_by_handle_at: opens files past mount boundaries
    141,  # setpriority on other processes
    246, 320, 175, 313, 176, 169, 167, 168,  # kexec, kernel modules, reboot, swap
)
CLONE3, KILL, TGKILL, PRLIMIT64 = 435, 62, 234, 302
AUDIT_ARCH_X86_64, X32_BIT = 0xC000003E, 0x40000000
# classic BPF opcodes and seccomp return values
LD_ABS_W, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
NR, ARCH, ARG0 = 0, 4, 16  # offsets into struct seccomp_data (arg0: its low 32 bits)
ALLOW, KILL_PROCESS = 0x7FFF0000, 0x80000000
EPERM, ENOSYS = 0x00050000 | 1, 0x00050000 | 38

CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 1, 2, 4, 0x4000, 0x40000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE = 442, -100, 0x8000


def syscall_filter(own_pid):
    """The seccomp program, as a list of 8-byte BPF instructions."""

    def op(code, k, jt=0, jf=0):  # jt/jf: instructions to skip if the test is true/false
        return struct.pack("HBBI", code, jt, jf, k)

    prog = [op(LD_ABS_W, ARCH), op(JEQ_K, AUDIT_ARCH_X86_64, 1, 0), op(RET_K, KILL_PROCESS),
            op(LD_ABS_W, NR), op(JGE_K, X32_BIT, 0, 1), op(RET_K, EPERM),
            op(JEQ_K, CLONE3, 0, 1), op(RET_K, ENOSYS)]  # ENOSYS: glibc falls back to clone
    for nr in DENIED_SYSCALLS:
        prog += [op(JEQ_K, nr, 0, 1), op(RET_K, EPERM)]
    # signals and prlimit only for the process itself (prlimit64 also takes pid 0 for "self")
    for nr, self_too in ((KILL, own_pid), (TGKILL, own_pid), (PRLIMIT64, 0)):
        prog += [op(JEQ_K, nr, 0, 5), op(LD_ABS_W, ARG0), op(JEQ_K, own_pid, 1, 0),
                 op(JEQ_K, self_too, 0, 1), op(RET_K, ALLOW), op(RET_K, EPERM)]
    return prog + [op(RET_K, ALLOW)]


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


def unshare_setup(libc, ctypes, hidden, tmp_bytes):
    """What bwrap would do, with unshare(2) and mounts: own user/mount/net/ipc/uts namespaces;
    the whole host tree read-only, nosuid and nodev (no raw disks); a fresh size-capped tmpfs on
    /tmp as the working dir; an empty /proc (no reading other processes' environ or memory); the
    `hidden` dirs covered. A second, nested user namespace then drops every capability over
    these mounts, so the program cannot undo any of it."""

    def check(result, what):
        if result != 0:
            raise OSError(ctypes.get_errno(), f"unshare setup: {what}")

    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    check(libc.unshare(flags), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")

    class MountAttr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]

    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
    libc.syscall.restype = ctypes.c_long
    check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr),
                       ctypes.sizeof(attr)), "read-only /")
    check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV,
                     f"size={tmp_bytes},mode=0700".encode()), "tmpfs /tmp")
    for path in ["/proc", *hidden]:
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                         b"size=4k"), f"hide {path}")
    os.chdir("/tmp")
    check(libc.unshare(CLONE_NEWUSER), "drop capabilities")
