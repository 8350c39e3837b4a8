"""Adapters from Python environment interfaces to asyncrl's chat contract.

An adapter makes episodes: ``reset(prompt) -> (messages, tools, metadata)``
and, per episode, ``step(action) -> (messages, reward, done, metadata)`` and
``close()``, where ``prompt`` is asyncrl's {"id", "text", "seed"} and
``action`` is {"message": the assistant message with parsed tool_calls,
"text": the model's whole turn}.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional


@dataclass
class EnvSpec:
    """What the server serves.

    name, max_turns, max_tokens_per_turn: GET /info.
    adapter: a SkyRLAdapter or FunctionAdapter.
    """

    name: str
    adapter: Any
    max_turns: int = 5
    max_tokens_per_turn: int = 256


def _row_for(dataset: List[Dict[str, Any]], prompt: Dict[str, Any]) -> Dict[str, Any]:
    """The dataset row of a prompt: the row whose "id" is the prompt's id
    (before asyncrl's "~seed" suffix), else row seed mod len(dataset)."""
    if not dataset:
        raise ValueError("the environment's dataset is empty")
    pid = str(prompt.get("id", "")).split("~")[0]
    for row in dataset:
        if pid and str(row.get("id", "")) == pid:
            return row
    return dataset[int(prompt.get("seed", 0)) % len(dataset)]


class _SkyRLEpisode:
    def __init__(self, env):
        self.env = env

    def step(self, action: Dict[str, Any]):
        # BaseTextEnv.step reads the model's text (it parses tool calls
        # itself); its BaseTextEnvStepOutput is a TypedDict.
        out = self.env.step(action.get("text", ""))
        get = out.get if isinstance(out, dict) else (lambda k, d=None: getattr(out, k, d))
        msgs = list(get("observations", None) or [])
        return msgs, float(get("reward", 0.0) or 0.0), bool(get("done", False)), dict(get("metadata", None) or {})

    def close(self):
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


class SkyRLAdapter:
    """Serves a SkyRL-Gym BaseTextEnv class.

    env_class(env_config, extras) is built per episode with extras = the
    dataset row (SkyRL's dataset rows: {"prompt": [messages], "env_class",
    "reward_spec": {...}, "extra_info": {...}}); init(row["prompt"]) gives
    the opening messages. A postprocessed_action in step's output is ignored:
    the trajectory keeps the tokens the model sampled.
    """

    def __init__(self, env_class: Callable[..., Any], dataset: List[Dict[str, Any]],
                 env_config: Optional[Dict[str, Any]] = None, tools: Optional[List[Any]] = None):
        self.env_class = env_class
        self.dataset = dataset
        self.env_config = env_config or {}
        self.tools = tools

    def reset(self, prompt: Dict[str, Any]):
        row = _row_for(self.dataset, prompt)
        env = self.env_class(self.env_config, dict(row))
        conv, meta = env.init([dict(m) for m in row["prompt"]])
        return list(conv), self.tools, dict(meta or {}), _SkyRLEpisode(env)


class _FunctionEpisode:
    def __init__(self, respond, state, messages):
        self.respond, self.state, self.messages = respond, state, messages

    def step(self, action: Dict[str, Any]):
        self.messages.append(action.get("message") or {"role": "assistant", "content": action.get("text", "")})
        new, reward, done = self.respond(self.messages, self.state)
        self.messages.extend(new)
        return list(new), float(reward), bool(done), {}

    def close(self):
        pass


class FunctionAdapter:
    """A verifiers-style multi-turn environment as two functions:
    setup(row) -> (opening messages, state) and
    respond(messages so far, state) -> (new messages, reward, done)."""

    def __init__(self, setup, respond, dataset, tools=None):
        self.setup, self.respond, self.dataset, self.tools = setup, respond, dataset, tools

    def reset(self, prompt: Dict[str, Any]):
        row = _row_for(self.dataset, prompt)
        messages, state = self.setup(dict(row))
        return list(messages), self.tools, {}, _FunctionEpisode(self.respond, state, list(messages))
