"""Fixtures shared by the whole suite.

The embedded model (SmolLM2-135M-Instruct) is pulled once per machine (see
`optima_agents.models.testing`) and loaded once per session here: `smollm_tokenizer` for pure
tokenizer tests, `hf_policy` for generation (bf16, greedy, short replies, one thread). Tests that use them
are marked `@pytest.mark.model`. Tests that need other sampling settings call
`hf_policy.with_sampling(...)`, which shares the loaded weights.
"""

from __future__ import annotations

# vLLM imports torch.utils.cpp_extension, which imports setuptools, and setuptools refuses to
# load once the stdlib `distutils` is in sys.modules ("_distutils_hack" AssertionError); some
# test in the full suite imports distutils first. Importing setuptools up front keeps its
# distutils shim in charge for the whole session.
import setuptools  # noqa: F401  isort: skip

import os
from pathlib import Path
from typing import Any

import pytest

from optima_agents.models.testing import embedded_model_dir  # noqa: F401  (re-exported fixture)

# Tests name their data explicitly (fixtures under optima_envs/test/fixtures); a developer's own data
# folder must not change what they read.
os.environ.pop("OPTIMA_DATA_DIR", None)

#: Reply length for model tests: long enough to be real text, short enough for 2 CPU cores.
TEST_MAX_NEW_TOKENS = 12


@pytest.fixture(scope="session")
def smollm_tokenizer(embedded_model_dir: Path) -> Any:  # noqa: F811
    """The embedded model's tokenizer (ChatML chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_model_dir)


@pytest.fixture(scope="session")
def hf_policy(embedded_model_dir: Path, smollm_tokenizer: Any) -> Any:  # noqa: F811
    """The embedded model as an `HFPolicy` (default dtype, greedy, `TEST_MAX_NEW_TOKENS`), loaded once."""
    from optima_agents.policies import HFPolicy, SamplingParams

    # One thread: the test machine's 2 cores are shared with other jobs, and small batches run
    # several times faster single-threaded there (see HFPolicy's num_threads).
    return HFPolicy(str(embedded_model_dir), tokenizer=smollm_tokenizer,
                    sampling=SamplingParams(max_new_tokens=TEST_MAX_NEW_TOKENS), num_threads=1)
