"""Run by gdb's own Python (`gdb -x gdb_inject.py`), inside gdb, never inside hicache or the target.

While gdb holds the target stopped, it makes two calls in the target: `mmap` (a fresh page,
into which the injected text is written through ptrace) and `Py_AddPendingCall(
PyRun_SimpleString, page)`, then detaches. The interpreter runs the text later, on its main
thread, at a safe point.

On x86-64 the calls are made by hand rather than with gdb's `call`: gdb 13 and older cannot
write the extended register state of CPUs with AMX (Sapphire Rapids and later: "Couldn't
write extended state status: Bad address"), and its `call` aborts half way. By hand only
the general registers are written: on a thread blocked in a system call (caller-saved
registers, the vector ones included, are dead there by the calling convention), the
registers are saved, the stack pointer moved below the red zone with the executable's
entry point as return address (a breakpoint there, for this thread only), the function
entered, and everything put back once it returns - `orig_rax` too, so the interrupted
system call restarts as if nothing had happened. Elsewhere gdb's own call is used.

Its arguments come in the environment (HICACHE_GDB_ARGS, JSON); it prints marker lines that
inject.py reads. Written for any Python 3.6+ that a gdb embeds.
"""

import json
import os
import re

import gdb  # noqa: I001 - only inside gdb

MARK = "HICACHE-STEP"
GPRS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
        "r15", "rip", "eflags")  # fmt: skip
ARG_REGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
RED_ZONE = 1024  # below the interrupted stack pointer: the red zone (128 bytes) and some room
MAP_ANONYMOUS_PRIVATE, PROT_READ_WRITE = 0x22, 0x3
# x86-64 system calls whose threads are passed over, and the register that must be 0 for a
# thread in one to be called into anyway (None: never). A thread stopped in epoll_pwait
# (libuv's, torch's TCPStore server thread) jumped to address 0x11 after a call made there,
# 6 times of 6 beside other load (why is not established; its mask register was 0, as in an
# epoll_wait, whose threads take such calls). The calls that wait under a signal mask of
# their own are passed over too when given one; glibc's select() is pselect6 without (Python
# 3.10's time.sleep): its threads are called into as before.
PASSED_OVER = {
    130: None,  # rt_sigsuspend
    270: "r9",  # pselect6
    271: "r10",  # ppoll
    281: None,  # epoll_pwait
    441: None,  # epoll_pwait2
}


def step(name, *values):
    print(" ".join([MARK, name] + [str(v) for v in values]), flush=True)


def reg(name):
    return int(gdb.newest_frame().read_register(name))


def select(thread):
    """The thread, at its innermost frame: registers are written there, never in a caller's."""
    thread.switch()
    gdb.newest_frame().select()


def address(symbol):
    return int(gdb.parse_and_eval("(unsigned long)&" + symbol))


class HandCall:
    """x86-64: calls made on one thread, writing only general registers."""

    def __init__(self, thread, entry):
        self.thread = thread
        self.entry = entry

    def __call__(self, function, *args):
        select(self.thread)
        saved = {name: reg(name) for name in GPRS + ("orig_rax",)}
        stack = ((saved["rsp"] - RED_ZONE) & ~0xF) - 8  # 16-byte aligned before the call pushed its return
        gdb.selected_inferior().write_memory(stack, self.entry.to_bytes(8, "little"))
        trap = gdb.Breakpoint(f"*{self.entry}", internal=True)
        trap.thread = self.thread.num
        try:
            for index, value in enumerate(args):
                gdb.execute(f"set ${ARG_REGS[index]} = {value}")
            gdb.execute("set $rax = 0")
            gdb.execute("set $orig_rax = -1")  # no system call to restart on the way in
            gdb.execute(f"set $rsp = {stack}")
            gdb.execute(f"set $rip = {function}")
            for _ in range(1000):  # other threads' stops (signals) come back here too
                gdb.execute("continue")
                if gdb.selected_thread().num == self.thread.num and reg("rip") == self.entry:
                    break
            else:
                raise gdb.error("the call did not return")
            select(self.thread)
            return reg("rax")
        finally:
            trap.delete()
            select(self.thread)
            for name in GPRS:
                gdb.execute(f"set ${name} = {saved[name]}")
            gdb.execute(f"set $orig_rax = {saved['orig_rax']}")


def gdb_call(function, *args):
    """Elsewhere: gdb's own inferior call (it saves and restores every register)."""
    types = ", ".join(["unsigned long"] * len(args))
    values = ", ".join(f"(unsigned long)({v})" for v in args)
    return int(gdb.parse_and_eval(f"((long (*)({types})){function})({values})"))


def in_syscall_thread(main_pid):
    """A thread blocked in a system call, another than the main one if there is one (the
    main thread may be inside the interpreter's pending-call lock where it was stopped), and
    not in one of PASSED_OVER."""
    threads = sorted(gdb.selected_inferior().threads(), key=lambda t: (t.ptid[1] == main_pid, t.num))
    for thread in threads:
        select(thread)
        call = reg("orig_rax")
        if call >= 0 and not (call in PASSED_OVER and (PASSED_OVER[call] is None or reg(PASSED_OVER[call]) != 0)):
            return thread
    return None


def start_time(pid):
    """The process's start time in clock ticks since boot, as lifecycle.process_start reads it."""
    with open("/proc/%d/stat" % pid, "rb") as handle:  # noqa: UP031 - any Python 3 a gdb embeds
        stat = handle.read()
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def entry_point():
    found = re.search(r"Entry point: (0x[0-9a-f]+)", gdb.execute("info files", to_string=True))
    return int(found.group(1), 16) if found else None


def main():
    args = json.loads(os.environ["HICACHE_GDB_ARGS"])
    with open(args["text_file"], "rb") as handle:
        text = handle.read() + b"\0"
    gdb.execute("set confirm off")
    gdb.execute("set pagination off")
    step("attached")
    # Held by the debugger now, the pid cannot be reused; if it already names another process
    # than the one hicache looked at, nothing is done in it.
    if args.get("start") and start_time(args["pid"]) != args["start"]:
        step("reused")
        return
    gdb.execute("sharedlibrary libc[.-]")
    gdb.execute("sharedlibrary libpython")
    pending, run_string, mmap = address("Py_AddPendingCall"), address("PyRun_SimpleString"), address("mmap")
    munmap = address("munmap")
    step("symbols", pending, run_string)
    if "x86-64" in gdb.selected_inferior().architecture().name():
        thread, entry = in_syscall_thread(args["pid"]), entry_point()
        if thread is None or entry is None:
            step("nothread")
            return
        call = HandCall(thread, entry)
        step("thread", thread.ptid[1], reg("orig_rax"), hex(reg("rip")), len(gdb.selected_inferior().threads()))
    else:
        call = gdb_call
    size = len(text) + (-len(text) % 4096)
    page = call(mmap, 0, size, PROT_READ_WRITE, MAP_ANONYMOUS_PRIVATE, -1, 0) & ((1 << 64) - 1)
    if page in (0, (1 << 64) - 1):
        return
    step("page", page)
    empty = ("(0x%016x,0x%08x)" % (0, size)).encode()  # noqa: UP031 - inject.page_slot's format
    text = text.replace(empty, ("(0x%016x,0x%08x)" % (page, size)).encode(), 1)  # noqa: UP031
    gdb.selected_inferior().write_memory(page, text)
    queued = call(pending, run_string, page) & 0xFFFFFFFF
    if queued != 0:
        call(munmap, page, size)
        return
    step("queued")


try:
    main()
finally:
    gdb.execute("detach")
