#!/usr/bin/env python3
"""tools/pcsample.py TID [SAMPLES] — where a running thread is, without gdb.

Attaches to the thread with ptrace (root or CAP_SYS_PTRACE), reads its instruction pointer and
scans 64 KiB of its stack for words that point into executable mappings (the return addresses of
its callers, plus some stale values: read it as "probably called from"). Each address is printed as
object+offset and, where addr2line is installed, as function and line. Used by scripts/gpu.sh's
f32-hang stage on the GPU machine, which has no gdb.
"""
import ctypes
import os
import struct
import subprocess
import sys
import time

PTRACE_GETREGS, PTRACE_ATTACH, PTRACE_DETACH = 12, 16, 17
# struct user_regs_struct (x86-64): rip is the 17th, rsp the 20th u64
RIP, RSP = 16, 19


def maps(pid):
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            p = line.split()
            if len(p) < 6 or "x" not in p[1]:
                continue
            lo, hi = (int(v, 16) for v in p[0].split("-"))
            out.append((lo, hi, int(p[2], 16), p[5]))
    return out


def where(addr, mp):
    for lo, hi, off, path in mp:
        if lo <= addr < hi:
            return path, addr - lo + off
    return None, None


def resolve(path, off):
    try:
        r = subprocess.run(["addr2line", "-f", "-C", "-e", path, hex(off)], capture_output=True,
                           text=True, timeout=20)
        return " ".join(r.stdout.split())
    except (OSError, subprocess.SubprocessError):
        return "?"


def sample(tid, libc):
    pid = int(open(f"/proc/{tid}/status").read().split("Tgid:")[1].split()[0])
    regs = (ctypes.c_ulonglong * 27)()
    if libc.ptrace(PTRACE_ATTACH, tid, None, None) != 0:
        print(f"pcsample: cannot attach to {tid}: errno {ctypes.get_errno()}")
        return
    try:
        os.waitpid(tid, 0x40000000)  # __WALL: a thread of another process
        libc.ptrace(PTRACE_GETREGS, tid, None, ctypes.byref(regs))
        rip, rsp = regs[RIP], regs[RSP]
        stack = b""
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
            at = rsp
            while len(stack) < 65536:  # page by page: the stack's mapping may end sooner
                n = 4096 - at % 4096
                try:
                    f.seek(at)
                    stack += f.read(n)
                except OSError:
                    break
                at += n
    except OSError as e:
        stack = b""
        print(f"pcsample: reading {tid}: {e}")
    finally:
        libc.ptrace(PTRACE_DETACH, tid, None, None)
    mp = maps(pid)
    path, off = where(rip, mp)
    print(f"== tid {tid}: pc {rip:#x} {path}+{off:#x} {resolve(path, off) if path else ''}")
    seen = 0
    for i in range(0, len(stack) - 7, 8):
        (w,) = struct.unpack_from("<Q", stack, i)
        path, off = where(w, mp)
        if path and seen < 40:
            seen += 1
            print(f"   sp+{i:#06x}: {path.rsplit('/', 1)[-1]}+{off:#x} {resolve(path, off)}")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: tools/pcsample.py TID [SAMPLES]")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
        sample(int(sys.argv[1]), libc)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
