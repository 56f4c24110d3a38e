"""The llama.cpp backend: its pure parts without llama.cpp, then one real episode on it.

The fast tests run everywhere: token choice (`RowSampler`), the scheduler of parallel sequences
(`LlamaCppEngine.run` over a fake llama.cpp), prompt rendering and reply cleaning in `act` (a
fake engine and a character tokenizer), identity, the GGUF export's q/k permutation and config
check, and the weight-type errors. The `model` test loads the embedded model's GGUF into
llama.cpp and plays a synth-hop-ia episode; it is skipped when llama-cpp-python is not installed.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from optima_agents.chat import DEFAULT_CHAT_FORMAT, prompt_ids
from optima_agents.models.errors import ModelNotFoundError, ModelPullError
from optima_agents.models.gguf_export import check_config_fits, permute_qk
from optima_agents.policies import SamplingParams, TurnRequest, backend_spec
from optima_agents.policies.llamacpp import LlamaCppPolicy, vocabulary_mismatch
from optima_agents.policies.llamacpp_engine import Job, LlamaCppEngine, shared_prefix
from optima_agents.policies.llamacpp_sampling import RowSampler

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


# ---------------------------------------------------------------------------- doubles
class CharTokenizer:
    """One id per character (ids 3..130 for chr(0..127)), a ChatML-like template, EOS id 2."""

    eos_token_id = 2
    specials = {0: "<unk>", 1: "<s>", 2: "<eos>"}

    def __len__(self) -> int:
        return 131

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "".join(f"[{m['role']}]{m['content']}\n" for m in messages)
        return text + ("[assistant]" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) + 3 for c in text]}

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
        return "".join("" if i in self.specials and skip_special_tokens else self.specials.get(i) or chr(i - 3)
                       for i in ids)

    def convert_ids_to_tokens(self, ids):
        return [self.specials.get(i) or chr(i - 3) for i in ids]


def logits_for(token: int, n_vocab: int = 131) -> np.ndarray:
    out = np.full(n_vocab, -10.0, dtype=np.float32)
    out[token] = 10.0
    return out


class ScriptedEngine:
    """Answers every job with the ids of `reply` then EOS, through the job's own choose/done."""

    n_seq_max, n_ctx, n_threads, max_seq_len, kv_unified, prefix_cache = 4, 4096, 1, 64, False, True

    def __init__(self, reply: str):
        self.reply = [ord(c) + 3 for c in reply] + [2]
        self.prompts: list[list[int]] = []

    def run(self, jobs: list[Job]) -> None:
        for job in jobs:
            self.prompts.append(job.prompt)
            for token in self.reply:
                chosen, logprob = job.choose(logits_for(token))
                job.generated.append(chosen)
                if logprob is not None:
                    job.logprobs.append(logprob)
                if len(job.generated) >= job.max_new or job.done(job.generated):
                    break


def scripted_policy(reply: str, sampling: SamplingParams = SamplingParams(max_new_tokens=16)) -> LlamaCppPolicy:
    """A LlamaCppPolicy around a scripted engine and the character tokenizer (nothing loaded)."""
    policy = object.__new__(LlamaCppPolicy)
    policy.sampling, policy.chat_format = sampling, DEFAULT_CHAT_FORMAT
    policy.model_name, policy.model_path, policy.lora = "fake", None, None
    policy.weights = SimpleNamespace(weight_type="q8_0", source="converted", path=Path("/m/model.q8_0.gguf"))
    policy.tokenizer, policy.stop_token_ids = CharTokenizer(), [2]
    policy.engine = ScriptedEngine(reply)
    policy._lock, policy._calls = __import__("threading").Lock(), 0
    return policy


def request(text: str = "What is 2+2?", seed: int = 0) -> TurnRequest:
    observation = {"agent": "alice", "system_prompt": "SYS", "transcript": ({"speaker": "bob", "text": text},)}
    return TurnRequest("alice", observation, seed=seed)


# ---------------------------------------------------------------------------- sampling
class TestRowSampler:
    def test_greedy_is_the_argmax_with_its_log_softmax(self):
        logits = np.array([0.0, 2.0, 1.0], dtype=np.float32)
        token, logprob = RowSampler(SamplingParams(), seed=0).choose(logits, want_logprob=True)
        assert token == 1
        assert logprob == pytest.approx(2.0 - np.log(np.exp(logits.astype(np.float64)).sum()))
        assert RowSampler(SamplingParams(), seed=0).choose(logits) == (1, None)

    def test_a_seed_repeats_its_draws(self):
        sampling = SamplingParams(temperature=1.0)
        logits = np.zeros(50, dtype=np.float32)
        draws = [[RowSampler(sampling, seed=s).choose(logits)[0] for _ in range(1)] for s in (7, 7, 8)]
        a, b = RowSampler(sampling, seed=7), RowSampler(sampling, seed=7)
        assert [a.choose(logits)[0] for _ in range(20)] == [b.choose(logits)[0] for _ in range(20)]
        assert draws[0] == draws[1]

    def test_top_p_never_draws_outside_the_nucleus(self):
        logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))  # nucleus for 0.7: tokens 0 and 1
        sampler = RowSampler(SamplingParams(temperature=1.0, top_p=0.7), seed=3)
        draws = [sampler.choose(logits, want_logprob=True) for _ in range(300)]
        assert {t for t, _ in draws} == {0, 1}
        logprob = dict(draws)
        assert logprob[0] == pytest.approx(np.log(0.5 / 0.8)) and logprob[1] == pytest.approx(np.log(0.3 / 0.8))

    def test_temperature_sharpens(self):
        logits = np.array([1.0, 0.0], dtype=np.float32)
        cold = RowSampler(SamplingParams(temperature=0.05), seed=1)
        assert {cold.choose(logits)[0] for _ in range(50)} == {0}


# ---------------------------------------------------------------------------- engine scheduling
class CountingLlama:
    """A fake `llama_cpp` module whose model predicts `last token + 1` for every sequence, and
    which checks that every sequence's positions arrive in order and never overlap."""

    def __init__(self, n_vocab: int):
        self.n_vocab = n_vocab
        self.positions: dict[int, int] = {}
        self.last: list[int] = []
        self.batches: list[int] = []
        self.peak_sequences = 0
        self._rows: list[Any] = []

    def llama_batch_free(self, batch):
        pass

    def llama_free(self, ctx):
        pass

    def llama_model_free(self, model):
        pass

    def llama_memory_clear(self, memory, data):
        self.positions.clear()

    def llama_memory_seq_rm(self, memory, seq, p0, p1):
        self.positions.pop(seq, None)
        return True

    def llama_decode(self, ctx, batch):
        self.batches.append(batch.n_tokens)
        self.last = []
        seqs = set()
        for i in range(batch.n_tokens):
            seq = batch.seq_id[i][0]
            seqs.add(seq)
            assert batch.pos[i] == self.positions.get(seq, 0), "positions must be contiguous per sequence"
            self.positions[seq] = batch.pos[i] + 1
            if batch.logits[i]:
                self.last.append((i, batch.token[i]))
        self.peak_sequences = max(self.peak_sequences, len(self.positions))
        return 0

    def llama_get_logits_ith(self, ctx, i):
        token = dict(self.last)[i]
        row = (ctypes.c_float * self.n_vocab)(*logits_for((token + 1) % self.n_vocab, self.n_vocab))
        self._rows.append(row)  # keep the buffer alive while the engine reads it
        return ctypes.cast(row, ctypes.POINTER(ctypes.c_float))


class HistoryLlama(CountingLlama):
    """A fake whose model predicts the sum of every token its sequence's cells hold (mod the
    vocabulary), so a reply depends on the whole history: cells kept from an earlier call give
    the same reply as a fresh prefill only if they hold exactly the right tokens."""

    def __init__(self, n_vocab: int):
        super().__init__(n_vocab)
        self.cells: dict[int, list[int]] = {}
        self.partial_rm = True

    def llama_memory_clear(self, memory, data):
        super().llama_memory_clear(memory, data)
        self.cells.clear()

    def llama_memory_seq_rm(self, memory, seq, p0, p1):
        if p0 <= 0:
            self.cells.pop(seq, None)
            self.positions.pop(seq, None)
            return True
        if not self.partial_rm:
            return False
        self.cells[seq] = self.cells.get(seq, [])[:p0]
        self.positions[seq] = len(self.cells[seq])
        return True

    def llama_state_seq_get_size(self, ctx, seq):
        return 8 * len(self.cells.get(seq, []))

    def llama_state_seq_get_data(self, ctx, buffer, size, seq):
        data = np.asarray(self.cells.get(seq, []), dtype=np.int64).tobytes()
        ctypes.memmove(buffer, data, len(data))
        return len(data)

    def llama_state_seq_set_data(self, ctx, buffer, size, seq):
        self.cells[seq] = np.frombuffer(bytes(buffer), dtype=np.int64).tolist()
        self.positions[seq] = len(self.cells[seq])
        return size

    def llama_decode(self, ctx, batch):
        status = super().llama_decode(ctx, batch)
        sums = {}
        for i in range(batch.n_tokens):
            seq = batch.seq_id[i][0]
            self.cells.setdefault(seq, []).append(batch.token[i])
            if batch.logits[i]:
                sums[i] = sum(self.cells[seq]) % self.n_vocab
        self.last = [(i, token - 1) for i, token in sums.items()]  # the parent adds 1 back
        return status


def fake_engine(n_seq_max: int, n_batch: int, n_ctx: int, lc: CountingLlama | None = None,
                prefix_cache: bool = False, host_cache_bytes: int = 0) -> tuple[LlamaCppEngine, CountingLlama]:
    engine = object.__new__(LlamaCppEngine)
    lc = lc or CountingLlama(n_vocab=131)
    size = n_batch
    engine._lc, engine.ctx, engine.memory = lc, object(), object()
    engine.batch = SimpleNamespace(n_tokens=0, token=[0] * size, pos=[0] * size, n_seq_id=[0] * size,
                                   seq_id=[[0] for _ in range(size)], logits=[False] * size)
    engine.n_seq_max, engine.n_batch, engine.n_ctx, engine.n_ctx_train, engine.n_vocab = (
        n_seq_max, n_batch, n_ctx, 10_000, 131)
    engine.n_ctx_seq, engine.kv_unified = n_ctx, not prefix_cache  # unified: one pool, admission waits for room
    engine.prefix_cache, engine.host_cache_bytes = prefix_cache, host_cache_bytes
    engine._forget()
    engine.stats = {"decode_calls": 0, "prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0,
                    "peak_sequences": 0, "saved_histories": 0, "restored_histories": 0}
    return engine, lc


def counting_job(start: int, length: int, max_new: int, stop: int | None = None) -> Job:
    return Job(prompt=list(range(start, start + length)), max_new=max_new,
               choose=lambda logits: (int(np.argmax(logits)), None),
               done=lambda generated: stop is not None and generated[-1] == stop)


class TestEngineScheduling:
    def test_every_job_continues_its_own_prompt(self):
        engine, lc = fake_engine(n_seq_max=3, n_batch=64, n_ctx=1000)
        jobs = [counting_job(10 * k + 3, 5 + k, max_new=4) for k in range(7)]
        engine.run(jobs)
        for job in jobs:
            last = job.prompt[-1]
            assert job.generated == [last + 1, last + 2, last + 3, last + 4]
        assert lc.peak_sequences == engine.stats["peak_sequences"] == 3
        assert engine.stats["generated_tokens"] == 28

    def test_a_finished_job_frees_its_slot_for_the_next(self):
        engine, lc = fake_engine(n_seq_max=2, n_batch=64, n_ctx=1000)
        jobs = [counting_job(3, 4, max_new=50, stop=8), counting_job(20, 4, max_new=6), counting_job(40, 4, max_new=6)]
        engine.run(jobs)
        assert jobs[0].generated == [7, 8]  # stopped by `done`
        assert [len(j.generated) for j in jobs[1:]] == [6, 6]
        assert lc.peak_sequences == 2

    def test_long_prompts_are_split_across_decode_calls(self):
        engine, lc = fake_engine(n_seq_max=2, n_batch=8, n_ctx=1000)
        jobs = [counting_job(3, 20, max_new=3), counting_job(30, 20, max_new=3)]
        engine.run(jobs)
        assert max(lc.batches) <= 8
        assert jobs[0].generated == [23, 24, 25] and jobs[1].generated == [50, 51, 52]

    def test_jobs_wait_for_kv_cells(self):
        engine, lc = fake_engine(n_seq_max=4, n_batch=64, n_ctx=30)
        jobs = [counting_job(3 + 20 * k, 10, max_new=5) for k in range(4)]  # 15 cells each: two fit at once
        engine.run(jobs)
        assert lc.peak_sequences == 2 and all(len(j.generated) == 5 for j in jobs)

    def test_a_job_that_cannot_fit_is_refused(self):
        engine, _ = fake_engine(n_seq_max=2, n_batch=64, n_ctx=30)
        with pytest.raises(ValueError, match=re.escape("a job of 28 prompt + 5 new tokens does not fit 30 cells")):
            engine.run([counting_job(3, 28, max_new=5)])


def dialogue_turns(engine: LlamaCppEngine, rounds: int) -> list[list[int]]:
    """Three dialogues whose every prompt is the previous prompt, its reply and a new message,
    the way an agent's chat prompt grows; returns every reply in order."""
    prompts = [[5 + k, 9, 2 + k] for k in range(3)]
    replies = []
    for r in range(rounds):
        jobs = [Job(prompt=list(p), max_new=4, choose=lambda logits: (int(np.argmax(logits)), None),
                    done=lambda generated: False) for p in prompts]
        engine.run(jobs)
        replies += [job.generated for job in jobs]
        prompts = [p + job.generated + [7, r] for p, job in zip(prompts, jobs)]
    return replies


class TestPrefixCache:
    def test_kept_cells_give_the_replies_of_a_fresh_prefill(self):
        fresh, _ = fake_engine(n_seq_max=3, n_batch=64, n_ctx=1000, lc=HistoryLlama(131))
        cached, lc = fake_engine(n_seq_max=3, n_batch=64, n_ctx=1000, lc=HistoryLlama(131), prefix_cache=True)
        assert dialogue_turns(cached, rounds=3) == dialogue_turns(fresh, rounds=3)
        # Rounds 2 and 3 reuse each dialogue's prompt and all but its last reply token.
        assert cached.stats["reused_tokens"] == 3 * (3 + 3) + 3 * (3 + 4 + 2 + 3)
        assert cached.stats["prompt_tokens"] + cached.stats["reused_tokens"] == fresh.stats["prompt_tokens"]

    def test_a_job_takes_the_stream_holding_its_prefix(self):
        engine, lc = fake_engine(n_seq_max=4, n_batch=64, n_ctx=1000, lc=HistoryLlama(131), prefix_cache=True)
        first = [counting_job(10 * k, 6, max_new=2) for k in range(4)]
        engine.run(first)
        again = counting_job(20, 6, max_new=2)  # the third job's prompt, whole
        engine.run([again])
        assert again.seq == first[2].seq and again.reused == 5  # its last token is fed for logits
        assert again.generated == first[2].generated

    def test_an_unrelated_prompt_drops_the_kept_cells(self):
        engine, lc = fake_engine(n_seq_max=1, n_batch=64, n_ctx=1000, lc=HistoryLlama(131), prefix_cache=True)
        engine.run([counting_job(3, 5, max_new=3)])
        other = counting_job(50, 5, max_new=3)
        engine.run([other])
        assert other.reused == 0 and lc.cells[other.seq][:5] == other.prompt

    def test_a_refused_partial_removal_falls_back_to_a_full_prefill(self):
        fresh, _ = fake_engine(n_seq_max=3, n_batch=64, n_ctx=1000, lc=HistoryLlama(131))
        lc = HistoryLlama(131)
        lc.partial_rm = False
        cached, _ = fake_engine(n_seq_max=3, n_batch=64, n_ctx=1000, lc=lc, prefix_cache=True)
        assert dialogue_turns(cached, rounds=2) == dialogue_turns(fresh, rounds=2)
        assert cached.stats["reused_tokens"] == 0

    def test_histories_that_make_room_are_saved_and_come_back(self):
        """Three dialogues on two streams: each turn's third dialogue evicts a history, which is
        saved to host memory and copied back when that dialogue speaks again."""
        fresh, _ = fake_engine(n_seq_max=2, n_batch=64, n_ctx=1000, lc=HistoryLlama(131))
        saving, _ = fake_engine(n_seq_max=2, n_batch=64, n_ctx=1000, lc=HistoryLlama(131), prefix_cache=True,
                                host_cache_bytes=10**6)
        dropping, _ = fake_engine(n_seq_max=2, n_batch=64, n_ctx=1000, lc=HistoryLlama(131), prefix_cache=True)
        replies = dialogue_turns(fresh, rounds=3)
        assert dialogue_turns(saving, rounds=3) == replies == dialogue_turns(dropping, rounds=3)
        assert saving.stats["restored_histories"] > 0 and saving.stats["saved_histories"] > 0
        assert saving.stats["reused_tokens"] == 3 * (3 + 3) + 3 * (3 + 4 + 2 + 3)  # every later turn, as with room
        assert dropping.stats["reused_tokens"] < saving.stats["reused_tokens"]

    def test_the_host_budget_drops_the_least_recently_saved(self):
        engine, lc = fake_engine(n_seq_max=1, n_batch=64, n_ctx=1000, lc=HistoryLlama(131), prefix_cache=True,
                                 host_cache_bytes=8 * 12)  # room for one saved history of 12 tokens
        jobs = [counting_job(10 * k, 8, max_new=5) for k in range(3)]
        for job in jobs:
            engine.run([job])
        assert engine.stats["saved_histories"] == 2 and len(engine._saved) == 1  # the first was dropped
        again = [counting_job(10 * k, 8, max_new=5) for k in (1, 0)]
        for job in again:
            engine.run([job])
        assert [job.reused for job in again] == [7, 0]  # the second's history was saved, the first's dropped
        assert [job.generated for job in again] == [jobs[1].generated, jobs[0].generated]
        assert engine.stats["restored_histories"] == 1

    def test_shared_prefix(self):
        held = np.array([1, 2, 3, 4])
        assert shared_prefix(held, np.array([1, 2, 9])) == 2
        assert shared_prefix(held, np.array([1, 2, 3, 4, 5])) == 4
        assert shared_prefix(held, np.array([1, 2])) == 2
        assert shared_prefix(np.zeros(0, dtype=np.int64), np.array([1])) == 0


# ---------------------------------------------------------------------------- policy (no llama.cpp)
class TestPolicyWithoutLlamaCpp:
    def test_prompts_are_the_chat_templates_ids(self):
        policy = scripted_policy("four")
        [action] = policy.act([request()])
        expected = prompt_ids(request().observation, policy.tokenizer, DEFAULT_CHAT_FORMAT)
        assert policy.engine.prompts == [expected]
        assert action.prompt_tokens == len(expected)
        assert action.text == "four" and action.finish_reason == "stop"
        assert action.token_ids == tuple(ord(c) + 3 for c in "four")
        assert action.meta["raw_token_ids"] == (*action.token_ids, 2)

    def test_stop_strings_and_length(self):
        stopped = scripted_policy("yes. no", SamplingParams(max_new_tokens=16, stop=(".",)))
        assert stopped.act([request()])[0].text == "yes"
        short = scripted_policy("a long reply", SamplingParams(max_new_tokens=3))
        action = short.act([request()])[0]
        assert action.text == "a l" and action.finish_reason == "length"

    def test_logprobs_follow_the_stored_ids(self):
        policy = scripted_policy("ok", SamplingParams(max_new_tokens=8, logprobs=True))
        action = policy.act([request()])[0]
        assert action.logprobs is not None and len(action.logprobs) == 2
        assert all(v == pytest.approx(0.0, abs=1e-6) for v in action.logprobs)

    def test_a_prompt_too_long_is_an_error_action(self):
        policy = scripted_policy("x")
        [action] = policy.act([request("?" * 80)])
        assert action.failed and "does not fit the llama.cpp context (64 tokens per sequence" in action.error

    def test_identity_names_backend_and_weight_type(self, monkeypatch):
        import sys

        monkeypatch.setitem(sys.modules, "llama_cpp", SimpleNamespace(__version__="0.3.36"))
        policy = scripted_policy("x")
        ident = policy.identity()
        assert ident["backend"] == "llamacpp" and ident["dtype"] == "q8_0"
        assert ident["weights"] == {"type": "q8_0", "source": "converted", "file": "/m/model.q8_0.gguf"}
        assert ident["sampling"] == policy.sampling.to_dict() and ident["parallel_sequences"] == 4
        assert ident["kv_unified"] is False  # one KV stream per sequence, the default
        assert ident["prefix_cache"] is True  # later turns reuse the kept cells (split streams)
        other = policy.with_sampling(SamplingParams(temperature=0.5))
        assert other.engine is policy.engine and other.identity()["sampling"]["temperature"] == 0.5

    def test_verify_scores_the_generated_ids_against_the_reference(self):
        from optima_agents.policies.parity import BackendParityError

        class Reference:
            dtype, eos_token_id, tokenizer = "float32", 2, CharTokenizer()

            def __init__(self, gap):
                self.gap, self.scored = gap, []

            def gaps(self, observation, token_ids, *, ended):
                self.scored.append((list(token_ids), ended))
                return [self.gap] * (len(token_ids) + ended)

        close = Reference(0.1)
        report = scripted_policy("ok").verify(close, prompts=[request().observation])
        assert report.ok and close.scored == [([ord("o") + 3, ord("k") + 3], True)]
        with pytest.raises(BackendParityError, match=re.escape("llamacpp-q8_0 token 0 ('o') is 2.00 nats below")):
            scripted_policy("ok").verify(Reference(2.0), prompts=[request().observation])
        with pytest.raises(ValueError, match=re.escape("verify() needs a reference model for a policy loaded from a")):
            scripted_policy("ok").verify()

    def test_vocabulary_mismatch(self):
        tok = CharTokenizer()
        same = tok.convert_ids_to_tokens(list(range(131)))
        assert vocabulary_mismatch(tok, 131, same.__getitem__) is None
        assert vocabulary_mismatch(tok, 130, same.__getitem__) == "the GGUF has 130 tokens, the tokenizer 131"
        other = [*same[:5], "X", *same[6:]]
        message = "token 5 is 'X' in the GGUF and '\\x02' in the tokenizer"
        assert vocabulary_mismatch(tok, 131, other.__getitem__) == message

    def test_registered_with_its_options(self):
        spec = backend_spec("llamacpp")
        assert spec.options == frozenset({"batch_size"}) and spec.loads_weights
        assert "optima[llamacpp]" in spec.install

    def test_missing_llama_cpp_says_what_to_install(self, monkeypatch):
        import sys

        from optima_agents.policies import BackendUnavailableError, make_policy

        monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if not installed
        with pytest.raises(BackendUnavailableError, match=re.escape("pip install 'optima[llamacpp]'")):
            make_policy("llamacpp", "smollm2-135m")


# ---------------------------------------------------------------------------- GGUF export and weights
@pytest.fixture
def tiny_llama(tmp_path) -> tuple[Path, Path, dict]:
    """A random two-layer Llama folder, a template GGUF with metadata fitting it, and its state dict."""
    import gguf
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         rms_norm_eps=1e-5, rope_theta=10000.0)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "hf")
    state = {k: v.numpy() for k, v in LlamaForCausalLM.from_pretrained(tmp_path / "hf").state_dict().items()}
    template = tmp_path / "template.gguf"
    writer = gguf.GGUFWriter(template, arch="llama")
    for add, value in ((writer.add_block_count, 2), (writer.add_context_length, 64),
                       (writer.add_embedding_length, 32), (writer.add_feed_forward_length, 64),
                       (writer.add_head_count, 4), (writer.add_head_count_kv, 2),
                       (writer.add_rope_freq_base, 10000.0), (writer.add_layer_norm_rms_eps, 1e-5),
                       (writer.add_tokenizer_model, "gpt2"), (writer.add_chat_template, "{{ messages }}")):
        add(value)
    writer.add_token_list([f"t{i}" for i in range(16)])
    names = {"token_embd.weight": (16, 32), "output_norm.weight": (32,)}
    for b in range(2):
        names.update({f"blk.{b}.attn_norm.weight": (32,), f"blk.{b}.ffn_norm.weight": (32,),
                      f"blk.{b}.attn_q.weight": (32, 32), f"blk.{b}.attn_k.weight": (16, 32),
                      f"blk.{b}.attn_v.weight": (16, 32), f"blk.{b}.attn_output.weight": (32, 32),
                      f"blk.{b}.ffn_gate.weight": (64, 32), f"blk.{b}.ffn_up.weight": (64, 32),
                      f"blk.{b}.ffn_down.weight": (32, 64)})
    for name, shape in names.items():
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tmp_path / "hf", template, state


class TestGGUFExport:
    def test_permute_is_undone_by_transformers(self):
        from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

        undo = LlamaTensorProcessor(config={})._reverse_permute_weights
        rng = np.random.default_rng(0)
        q, k = rng.normal(size=(9 * 64, 16)), rng.normal(size=(3 * 64, 16))
        assert np.array_equal(undo(permute_qk(q, 9), 9, 9), q)
        assert np.array_equal(undo(permute_qk(k, 9, 3), 9, 3), k)
        assert not np.array_equal(permute_qk(q, 9), q)

    def test_permute_refuses_rows_that_do_not_split(self):
        with pytest.raises(ValueError, match=re.escape("a q/k projection with 30 rows cannot split into 4 heads")):
            permute_qk(np.zeros((30, 4)), 4)

    def test_config_must_fit_the_template(self):
        template = {"general.architecture": "llama", "llama.embedding_length": 576, "llama.block_count": 30,
                    "llama.feed_forward_length": 1536, "llama.attention.head_count": 9,
                    "llama.attention.head_count_kv": 3, "tokenizer.ggml.tokens": ["a"] * 49152,
                    "llama.rope.freq_base": 100000.0, "llama.attention.layer_norm_rms_epsilon": 1e-5}
        config = {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536,
                  "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                  "rope_parameters": {"rope_theta": 100000.0}, "rms_norm_eps": 1e-5}
        check_config_fits(config, template)
        with pytest.raises(ModelPullError, match=re.escape(
                "num_hidden_layers / llama.block_count is 2 in the folder and 30 in the template")):
            check_config_fits({**config, "num_hidden_layers": 2}, template)
        with pytest.raises(ModelPullError, match=re.escape("GGUF export handles Llama models only")):
            check_config_fits({**config, "model_type": "qwen2"}, template)

    def test_a_tiny_llama_exports_with_the_templates_metadata(self, tiny_llama, tmp_path):
        """Tensors come back equal after transformers' own un-permute; metadata is the template's."""
        import gguf
        from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

        from optima_agents.models.gguf_export import export_gguf

        folder, template, state = tiny_llama
        out = export_gguf(folder, tmp_path / "m.f32.gguf", "f32", template=template)
        reader = gguf.GGUFReader(out)
        assert reader.fields["general.file_type"].contents() == 0
        assert reader.fields["tokenizer.ggml.tokens"].contents() == [f"t{i}" for i in range(16)]
        assert reader.fields["tokenizer.chat_template"].contents() == "{{ messages }}"
        tensors = {t.name: np.array(t.data) for t in reader.tensors}
        assert len(tensors) == 2 + 2 * 9 and "output.weight" not in tensors  # tied: no separate output
        undo = LlamaTensorProcessor(config={})._reverse_permute_weights
        q_proj, k_proj = (state[f"model.layers.{b}.self_attn.{p}_proj.weight"] for b, p in ((1, "q"), (0, "k")))
        assert np.array_equal(undo(tensors["blk.1.attn_q.weight"], 4, 4), q_proj)
        assert np.array_equal(undo(tensors["blk.0.attn_k.weight"], 4, 2), k_proj)
        assert np.array_equal(tensors["blk.0.ffn_down.weight"], state["model.layers.0.mlp.down_proj.weight"])

        q8 = gguf.GGUFReader(export_gguf(folder, tmp_path / "m.q8_0.gguf", "q8_0", template=template))
        types = {t.name: t.tensor_type.name for t in q8.tensors}
        assert types["blk.0.ffn_up.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"
        assert q8.fields["general.file_type"].contents() == 7

        bf16 = gguf.GGUFReader(export_gguf(folder, tmp_path / "m.bf16.gguf", "bf16", template=template))
        types = {t.name: t.tensor_type.name for t in bf16.tensors}
        assert types["blk.0.ffn_up.weight"] == "BF16" and types["blk.0.attn_norm.weight"] == "F32"
        assert bf16.fields["general.file_type"].contents() == 32
        up = next(t for t in bf16.tensors if t.name == "blk.0.ffn_up.weight")
        # bf16 is the top half of float32: widening it back gives the weights to bf16 rounding
        widened = (np.array(up.data).view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(
            state["model.layers.0.mlp.up_proj.weight"].shape)
        np.testing.assert_allclose(widened, state["model.layers.0.mlp.up_proj.weight"], rtol=2**-8)

    def test_a_trained_folder_is_exported_into_itself_and_refreshed(self, tiny_llama, monkeypatch):
        """A folder without a manifest (a training checkpoint) keeps its exports in `gguf/`; new
        weights in the folder make a new export and remove the old one."""
        import os
        import time

        from optima_agents.models import gguf_store

        folder, template, _ = tiny_llama
        monkeypatch.setattr(gguf_store, "template_spec", lambda folder, home=None: SimpleNamespace(name="base"))
        monkeypatch.setattr(gguf_store, "shipped_gguf", lambda spec, home=None, progress=False: template)
        first = gguf_store.gguf_weights(folder, "auto")
        assert first.weight_type == "f16" and first.source == "converted" and first.path.parent == folder / "gguf"
        assert gguf_store.gguf_weights(folder, "f16").path == first.path  # cached
        weights = folder / "model.safetensors"
        os.utime(weights, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new checkpoint written over it
        second = gguf_store.gguf_weights(folder, "f16")
        assert second.path != first.path and second.path.is_file() and not first.path.exists()
        with pytest.raises(ModelNotFoundError, match=re.escape("weights='q4_1' is the registry model 'base''s own")):
            gguf_store.gguf_weights(folder, "q4_1")

    def test_weight_type_errors(self, tmp_path):
        from optima_agents.models.gguf_store import gguf_weights

        message = "weights must be one of ('auto', 'q4_1', 'shipped', 'f32', 'f16', 'bf16', 'q8_0') or a path to a .gguf file"
        with pytest.raises(ValueError, match=re.escape(f"{message}, got 'int4'")):
            gguf_weights(tmp_path, "int4")
        with pytest.raises(ModelNotFoundError, match=re.escape("weights='/nowhere/m.gguf': no such GGUF file")):
            gguf_weights(None, "/nowhere/m.gguf")
        with pytest.raises(ModelNotFoundError, match=re.escape("weights='f16' exports a local model folder, and "
                                                               "'org/model' is not one")):
            gguf_weights("org/model", "f16")


class TestGGUFLora:
    @pytest.fixture
    def tiny_adapter(self, tiny_llama, tmp_path) -> tuple[Path, dict, dict]:
        """A rank-4 LoRA (random A and B) over the tiny Llama: its folder, base config and
        the merged model's state dict."""
        import json

        from peft import LoraConfig, get_peft_model
        from transformers import LlamaForCausalLM

        folder, _, _ = tiny_llama
        model = get_peft_model(LlamaForCausalLM.from_pretrained(folder), LoraConfig(
            r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
        model.save_pretrained(tmp_path / "adapter")
        merged = {k: v.detach().numpy() for k, v in model.merge_and_unload().state_dict().items()}
        return tmp_path / "adapter", json.loads((folder / "config.json").read_text()), merged

    def test_factors_are_named_shaped_and_permuted_as_llama_cpp_reads_them(self, tiny_llama, tiny_adapter, tmp_path):
        """Each factor sits under its base tensor's GGUF name; scale * B @ A, un-permuted the way
        transformers reads a GGUF, is exactly the update PEFT merges."""
        import gguf
        from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

        from optima_agents.models.gguf_lora import export_lora_gguf

        _, _, base = tiny_llama
        adapter, config, merged = tiny_adapter
        reader = gguf.GGUFReader(export_lora_gguf(adapter, tmp_path / "lora.gguf", base_config=config, dtype="f32"))
        assert reader.fields["general.type"].contents() == "adapter"
        assert reader.fields["general.architecture"].contents() == "llama"
        fields = reader.fields
        assert (fields["adapter.type"].contents(), fields["adapter.lora.alpha"].contents()) == ("lora", 8.0)
        tensors = {t.name: np.array(t.data) for t in reader.tensors}
        assert len(tensors) == 2 * 2 * 7  # A and B of 7 linear layers in each of 2 blocks
        undo = LlamaTensorProcessor(config={})._reverse_permute_weights
        for block, gguf_name, hf_name, heads in ((1, "attn_q", "self_attn.q_proj", (4, 4)),
                                                 (0, "attn_k", "self_attn.k_proj", (4, 2)),
                                                 (1, "ffn_down", "mlp.down_proj", None)):
            a, b = (tensors[f"blk.{block}.{gguf_name}.weight.lora_{x}"] for x in "ab")
            assert a.shape[0] == b.shape[1] == 4  # rank x in, out x rank
            update = 2.0 * b @ a  # alpha / r
            if heads:
                update = undo(update, *heads)
            key = f"model.layers.{block}.{hf_name}.weight"
            np.testing.assert_allclose(update, merged[key] - base[key], atol=1e-5)

    def test_an_adapter_llama_cpp_cannot_apply_is_refused(self, tiny_adapter, tmp_path):
        import json

        from optima_agents.models.gguf_lora import export_lora_gguf

        adapter, config, _ = tiny_adapter
        settings = json.loads((adapter / "adapter_config.json").read_text())
        (adapter / "adapter_config.json").write_text(json.dumps({**settings, "use_dora": True}))
        with pytest.raises(ModelPullError, match=re.escape("llama.cpp applies plain LoRA only, and this adapter "
                                                           "sets ['use_dora']; merge it into the base")):
            export_lora_gguf(adapter, tmp_path / "lora.gguf", base_config=config)

    def test_a_lora_that_is_neither_file_nor_adapter_folder_is_refused(self, tmp_path):
        from optima_agents.models.gguf_store import GGUFWeights, gguf_lora_file

        weights = GGUFWeights(tmp_path / "m.gguf", "f16", "converted", tmp_path)
        with pytest.raises(ModelNotFoundError, match="is neither a .gguf LoRA file nor a PEFT adapter folder"):
            gguf_lora_file(tmp_path, weights)
        with pytest.raises(ModelNotFoundError, match="no such GGUF LoRA file"):
            gguf_lora_file(tmp_path / "missing.gguf", weights)


# ---------------------------------------------------------------------------- the real thing
@pytest.mark.model
@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install 'optima[llamacpp]')")
def test_plays_a_synth_hop_episode_on_the_embedded_model(embedded_model_dir, smollm_tokenizer):
    """The shipped Q4_1 GGUF on llama.cpp: exact prompt ids, parallel sequences, a real episode."""
    import optima_envs
    from optima_agents.rollout import RolloutEngine

    policy = LlamaCppPolicy(str(embedded_model_dir), weights="q4_1", batch_size=4, n_ctx=4096, num_threads=1,
                            sampling=SamplingParams(max_new_tokens=12))
    try:
        ident = policy.identity()
        assert ident["backend"] == "llamacpp" and ident["dtype"] == "q4_1" and ident["weights"]["source"] == "shipped"
        env = optima_envs.make("synth-hop-ia")
        observations, _ = env.reset(seed=0)
        first = TurnRequest(env.current_speaker, observations[env.current_speaker], seed=0)
        first_prompt = policy.act([first])[0].prompt_tokens
        assert first_prompt == len(prompt_ids(first.observation, smollm_tokenizer))
        records = RolloutEngine("synth-hop-ia", policy, progress=False).run(3)  # 3 episodes, lock step
        assert len(records) == 3 and policy.engine.stats["peak_sequences"] == 3  # the episodes' turns ran together
        # From each agent's second turn on, its prompt extends its last prompt and reply: those
        # tokens come from the kept cells, and only the rest is prefilled.
        stats = policy.engine.stats
        prompts = first_prompt + sum(turn.prompt_tokens for record in records for turn in record.turns)
        assert stats["prompt_tokens"] + stats["reused_tokens"] == prompts
        assert stats["reused_tokens"] > sum(len(record.turns) - 2 for record in records) * 100
        assert stats["restored_histories"] > 0  # 6 agent histories on 4 streams: some went to host memory and back
        for record in records:
            assert not record.infra_failure and record.turns
            assert record.policies[record.agents[0]]["backend"] == "llamacpp"
            for turn in record.turns:  # exact ids: the env charged the policy's own token ids
                assert turn.tokens_exact and turn.num_tokens == len(turn.token_ids) > 0
                assert smollm_tokenizer.decode(list(turn.token_ids)) == turn.text or turn.truncated
    finally:
        policy.close()


@pytest.mark.model
@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install 'optima[llamacpp]')")
def test_a_peft_adapter_as_a_gguf_lora_replies_as_the_merged_model(embedded_model_dir):
    """The shipped referential adapter applied by llama.cpp over the F16 base gives the merged
    model's greedy replies (F16 both ways), and the policy's identity names the adapter."""
    import optima_envs
    from optima_agents.models.registry import get_model_spec

    env = optima_envs.make("referential-game", split="validation")
    requests = []
    for i in range(4):
        observations, _ = env.reset(seed=i, options={"index": i})
        requests.append(TurnRequest(env.current_speaker, observations[env.current_speaker], seed=i))
    spec = get_model_spec("smollm2-135m-referential")
    common = dict(weights="f16", batch_size=4, num_threads=1, sampling=SamplingParams(max_new_tokens=16))
    merged = LlamaCppPolicy(spec.name, **common)
    lora = LlamaCppPolicy(spec.base, lora=str(spec.adapter_dir), **common)
    try:
        assert lora.identity()["lora"].endswith(".f16.gguf") and "lora" not in merged.identity()
        replies = [p.act(requests) for p in (merged, lora)]
        assert [a.token_ids for a in replies[0]] == [a.token_ids for a in replies[1]]
        assert all(a.text for a in replies[0])
    finally:
        merged.close()
        lora.close()
