"""A SkyRL-Gym-style environment, written against BaseTextEnv's interface
(skyrl-gym/skyrl_gym/envs/base_text_env.py, NovaSky-AI/SkyRL
@4855491334a957020cd17ad7c1d78e33c20d2635): __init__(env_config, extras)
with the dataset row as extras, init(prompt) -> (prompt, metadata),
step(action: str) -> {"observations", "reward", "done", "metadata"}, close().
It parses the model's <tool_call> itself, as SkyRL-Gym's tool environments
do, and answers a calc call with the result; a final answer holding the
ground truth earns 1. Used by tests/test_server.py and by the Go test that
runs it inside `asyncrl run` (cluster/node).

SPEC is what `python3 -m asyncrl_envs --env skyrl_calc_env:SPEC` serves.
FAIL_ON, when a prompt's text contains it, makes step raise (the failure path).
"""

import json
import re

try:  # the real base class when SkyRL-Gym is installed; the interface otherwise
    from skyrl_gym.envs.base_text_env import BaseTextEnv
except ImportError:  # pragma: no cover - skyrl_gym is not a Debian package
    class BaseTextEnv:
        def __init__(self):
            self.turns = 0
            self.max_turns = 1

        def init(self, prompt):
            return prompt, {}

        def close(self):
            pass

from asyncrl_envs import EnvSpec, SkyRLAdapter

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


class CalcEnv(BaseTextEnv):
    def __init__(self, env_config, extras={}):
        super().__init__()
        self.ground_truth = str(extras["reward_spec"]["ground_truth"])
        self.max_turns = int(extras.get("max_turns", env_config.get("max_turns", 3)))
        self.fail = "explode" in json.dumps(extras.get("prompt", ""))

    def init(self, prompt):
        return prompt, {"ground_truth_len": len(self.ground_truth)}

    def step(self, action):
        self.turns += 1
        if self.fail:
            raise RuntimeError("calculator backend unavailable")
        m = TOOL_CALL.search(action)
        if m:
            try:
                call = json.loads(m.group(1))
                expr = str(call["arguments"]["expr"])
                if not re.fullmatch(r"[0-9+\-*/ ()]{1,40}", expr):
                    raise ValueError("only arithmetic")
                result = str(eval(expr, {"__builtins__": {}}))  # arithmetic only, checked above
            except Exception as e:  # noqa: BLE001 - the model's mistake, told to it
                result = "error: %s" % e
            done = self.turns >= self.max_turns
            obs = [] if done else [{"role": "tool", "content": result}]
            return {"observations": obs, "reward": 0.0, "done": done, "metadata": {"tool": True}}
        reward = 1.0 if self.ground_truth in action else 0.0
        return {"observations": [], "reward": reward, "done": True, "metadata": {}}


DATASET = [
    {"id": "add-%d" % i, "prompt": [{"role": "system", "content": "Use the calc tool, then answer."},
                                   {"role": "user", "content": "What is %d+%d?" % (i, 2 * i + 1)}],
     "env_class": "calc", "reward_spec": {"method": "rule", "ground_truth": str(3 * i + 1)}}
    for i in range(1, 9)
] + [{"id": "boom", "prompt": [{"role": "user", "content": "explode"}], "reward_spec": {"ground_truth": "0"}}]

TOOLS = [{"type": "function", "function": {"name": "calc", "description": "Evaluate an arithmetic expression.",
                                           "parameters": {"type": "object", "properties": {"expr": {"type": "string"}},
                                                          "required": ["expr"]}}}]

SPEC = EnvSpec(name="skyrl_calc", adapter=SkyRLAdapter(CalcEnv, DATASET[:-1], {"max_turns": 3}, TOOLS),
               max_turns=3, max_tokens_per_turn=48)
# FAILING serves the same environment on the row whose step raises.
FAILING = EnvSpec(name="skyrl_calc_failing", adapter=SkyRLAdapter(CalcEnv, DATASET[-1:], {}, TOOLS),
                  max_turns=3, max_tokens_per_turn=48)
