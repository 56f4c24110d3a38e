"""Training rows from sampled dialogues and searched trees, for every algorithm.

    from optima_train.examples import build_sft_examples, pair_rows, policy_examples

- SFT rows (`sft`): one per agent of a selected dialogue, its plain prompt, loss on its turns.
- DPO rows (`dpo`): one per searched pair, the speaker's view as prompt, chosen and rejected replies.
- Policy-gradient rows (`policy`): one per agent of a sampled dialogue, with the backend's log-probs.

SFT and policy-gradient rows are masked by the one mask builder (`masks.token_mask` over the chat
template's assistant spans); DPO rows are in TRL's conversational format, which TRL masks. Every
row of a dialogue is built from one agent's view of it (`views.agent_view`).
"""

from optima_train.examples.dpo import PAIR_COLUMNS, pair_rows, read_pairs, to_dpo_dataset, write_pairs
from optima_train.examples.masks import TemplateMaskError, assistant_mask, assistant_spans, token_mask
from optima_train.examples.policy import PolicyExample, policy_examples, write_policy_rows
from optima_train.examples.sft import SFTExample, build_sft_examples, keep_start, write_sft_dataset
from optima_train.examples.views import agent_view, plain_prompts, rebuild_plain_prompts

__all__ = [
    "PAIR_COLUMNS",
    "PolicyExample",
    "SFTExample",
    "TemplateMaskError",
    "agent_view",
    "assistant_mask",
    "assistant_spans",
    "build_sft_examples",
    "keep_start",
    "pair_rows",
    "plain_prompts",
    "policy_examples",
    "read_pairs",
    "rebuild_plain_prompts",
    "to_dpo_dataset",
    "token_mask",
    "write_pairs",
    "write_policy_rows",
    "write_sft_dataset",
]
