"""A worker whose parent dies exits on its own, even while it is blocked in
the group's rendezvous where it reads no stdin (asyncrl_worker.parent): a
killed node leaves no rank behind where the Go side's parent-death signal
does not reach (here the parent is a plain Python process, which sets
none)."""

import os
import signal
import socket
import subprocess
import sys
import time

from util import init_frame

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PARENT = r"""
import os, subprocess, sys
sys.path.insert(0, os.environ["PYTHONPATH"])
sys.path.insert(0, os.environ["ASYNCRL_TESTS"])
from asyncrl_worker.frames import encode_frame
from util import init_frame
port, out = int(sys.argv[1]), sys.argv[2]
w = subprocess.Popen([sys.executable, "-m", "asyncrl_worker"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
# rank 0 of 2 with a long rendezvous: it blocks in the join, rank 1 never comes
f = {**init_frame(out), "group": {"rank": 0, "world_size": 2, "addr": "127.0.0.1", "port": port, "timeout_s": 300}}
w.stdin.write(encode_frame(f))
w.stdin.flush()
print(w.pid, flush=True)
sys.stdin.read()  # until killed
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped (a container's init may not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except FileNotFoundError:
        return True
    return s[s.rindex(")") + 2] == "Z"

def kill_parent_expect_gone(parent, pid):
    """SIGKILL parent; its child pid must be gone within 10 s."""
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 10
    while not gone(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs 10 s after its parent was SIGKILLed"
        time.sleep(0.05)


def reap(parent, pid):
    """Leave nothing running whatever the test's outcome."""
    parent.kill()
    parent.wait(10)
    if not gone(pid):
        os.kill(pid, signal.SIGKILL)



def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_worker_exits_when_its_parent_is_killed_mid_rendezvous(tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=PKG, OMP_NUM_THREADS="1", ASYNCRL_TESTS=os.path.dirname(__file__))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(port), str(tmp_path / "out")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    pid = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 120
        while not listening(port):  # rank 0 hosts the rendezvous store: it is in the join
            assert time.monotonic() < deadline, "the worker never reached the rendezvous"
            assert not gone(pid), "the worker died before its parent"
            time.sleep(0.05)
        kill_parent_expect_gone(parent, pid)
    finally:
        reap(parent, pid)


SLEEPER = r"""
import subprocess, sys
code = ("import time\nfrom asyncrl_worker import parent\nparent._death_signal = lambda: False\n"
        "assert parent.watch(0.05)\nprint('watching', flush=True)\ntime.sleep(300)")
w = subprocess.Popen([sys.executable, "-c", code])
print(w.pid, flush=True)
sys.stdin.read()
"""


def test_parent_watch_without_the_death_signal():
    """Where no parent-death signal is armed (another OS, prctl refused),
    the watch thread alone ends the orphan."""
    env = dict(os.environ, PYTHONPATH=PKG)
    parent = subprocess.Popen([sys.executable, "-c", SLEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env, text=True)
    pid = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline().strip() == "watching"
        kill_parent_expect_gone(parent, pid)
    finally:
        reap(parent, pid)
