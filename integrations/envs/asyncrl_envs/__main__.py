"""python3 -m asyncrl_envs --env module:attr [--listen host:port]

attr is an EnvSpec, or a function returning one. The module is imported
from the working directory or PYTHONPATH.
"""

import argparse
import importlib
import sys

from .server import serve
from .skyrl import EnvSpec


def main(argv=None):
    ap = argparse.ArgumentParser(prog="asyncrl_envs", description=__doc__)
    ap.add_argument("--env", required=True, help="module:attr naming an EnvSpec (or a function returning one)")
    ap.add_argument("--listen", default="127.0.0.1:0", help="host:port (port 0 = any free port)")
    a = ap.parse_args(argv)
    mod, _, attr = a.env.partition(":")
    if not attr:
        ap.error("--env must be module:attr")
    spec = getattr(importlib.import_module(mod), attr)
    if callable(spec) and not isinstance(spec, EnvSpec):
        spec = spec()
    if not isinstance(spec, EnvSpec):
        ap.error("%s is not an asyncrl_envs.EnvSpec" % a.env)
    host, _, port = a.listen.rpartition(":")
    serve(spec, host or "127.0.0.1", int(port or 0))


if __name__ == "__main__":
    sys.exit(main())
