"""Every env id the suite ships, registered by "module:attr" so no task is imported here."""

from optima_envs.registration import EnvSpec, register

register(EnvSpec(
    name="synth-hop-ia", version=1, entry_point="optima_envs.tasks.synth_hop:make_task", family="ia",
    description="Invented-world two/three-hop and comparison questions; facts split between agents (token F1).",
    changes={1: "first release"},
))
register(EnvSpec(
    name="synth-arith-debate", version=1, entry_point="optima_envs.tasks.synth_arith:make_task", family="debate",
    description="Multi-step arithmetic word problems, solver + critic debate (numeric exact match).",
    changes={1: "first release"},
))
