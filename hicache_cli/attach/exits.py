"""How an attached process ended, as the kernel saw it.

An attached process is not hicache's child: its exit status is its parent's to read
(torchrun's, a shell's), and it is gone from /proc as soon as that parent has read it. The
kernel announces every process's exit, with the status waitpid(2) would give, to whoever
listens on its process events (the netlink process connector). hicache listens while it is
attached, where it may: that needs CAP_NET_ADMIN (root) in the initial network namespace,
and a kernel with process events (CONFIG_PROC_EVENTS). Elsewhere `start()` says why not,
and the report says what the process itself wrote as it went (its final line), or that
nothing can tell.

Listening reads; it never touches the processes. The launcher side: stdlib only.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

NETLINK_CONNECTOR = 11
CN_IDX_PROC = CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN, PROC_CN_MCAST_IGNORE = 1, 2
PROC_EVENT_EXIT = 0x80000000
NLMSG_DONE = 3
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")  # cn_msg: idx, val, seq, ack, len, flags
_EVENT = struct.Struct("=IIQ")  # proc_event: what, cpu, timestamp_ns
_EXIT = struct.Struct("=IIII")  # exit: pid, tgid, exit_code (a wait status), exit_signal
KEPT = 4096  # exits of processes not watched, kept in case one is asked for later


@dataclass(frozen=True)
class Exit:
    """A process's end as the kernel reported it: `status` as waitpid(2) gives it."""

    pid: int
    status: int
    at: float  # time.time() when hicache read it

    @property
    def exit_code(self) -> int | None:
        return (self.status >> 8) & 0xFF if self.status & 0x7F == 0 else None

    @property
    def signal(self) -> str | None:
        number = self.status & 0x7F
        if number == 0:
            return None
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"


class ExitWatch:
    """Listens to the kernel's process events on a thread of its own; `ended(pid)`."""

    def __init__(self) -> None:
        self._exits: OrderedDict[int, Exit] = OrderedDict()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.refusal: str | None = None  # why the kernel's events cannot be heard here

    def start(self) -> bool:
        """Subscribe; False (and `refusal` in words) where the kernel will not tell."""
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        except (OSError, AttributeError) as exc:
            self.refusal = f"the kernel's process events cannot be opened ({_why(exc)})"
            return False
        try:
            sock.bind((0, CN_IDX_PROC))
            sock.send(_request(PROC_CN_MCAST_LISTEN))
        except OSError as exc:
            sock.close()
            self.refusal = f"the kernel's process events are not open to hicache ({_why(exc)}: they need root)"
            return False
        self._sock = sock
        self._thread = threading.Thread(target=self._listen, name="hicache-exits", daemon=True)
        self._thread.start()
        return True

    def ended(self, pid: int) -> Exit | None:
        return self._exits.get(pid)

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._sock is not None:
            try:
                self._sock.send(_request(PROC_CN_MCAST_IGNORE))
            except OSError:
                pass
            self._sock.close()
            self._sock = None

    def _listen(self) -> None:
        sock = self._sock
        while sock is not None and not self._closed.is_set():
            try:
                ready, _, _ = select.select([sock], [], [], 0.2)
                if ready:
                    self._read(sock.recv(65536))
            except OSError:  # the socket closed under the thread, or the kernel dropped events
                if self._closed.is_set():
                    return
                time.sleep(0.05)

    def _read(self, data: bytes) -> None:
        at = 0
        while at + _NLMSG.size <= len(data):
            length = _NLMSG.unpack_from(data, at)[0]
            if length < _NLMSG.size:
                return
            body = at + _NLMSG.size + _CN_MSG.size
            if body + _EVENT.size + _EXIT.size <= at + length:
                what = _EVENT.unpack_from(data, body)[0]
                if what == PROC_EVENT_EXIT:
                    pid, tgid, status, _exit_signal = _EXIT.unpack_from(data, body + _EVENT.size)
                    if pid == tgid:  # the process, not one of its threads
                        self._note(Exit(tgid, status, time.time()))
            at += (length + 3) & ~3

    def _note(self, exit_: Exit) -> None:
        self._exits[exit_.pid] = exit_
        while len(self._exits) > KEPT:
            self._exits.popitem(last=False)


def _request(op: int) -> bytes:
    payload = struct.pack("=I", op)
    message = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
    return _NLMSG.pack(_NLMSG.size + len(message), NLMSG_DONE, 0, 0, os.getpid()) + message


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
