"""Multi-agent dialogue tasks as PettingZoo parallel environments.

    import optima_envs
    env = optima_envs.make("synth-hop-ia")
    observations, infos = env.reset(seed=0)
"""

from optima_envs import envs as _envs  # noqa: F401  (registers the shipped ids)
from optima_envs.core.dialogue_env import DialogueEnv
from optima_envs.core.state import DialogueState, EnvSnapshot
from optima_envs.core.task import Role, Task
from optima_envs.core.types import Evidence, Message, TaskInstance
from optima_envs.registration import EnvSpec, list_envs, make, pprint_registry, register, registry, spec

__all__ = [
    "DialogueEnv", "DialogueState", "EnvSnapshot", "EnvSpec", "Evidence", "Message", "Role", "Task",
    "TaskInstance", "list_envs", "make", "pprint_registry", "register", "registry", "spec",
]
