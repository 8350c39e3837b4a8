"""python3 -m asyncrl_worker: serve frames on stdin/stdout until Shutdown or EOF,
or until the process that started it dies (asyncrl_worker.parent).

stdout carries frames only: the real fd 1 is kept for frames and fd 1 is
pointed at stderr, so a stray print (ours or a library's, Python or C) lands
in the log instead of corrupting the stream."""

import logging
import os
import sys


def main() -> int:
    frame_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("ASYNCRL_WORKER_LOG", "INFO"),
                        format="asyncrl_worker %(levelname)s %(message)s")
    from .parent import watch

    watch()  # before torch's import: a parent may die during its seconds
    from .worker import serve

    rd = os.fdopen(0, "rb", buffering=0)
    wr = os.fdopen(frame_fd, "wb")
    return serve(rd, wr)


if __name__ == "__main__":
    sys.exit(main())
