"""Serve Python environments to asyncrl over its chat-environment contract.

asyncrl's rollouts speak the wire form of tasks/chatenv (GET /info, POST
/reset, /step, /close; docs/environments.md). This package serves, with the
standard library only:

  * SkyRL-Gym text environments (skyrl_gym.envs.base_text_env.BaseTextEnv:
    ``__init__(env_config, extras)``, ``init(prompt) -> (messages, metadata)``,
    ``step(action: str) -> {"observations", "reward", "done", "metadata"}``,
    ``close()``; read from NovaSky-AI/SkyRL skyrl-gym/skyrl_gym/envs/
    base_text_env.py @4855491334a957020cd17ad7c1d78e33c20d2635) -- see
    skyrl.SkyRLAdapter;
  * verifiers-style multi-turn environments written as two functions
    (``setup(row) -> state``, ``respond(messages, state) -> (new messages,
    reward, done)``) -- see skyrl.FunctionAdapter.

skyrl_gym itself is not needed: environments are duck-typed to the
interface, so an environment written for SkyRL-Gym runs unchanged.

    python3 -m asyncrl_envs --env mymodule:SPEC --listen 127.0.0.1:0
"""

from .server import serve, make_server  # noqa: F401
from .skyrl import SkyRLAdapter, FunctionAdapter, EnvSpec  # noqa: F401
