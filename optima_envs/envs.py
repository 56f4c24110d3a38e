"""Every env id the suite ships, registered by "module:attr" so no task is imported here."""

from optima_envs.registration import EnvSpec, register

#: Version 2 of every env: what changed in scoring and in the end of a dialogue.
_V2 = ("scoring agrees with the official scripts (whole-text exact match unless both sides are plain numbers; "
       "integers compare exactly; an answer naming two options is wrong; a closing tag cut off by the token "
       "limit is dropped; TriviaQA's own normaliser; a final equation in \\boxed{} is read on its right-hand "
       "side); an empty <A></A> is no answer; a dialogue ends when an answer repeats the last non-empty answer "
       "(the reference rule)")
_CHANGES = {1: "first release", 2: _V2}

register(EnvSpec(
    name="synth-hop-ia", version=2, entry_point="optima_envs.tasks.synth_hop:make_task", family="ia",
    description="Invented-world two/three-hop and comparison questions; facts split between agents (token F1).",
    changes=_CHANGES, heldout_kwargs={"split": "validation"},
))
register(EnvSpec(
    name="synth-arith-debate", version=2, entry_point="optima_envs.tasks.synth_arith:make_task", family="debate",
    description="Multi-step arithmetic word problems, solver + critic debate (numeric exact match).",
    changes=_CHANGES, heldout_kwargs={"split": "validation"},
))

# The paper's eight tasks, on the datasets' original release files or the hub's rows
# (pass data_dir=... / data_files=... on machines without the hub).
_DATASET_TASKS = (
    ("hotpotqa-ia", "hotpotqa", "ia",
     "HotpotQA distractor: supporting paragraphs dealt alternately, distractors at random (token F1)."),
    ("2wikimqa-ia", "twowikimqa", "ia",
     "2WikiMultiHopQA: supporting paragraphs dealt alternately, distractors at random (token F1)."),
    ("triviaqa-ia", "triviaqa", "ia",
     "TriviaQA rc: evidence snippets shuffled and dealt alternately (max token F1 over aliases)."),
    ("cbt-ia", "cbt", "ia",
     "Children's Book Test (CN/NE): story halves split, 10 candidates (exact match on the word)."),
    ("gsm8k-debate", "gsm8k", "debate",
     "GSM8K word problems, solver + critic debate, \\boxed{} answer (numeric exact match)."),
    ("math-debate", "hendrycks_math", "debate",
     "MATH competition problems, solver + critic debate, \\boxed{} answer (symbolic equivalence)."),
    ("arc-debate", "arc", "debate",
     "ARC-Challenge, 4-5 options, solver + critic debate, <A>letter</A> (exact match on the option)."),
    ("mmlu-debate", "mmlu", "debate",
     "MMLU, 57 subjects, 4 options, solver + critic debate, <A>letter</A> (exact match on the option)."),
)
# The questions each task is judged on, by the leaderboard and by training runs (whose configs'
# `task.eval_env_kwargs` default to these): the test split where the release labels it, else
# validation (dev).
_HELDOUT = {
    "hotpotqa-ia": {"split": "validation"}, "2wikimqa-ia": {"split": "validation"},
    "triviaqa-ia": {"split": "validation"}, "cbt-ia": {"split": "validation"}, "gsm8k-debate": {"split": "test"},
    "math-debate": {"split": "test", "subset": "math500"}, "arc-debate": {"split": "test"}, "mmlu-debate": {"split": "test"},
}
for _name, _module, _family, _description in _DATASET_TASKS:
    register(EnvSpec(name=_name, version=2, entry_point=f"optima_envs.tasks.{_module}:make_task", family=_family,
                     description=_description, changes=_CHANGES, heldout_kwargs=_HELDOUT[_name]))

# Multi-agent games: a fixed seat per agent, scored by the game's own rules.
register(EnvSpec(
    name="referential-game", version=2, entry_point="optima_envs.tasks.referential:make_task", family="game",
    description="Speaker sees the target among 4-6 invented objects; listener picks it from its own shuffled, "
                "relabelled view (1 for the target, else 0).",
    changes={1: "first release", 2: "the speaker's prompt gives the target's description beside its number; "
                                         "the listener's gives no example letter"},
    heldout_kwargs={"split": "validation"},
))
register(EnvSpec(
    name="negotiation-game", version=1, entry_point="optima_envs.tasks.negotiation:make_task", family="game",
    description="Two agents split a pool of items with private values by propose/accept moves (joint "
                "normalised utility of the deal; 0 without one).",
    changes={1: "first release"}, heldout_kwargs={"split": "validation"},
))
