"""The worker dies with the process that started it (docs/protocol.md
"Worker groups", "When a rank or a node dies").

asyncrl's Go side starts every rank with a parent-death signal on Linux
(SIGKILL when the node dies, even by SIGKILL). This is the worker's own
half, for what that does not cover: a wrapper command between asyncrl and
the worker (a shell that forks, a launcher), or a parent that exits
without killing its children. A worker that is idle notices through its
stdin's end of file; one that is busy — in a step, a checkpoint write, or
blocked in a collective or the rendezvous waiting for a rank that will
never come — would not. So:

- on Linux the worker asks the kernel for SIGKILL when its own parent dies
  (prctl PR_SET_PDEATHSIG): immediate, and it works while the main thread
  holds the GIL (torch's TCPStore waits for the other ranks without
  releasing it, so no Python thread runs then);
- everywhere a daemon thread polls the parent process id: when the parent
  is gone the worker is reparented (getppid changes) and exits.

Its gloo peers then fail their collective (the connection drops) instead
of waiting out the group's timeout.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading

log = logging.getLogger("asyncrl_worker")

# How often the parent is checked: a dead node's ranks are gone within
# about this (the Go side's death signal is immediate where it applies).
POLL_S = 0.5


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _death_signal() -> bool:
    """SIGKILL from the kernel when the parent dies (Linux; False elsewhere
    or when prctl is refused). The kernel's "parent" here is the thread that
    forked this process: a launcher must start workers from a thread that
    lives as long as they do (asyncrl's Go side holds its forking thread for
    the child's life)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch(poll_s: float = POLL_S, exit_code: int = 3) -> threading.Thread | None:
    """Start the watch on the current parent (none when this process is
    already an orphan or init's child: nothing to watch — a worker whose
    parent died before this ran reads its stdin's end of file and exits)."""
    ppid = os.getppid()
    if ppid <= 1:
        return None
    _death_signal()
    if os.getppid() != ppid:  # the parent died before the signal was armed
        os._exit(exit_code)

    def run():
        ev = threading.Event()
        while not ev.wait(poll_s):
            if os.getppid() != ppid:
                log.error("parent process %d is gone; exiting (a worker without its asyncrl node "
                          "would hold its rendezvous and memory)", ppid)
                logging.shutdown()
                os._exit(exit_code)

    t = threading.Thread(target=run, name="asyncrl-parent-watch", daemon=True)
    t.start()
    return t
