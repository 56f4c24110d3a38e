"""Only labelled positions reach TRL's fused LM head on a CPU, with the same loss and gradients."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
trl_utils = pytest.importorskip("trl.trainer.utils")

from optima_train.lm_head import labelled_positions_only  # noqa: E402


def _fused_model(folder):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    trl_utils.add_fused_lm_head(model)
    return model


def _loss_and_grads(model, ids, labels):
    model.zero_grad()
    out = model(input_ids=ids, labels=labels, fused_lm_head=True)
    out.loss.backward()
    return out.loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(6, 60, (2, 24), generator=generator)
    labels = ids.clone()
    labels[:, :15] = -100          # a prompt: no loss
    labels[1, 20:] = -100          # and a padded tail
    return ids, labels


@pytest.fixture
def projected_rows(monkeypatch):
    """The row count of every call to TRL's chunked projection."""
    rows: list[int] = []
    real = trl_utils._ChunkedLogProbFunction

    class Recording:
        @staticmethod
        def apply(hidden, *args):
            rows.append(hidden.shape[0])
            return real.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Recording)
    return rows


def test_only_labelled_rows_are_projected_and_the_loss_and_gradients_are_unchanged(tiny, batch, projected_rows):
    ids, labels = batch
    model = _fused_model(tiny)
    full_loss, full_grads = _loss_and_grads(model, ids, labels)
    with labelled_positions_only() as narrowed:
        narrow_loss, narrow_grads = _loss_and_grads(model, ids, labels)
    assert narrowed
    labelled = int((labels[:, 1:] != -100).sum())
    assert projected_rows == [2 * 23, labelled] and labelled < 2 * 23 / 2
    assert torch.allclose(full_loss, narrow_loss, rtol=1e-6, atol=1e-7)
    assert len(full_grads) == len(narrow_grads) > 0
    for full, narrow in zip(full_grads, narrow_grads):
        assert torch.allclose(full, narrow, rtol=1e-5, atol=1e-7)


def test_the_choice_is_restored_after_the_block_and_nesting_keeps_it(tiny, batch, projected_rows):
    before = trl_utils._use_triton
    with labelled_positions_only():
        with labelled_positions_only() as inner:
            assert inner
        assert trl_utils._use_triton is not before
    assert trl_utils._use_triton is before
    ids, labels = batch
    _loss_and_grads(_fused_model(tiny), ids, labels)
    assert projected_rows == [2 * 23]


def test_a_trl_without_the_fused_head_is_left_alone(monkeypatch, caplog):
    monkeypatch.delattr(trl_utils, "_use_triton")
    with labelled_positions_only() as narrowed:
        assert not narrowed
    assert "projects every position" in caplog.text
