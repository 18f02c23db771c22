"""A small seccomp deny-list for the bubblewrap sandbox, as a raw BPF program (what `bwrap --seccomp FD` reads).

Namespaces and rlimits leave a few kernel interfaces that matter for untrusted code:
  - memory that no rlimit counts: memfd_create (write() into a memfd needs no mapping, so RLIMIT_AS never sees
    it) and SysV shared memory (shmget: segments outlive their mapping);
  - large kernel attack surface with little use for a test program: io_uring, bpf, perf_event_open,
    userfaultfd, keyctl and friends, mount / namespace calls, module and kexec loading;
  - reaching into other processes of the same uid: ptrace, process_vm_readv/writev, pidfd_getfd.
These return EPERM. Any syscall from a foreign ABI (i386 `int 0x80`, x32 on x86_64) kills the process, since the
numbers above would not match there. Architectures other than x86_64 and aarch64 get no filter (`build()`
returns None) and rely on namespaces and rlimits alone.
"""

from __future__ import annotations

import errno
import platform
import struct

_DENIED = (
    "memfd_create", "memfd_secret", "shmget", "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf",
    "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "ptrace", "process_vm_readv",
    "process_vm_writev", "pidfd_getfd", "unshare", "setns", "mount", "umount2", "pivot_root", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "swapon", "swapoff", "reboot", "acct", "syslog", "quotactl",
    "open_by_handle_at", "name_to_handle_at",
)

# From the kernel headers (asm/unistd_64.h for x86_64, asm-generic/unistd.h for aarch64).
_NUMBERS = {
    "x86_64": dict(
        ptrace=101, process_vm_readv=310, process_vm_writev=311, keyctl=250, add_key=248, request_key=249,
        bpf=321, perf_event_open=298, userfaultfd=323, memfd_create=319, shmget=29, io_uring_setup=425,
        io_uring_enter=426, io_uring_register=427, unshare=272, setns=308, mount=165, umount2=166, pivot_root=155,
        open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, kexec_load=246,
        kexec_file_load=320, init_module=175, finit_module=313, delete_module=176, swapon=167, swapoff=168,
        reboot=169, acct=163, syslog=103, memfd_secret=447, pidfd_getfd=438, quotactl=179, open_by_handle_at=304,
        name_to_handle_at=303,
    ),
    "aarch64": dict(
        ptrace=117, process_vm_readv=270, process_vm_writev=271, keyctl=219, add_key=217, request_key=218,
        bpf=280, perf_event_open=241, userfaultfd=282, memfd_create=279, shmget=194, io_uring_setup=425,
        io_uring_enter=426, io_uring_register=427, unshare=97, setns=268, mount=40, umount2=39, pivot_root=41,
        open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, kexec_load=104,
        kexec_file_load=294, init_module=105, finit_module=273, delete_module=106, swapon=224, swapoff=225,
        reboot=142, acct=89, syslog=116, memfd_secret=447, pidfd_getfd=438, quotactl=60, open_by_handle_at=265,
        name_to_handle_at=264,
    ),
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000

# BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_OFFSET_NR = 0
_OFFSET_ARCH = 4


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture, or None when it is not one we have numbers for."""
    machine = machine or platform.machine()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower())
    if machine not in _NUMBERS:
        return None
    numbers = sorted({_NUMBERS[machine][name] for name in _DENIED})
    # Layout: arch check, load nr, [x32 check], one JEQ per denied number, ALLOW, ERRNO, KILL.
    head = [
        (_LD_W_ABS, 0, 0, _OFFSET_ARCH),
        ("jeq_arch",),
        (_LD_W_ABS, 0, 0, _OFFSET_NR),
    ]
    if machine == "x86_64":
        head.append(("jge_x32",))
    body_start = len(head)
    allow_at = body_start + len(numbers)
    errno_at, kill_at = allow_at + 1, allow_at + 2
    program = []
    for i, insn in enumerate(head):
        if insn[0] == "jeq_arch":  # native arch: fall through; else jump to KILL
            program.append(_insn(_JEQ_K, 0, kill_at - i - 1, _AUDIT_ARCH[machine]))
        elif insn[0] == "jge_x32":  # x32 syscall numbers: KILL
            program.append(_insn(_JGE_K, kill_at - i - 1, 0, _X32_SYSCALL_BIT))
        else:
            program.append(_insn(*insn))
    for j, number in enumerate(numbers):
        i = body_start + j
        program.append(_insn(_JEQ_K, errno_at - i - 1, 0, number))
    program.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    program.append(_insn(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    program.append(_insn(_RET_K, 0, 0, _RET_KILL_PROCESS))
    return b"".join(program)
