"""Go interop: a checkpoint the torch worker writes loads unchanged in Go's
model.LoadServing (through `asyncrl engine --weights DIR`, which serves it),
and Go's next-token logprobs equal torch's to float tolerance, at temperature
1 and 0.7 (the engines' logprobs are log_softmax(logits / T), as the loss
assumes). Needs the asyncrl binary: $ASYNCRL_BIN, or `go` on PATH to build it
from this repository; skipped when neither is available."""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest
import torch

from asyncrl_worker.model import load_serving
from asyncrl_worker.worker import Worker
from util import init_frame, train_frame

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def asyncrl_bin(tmp_path_factory):
    b = os.environ.get("ASYNCRL_BIN")
    if b:
        assert os.access(b, os.X_OK), f"ASYNCRL_BIN={b} is not an executable"
        return b
    go = shutil.which("go")
    if go is None or not os.path.exists(os.path.join(ROOT, "cmd", "asyncrl")):
        pytest.skip("no asyncrl binary: set ASYNCRL_BIN or put go on PATH")
    out = str(tmp_path_factory.mktemp("bin") / "asyncrl")
    r = subprocess.run([go, "build", "-o", out, "./cmd/asyncrl"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"go build ./cmd/asyncrl failed (tree mid-edit?): {r.stderr[-2000:]}")
    return out


@pytest.fixture
def engine(asyncrl_bin):
    procs = []

    def start(weights):
        p = subprocess.Popen([asyncrl_bin, "engine", "--weights", str(weights), "--listen", "127.0.0.1:0"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                return m.group(1)
        pytest.fail("asyncrl engine did not start:\n" + "".join(lines))

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.stdout.close()


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_go_engine_serves_the_torch_checkpoint_with_equal_logprobs(engine, tmp_path):
    w = Worker()
    assert w.handle(init_frame(tmp_path / "out"))["type"] == "Ready"
    with torch.no_grad():  # a sharper distribution than the near-uniform init
        w.policy.net.head.weight.mul_(40)
    r = w.handle(train_frame(1))
    assert r["type"] == "StepResult", r
    ck = r["checkpoint"]
    model = load_serving(ck)  # the BF16 weights Go loads
    url = engine(ck)
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as resp:
        models = json.loads(resp.read())
    assert models["data"][0]["max_model_len"] == model.max_seq_len  # config.json was read
    V = model.vocab_size
    prompts = [[1, 40, 41, 42], [1], [1, 70, 71, 72, 80, 81, 3, 4, 5]]
    for temp in (1.0, 0.7):
        resp = post(url + "/v1/completions", {"model": models["data"][0]["id"], "prompt": prompts, "max_tokens": 1,
                                              "logprobs": V, "temperature": temp, "return_tokens_as_token_ids": True})
        assert len(resp["choices"]) == len(prompts)
        for ch in resp["choices"]:
            p = prompts[ch["index"]]
            go_lp = {int(k.split(":")[1]): v for k, v in ch["logprobs"]["top_logprobs"][0].items()}
            assert len(go_lp) == V
            with torch.no_grad():
                ours = torch.log_softmax(model.next_logits(p).double() / temp, -1)
            diff = max(abs(go_lp[i] - float(ours[i])) for i in range(V))
            assert diff < 1e-4, (temp, p, diff)
            # far from uniform (log 1/98 = -4.58 everywhere), so the comparison is not trivial
            assert float(ours.max() - ours.min()) > 3


def test_go_engine_agrees_with_the_committed_fixture(engine):
    """The fixture tests/testdata/torch_serving (make_fixture.py) is served by Go
    with the logprobs its JSON's logits imply, so a Go-side test may rely on it."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
    with open(os.path.join(here, "torch_serving_logits.json")) as f:
        fx = json.load(f)
    url = engine(os.path.join(here, fx["checkpoint"]))
    ctxs = [c for c in fx["contexts"] if c["tokens"]]  # the engine needs a non-empty prompt
    resp = post(url + "/v1/completions", {"model": "asyncrl-policy", "prompt": [c["tokens"] for c in ctxs],
                                          "max_tokens": 1, "logprobs": 98, "temperature": 1.0,
                                          "return_tokens_as_token_ids": True})
    for ch in resp["choices"]:
        want = torch.log_softmax(torch.tensor(ctxs[ch["index"]]["logits"], dtype=torch.float64), -1)
        got = {int(k.split(":")[1]): v for k, v in ch["logprobs"]["top_logprobs"][0].items()}
        assert max(abs(got[i] - float(want[i])) for i in range(98)) < 1e-4
