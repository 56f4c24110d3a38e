"""A randomly initialised one-layer Llama with its own word-level tokenizer and chat template, built
in moments without the embedded model, for fast tests of the training steps."""

from __future__ import annotations

from pathlib import Path

WORDS = ("alice bob the answer is a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9 "
         "what plus question says agrees facts i think it <A> </A> : . ,").split()
SPECIAL = ["<pad>", "<unk>", "<eos>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <eos> ' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}")


def build_tiny_model(folder: Path, *, seed: int = 0) -> Path:
    """Save a tiny Llama (hidden 16, one layer) and its tokenizer to `folder`; returns `folder`."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate([*SPECIAL, *WORDS])}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>",
                                        eos_token="<eos>")
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         pad_token_id=vocab["<pad>"], eos_token_id=vocab["<eos>"], bos_token_id=None,
                         tie_word_embeddings=False)
    folder.mkdir(parents=True, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_tiny_sft_data(model: Path, path: Path, count: int = 4) -> Path:
    """`count` SFT rows ("what is i plus i ?" -> "the answer is <A> i </A>", loss on the reply) in
    the tiny tokenizer's ids, written as `optima_train.examples.sft` writes them; returns `path`."""
    from transformers import AutoTokenizer

    from optima_train.examples import write_sft_dataset

    tok = AutoTokenizer.from_pretrained(model)
    rows = []
    for i in range(count):
        ids = tok(f"<|user|> what is {i} plus {i} ? <eos> <|assistant|> the answer is <A> {i} </A> <eos>")["input_ids"]
        rows.append({"input_ids": ids, "assistant_masks": [0] * 8 + [1] * (len(ids) - 8), "messages": [],
                     "agent": "alice", "episode_id": str(i), "instance_id": str(i)})
    write_sft_dataset(path, rows)
    return path
