"""The chat-environment server over real HTTP, with a SkyRL-Gym-style env."""

import json
import os
import sys
import threading
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from asyncrl_envs import make_server, EnvSpec, FunctionAdapter  # noqa: E402
import skyrl_calc_env  # noqa: E402


@pytest.fixture
def serve():
    servers = []

    def start(spec):
        srv = make_server(spec)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        host, port = srv.server_address[:2]
        base = "http://%s:%d" % (host, port)

        def call(path, body=None):
            req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())
        return call
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_skyrl_episode(serve):
    call = serve(skyrl_calc_env.SPEC)
    assert call("/info") == (200, {"name": "skyrl_calc", "max_turns": 3, "max_tokens_per_turn": 48})
    code, r = call("/reset", {"prompt": {"id": "add-2~77", "text": "", "seed": 77}})
    assert code == 200
    # the row is found by id (before the ~seed suffix), init's prompt is the opening
    assert r["messages"][1] == {"role": "user", "content": "What is 2+5?"}
    assert r["tools"][0]["function"]["name"] == "calc"
    assert r["metadata"] == {"ground_truth_len": 1}
    eid = r["episode_id"]
    code, s = call("/step", {"episode_id": eid, "action": {
        "text": '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+5"}}\n</tool_call>',
        "message": {"role": "assistant", "content": ""}}})
    assert (code, s["messages"], s["reward"], s["done"]) == (200, [{"role": "tool", "content": "7"}], 0.0, False)
    code, s = call("/step", {"episode_id": eid, "action": {"text": "It is 7.", "message": {}}})
    assert (code, s["reward"], s["done"]) == (200, 1.0, True)
    # done forgets the episode
    code, e = call("/step", {"episode_id": eid, "action": {"text": "x"}})
    assert code == 404 and "unknown episode" in e["error"]


def test_row_by_seed_and_close(serve):
    call = serve(skyrl_calc_env.SPEC)
    _, r = call("/reset", {"prompt": {"id": "other", "seed": 9}})
    assert r["messages"][1]["content"] == "What is 2+5?"  # row 9 % 8 = 1
    assert call("/close", {"episode_id": r["episode_id"]}) == (200, {})
    assert call("/step", {"episode_id": r["episode_id"], "action": {"text": "x"}})[0] == 404


def test_env_exception_is_500_with_reason(serve):
    call = serve(skyrl_calc_env.FAILING)
    _, r = call("/reset", {"prompt": {"id": "boom", "seed": 0}})
    code, e = call("/step", {"episode_id": r["episode_id"], "action": {"text": "1"}})
    assert code == 500 and "calculator backend unavailable" in e["error"]


def test_bad_body_and_path(serve):
    call = serve(skyrl_calc_env.SPEC)
    assert call("/nope", {})[0] == 404
    assert call("/step", [1, 2])[0] == 400


def test_function_adapter(serve):
    def setup(row):
        return [{"role": "user", "content": "say %s" % row["word"]}], {"word": row["word"], "tries": 0}

    def respond(messages, state):
        state["tries"] += 1
        if state["word"] in messages[-1]["content"]:
            return [], 1.0, True
        return [{"role": "user", "content": "no, say %s" % state["word"]}], 0.0, state["tries"] >= 2

    call = serve(EnvSpec(name="say", adapter=FunctionAdapter(setup, respond, [{"word": "bead"}])))
    _, r = call("/reset", {"prompt": {"seed": 3}})
    _, s = call("/step", {"episode_id": r["episode_id"], "action": {"message": {"role": "assistant", "content": "bed"}}})
    assert s["messages"] == [{"role": "user", "content": "no, say bead"}] and not s["done"]
    _, s = call("/step", {"episode_id": r["episode_id"], "action": {"message": {"role": "assistant", "content": "bead"}}})
    assert (s["reward"], s["done"]) == (1.0, True)
