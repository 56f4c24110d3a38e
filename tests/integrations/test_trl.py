"""An Optima env as the rollout source of the real TRL `GRPOTrainer` (`OptimaRollout` as its
`rollout_func`): one training step on a tiny random Llama with the embedded model's tokenizer.
The step must train on the played dialogues: weights move, TRL logs each Optima reward column and
their sum is Optima's own reward of those dialogues, and only the trained seat's tokens carry loss."""

from __future__ import annotations

import math
from typing import Any

import pytest

trl = pytest.importorskip("trl")

from optima_envs.rewards import RewardWeights, compute_rewards, default_rubric  # noqa: E402
from optima_train.integrations.reward_terms import REWARD_COLUMNS  # noqa: E402
from optima_train.rewards import dialogue_sample  # noqa: E402
from optima_train.integrations.trl import OptimaRollout  # noqa: E402

#: Per-turn reply length: a few tokens, so the step stays fast on 2 CPU cores.
MAX_NEW_TOKENS = 8


def tiny_llama(tokenizer: Any) -> Any:
    """A random 2-layer Llama over the tokenizer's vocabulary. Its head gets a bias towards the
    end-of-turn token so that replies stop at varying lengths: the copies of a row then differ in
    token cost, which gives non-zero advantages (equal rewards in a group train nothing)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = math.log(config.vocab_size / 4)  # about 1 in 5 tokens ends the turn
    model.lm_head = head
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def runs(mask: list[int], value: int) -> list[tuple[int, int]]:
    """The (start, end) of each maximal run of `value` in `mask`."""
    out, start = [], None
    for k, m in enumerate([*mask, None]):
        if m == value and start is None:
            start = k
        elif m != value and start is not None:
            out.append((start, k))
            start = None
    return out


@pytest.mark.model
def test_one_grpo_step_of_trl_on_optima_dialogues(smollm_tokenizer, tmp_path):
    tokenizer = smollm_tokenizer
    weights = RewardWeights(lambda_token=0.5, lambda_loss=0.0)
    source = OptimaRollout("synth-hop-ia", env_kwargs={"max_turns": 4}, weights=weights,
                           max_new_tokens=MAX_NEW_TOKENS, seed=3)
    dataset = source.dataset(1)  # one question, one row per seat (alice, bob)
    assert len(dataset) == 2 and sorted(s.agent for s in source.rows.values()) == ["alice", "bob"]

    calls: list[tuple[list[Any], dict[str, list[Any]]]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = source(prompts, trainer)
        calls.append((list(prompts), out))
        return out

    model = tiny_llama(tokenizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=1, logging_steps=1,
                          save_strategy="no", per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=MAX_NEW_TOKENS, learning_rate=1e-2, seed=0,
                          dataloader_num_workers=0, bf16=False)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=source.reward_funcs, args=args, train_dataset=dataset,
                              processing_class=tokenizer, rollout_func=rollout_func)
    trainer.train()

    # The step ran, on one rollout of both rows times their 2 copies, and moved the weights.
    assert trainer.state.global_step == 1
    assert len(calls) == 1 and source.calls == 1
    prompts, out = calls[0]
    assert len(prompts) == 4 and len(source.last_records) == 4
    specs = [source.rows[p[0]["content"]] for p in prompts]
    assert sorted(s.agent for s in specs) == ["alice", "alice", "bob", "bob"]
    assert [b - a for a, b in runs_of_rows(specs)] == [2, 2]  # TRL's groups: a row's copies, in a row
    changed = [name for name, p in trainer.model.named_parameters() if not torch_equal(p, before[name])]
    assert changed, "no parameter changed in the training step"
    assert "lm_head.weight" in changed and any("layers.0" in name for name in changed)

    # TRL scored each completion with the Optima columns, and each row's columns sum to Optima's
    # own reward of its dialogue (token cost compared within the row's copies).
    records = source.last_records
    samples = [dialogue_sample(r, group=(s.seed, s.index, s.agent)) for r, s in zip(records, specs)]
    expected = [r.reward for r in compute_rewards(samples, rubric=default_rubric(weights),
                                                  token_normalization="group").results]
    columns = list(REWARD_COLUMNS.values())
    scored = {c: list(trainer._logs["rewards"][c]) for c in columns}  # TRL's per-completion rewards
    for c in columns:
        assert scored[c] == pytest.approx([math.nan if v is None else v for v in out[c]], nan_ok=True)
    for i, reward in enumerate(expected):
        assert reward is not None
        assert math.fsum(scored[c][i] for c in columns if not math.isnan(scored[c][i])) == pytest.approx(reward)
    # The copies of a row differ (reply lengths, so token cost), so the group advantages are not 0.
    advantages = list(trainer._logs["advantages"])
    assert len(advantages) == 4 and any(abs(a) > 0.1 for a in advantages)
    for a, b in runs_of_rows(specs):
        assert math.fsum(advantages[a:b]) == pytest.approx(0.0, abs=1e-5)

    # TRL logged each column (as the mean over the batch) and the total reward.
    logs = trainer.state.log_history[0]
    for c in columns:
        values = [v for v in out[c] if v is not None]
        assert logs[f"rewards/{c}/mean"] == pytest.approx(sum(values) / len(values), abs=1e-5)
    assert logs["reward"] == pytest.approx(sum(expected) / 4, abs=1e-5)
    assert logs["rewards/optima_token_cost/mean"] < 0  # a cost: weighted and signed by the rubric
    assert math.isfinite(logs["loss"])
    # TRL read env_mask: it counts only the trained tokens as the completion.
    assert logs["completions/mean_length"] == pytest.approx(sum(map(sum, out["env_mask"])) / 4)

    # The completions: the row's seat's view of its dialogue, loss only on what that seat generated.
    assert out["optima_agent"] == [s.agent for s in specs]
    assert out["optima_tokens"] == [r.total_tokens for r in records]
    trained_logprobs = []
    for i, (spec, record) in enumerate(zip(specs, records)):
        ids, mask, logprobs = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert len(ids) == len(mask) == len(logprobs) and set(mask) <= {0, 1}
        assert [t.speaker for t in record.turns] == ["alice", "bob", "alice", "bob"]  # nobody answered
        own = [k for k, t in enumerate(record.turns) if t.speaker == spec.agent]
        # It starts at the seat's first reply and ends after its last: the prompt holds what came before.
        assert mask[0] == 1 and mask[-1] == 1
        system = record.system_prompts[record.agents.index(spec.agent)]
        assert tokenizer.decode(out["prompt_ids"][i]).startswith(f"<|im_start|>system\n{system}<|im_end|>")
        # Every trained span is (part of) one of the seat's own replies, with its end-of-turn token...
        trained = runs(mask, 1)
        assert 1 <= len(trained) <= len(own)
        for a, b in trained:
            piece = tokenizer.decode(ids[a:b], skip_special_tokens=True, clean_up_tokenization_spaces=False)
            assert any(piece in record.turns[k].text for k in own)
        # ... and the partner's reply between the seat's two is in the completion, without loss.
        (between,) = [t for k, t in enumerate(record.turns) if own[0] < k < own[-1]]
        untrained = "".join(tokenizer.decode(ids[a:b], clean_up_tokenization_spaces=False) for a, b in runs(mask, 0))
        assert "<|im_start|>user\n" + between.text + "<|im_end|>" in untrained
        # Log-probs: 0 where no loss is taken; where it is, the sampler's log-prob of that reply's
        # token (NaN where the reply's text retokenises to other ids, and on the end-of-turn token).
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)
        own_logprobs = {lp for k in own for lp in (record.turns[k].logprobs or ())}
        finite = [lp for lp, m in zip(logprobs, mask) if m == 1 and not math.isnan(lp)]
        assert set(finite) <= own_logprobs and all(lp <= 0.0 for lp in finite)
        trained_logprobs += finite
    assert trained_logprobs, "no trained token carries the sampler's log-prob"


def runs_of_rows(specs: list[Any]) -> list[tuple[int, int]]:
    """The (start, end) of each group of consecutive copies of one row, as TRL groups them."""
    out, start = [], 0
    for k in range(1, len(specs) + 1):
        if k == len(specs) or specs[k] != specs[start]:
            out.append((start, k))
            start = k
    return out


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a.detach().cpu(), b.detach().cpu()))
