"""A tokenizer without model files and a short dialogue, for the training-row tests."""

from __future__ import annotations

import pytest

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


#: A three-turn dialogue of two agents, as `agent_view` takes it.
TURNS = [
    {"speaker": "alice", "text": "I know Zoravi was founded by Kelo."},
    {"speaker": "bob", "text": "Kelo was born in Drai. <A>Drai</A>"},
    {"speaker": "alice", "text": "<A>Drai</A>"},
]


@pytest.fixture(scope="module")
def char_tokenizer():
    """A one-token-per-character fast tokenizer with a ChatML template (no model files)."""
    return build_char_tokenizer()


def build_char_tokenizer():
    """A one-token-per-character fast tokenizer with a ChatML template (no model files)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    core = Tokenizer(models.WordLevel({"<unk>": 0, **{c: i + 1 for i, c in enumerate(chars)}}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<unk>", eos_token="<|im_end|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tok.chat_template = CHATML
    return tok


def decoded_runs(tokenizer, ids, mask):
    """The decoded runs of consecutive tokens whose mask bit is 1."""
    segments, current = [], []
    for token, bit in zip(ids, mask):
        if bit:
            current.append(token)
        elif current:
            segments.append(tokenizer.decode(current))
            current = []
    if current:
        segments.append(tokenizer.decode(current))
    return segments
