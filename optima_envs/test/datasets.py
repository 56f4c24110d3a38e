"""Dataset fixtures that ship with the package, and the kwargs that build every registered env on them.

`FIXTURES` is a tree of tiny files in the eight benchmark datasets' original release formats (and
the Hugging Face hub's), installed with the package (see its README.md). The content is invented;
only the formats are real. It is a valid `$OPTIMA_DATA_DIR`: each folder is named as its loader's
`data_folder`, so `optima_envs.make(env_id, **env_kwargs(env_id))` builds any registered env
offline, from a source checkout or an installed package alike:

    from optima_envs.test import check_env, env_kwargs
    check_env("hotpotqa-ia", **env_kwargs("hotpotqa-ia"))
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIXTURES", "env_kwargs"]

#: The fixture tree: one folder per dataset, named as the loaders' `data_folder`
#: (`$OPTIMA_DATA_DIR/<folder>`), each holding the dataset's original release files, so
#: `optima_envs.make(env_id, data_dir=FIXTURES / folder)` (or `OPTIMA_DATA_DIR=FIXTURES`) reads them
#: like a real copy; other formats of the same rows are in sub-folders (`hub/`: the Hugging Face
#: hub's rows; `restructured/`, `masarena/`, `sample/`: repackagings found in the wild).
FIXTURES = Path(__file__).resolve().parent / "fixtures"

_KWARGS: dict[str, dict] = {
    "hotpotqa-ia": {"data_dir": FIXTURES / "hotpotqa", "split": "validation"},
    "2wikimqa-ia": {"data_dir": FIXTURES / "2wikimqa"},
    "triviaqa-ia": {"data_dir": FIXTURES / "triviaqa", "domain": "web", "split": "dev"},
    "cbt-ia": {"data_dir": FIXTURES / "cbt", "subset": "CN", "split": "test"},
    "gsm8k-debate": {"data_dir": FIXTURES / "gsm8k"},
    "math-debate": {"data_dir": FIXTURES / "math", "subset": "math500"},
    "arc-debate": {"data_dir": FIXTURES / "arc_challenge"},
    "mmlu-debate": {"data_dir": FIXTURES / "mmlu"},
}


def env_kwargs(env_id: str) -> dict:
    """The kwargs that make `env_id` read the fixtures in `FIXTURES` (a fresh dict; {} for ids
    that need no data files, e.g. synth-* and the games)."""
    return dict(_KWARGS.get(env_id, {}))
