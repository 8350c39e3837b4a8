import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@pytest.fixture(scope="session")
def asyncrl_bin(tmp_path_factory):
    """asyncrl's binary: $ASYNCRL_BIN if set, else `go build ./cmd/asyncrl`
    from the repository root (three levels above this directory), once per
    session. Without `go` (and no $ASYNCRL_BIN) the tests using it skip."""
    env = os.environ.get("ASYNCRL_BIN")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"ASYNCRL_BIN={env} is not an executable")
        return env
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go interop: `go` is not on PATH and ASYNCRL_BIN is not set, so asyncrl cannot be built")
    if not os.path.isfile(os.path.join(REPO, "go.mod")):
        pytest.skip(f"Go interop: {REPO} is not the asyncrl repository (no go.mod); set ASYNCRL_BIN")
    out = str(tmp_path_factory.mktemp("bin") / "asyncrl")
    p = subprocess.run([go, "build", "-o", out, "./cmd/asyncrl"], cwd=REPO, capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail(f"go build ./cmd/asyncrl failed in {REPO} (set ASYNCRL_BIN to a built binary):\n{p.stderr[-3000:]}")
    return out
