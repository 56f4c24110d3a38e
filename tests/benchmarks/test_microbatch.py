"""MicroBatcher: single requests from concurrent threads answered by batched calls."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks._microbatch import MicroBatcher


class Recorder:
    """An `act` that records each batch and answers each request with its double."""

    def __init__(self):
        self.batches: list[list[int]] = []

    def __call__(self, requests: list[int]) -> list[int]:
        self.batches.append(list(requests))
        return [2 * r for r in requests]


class TestMicroBatcher:
    def test_concurrent_callers_share_one_call_and_get_their_own_reply(self):
        act = Recorder()
        start = threading.Barrier(8)

        def call(x: int) -> int:
            start.wait()
            return batcher(x)

        with MicroBatcher(act, max_batch=8, window_s=5.0) as batcher, ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(call, range(8)))
        assert replies == [2 * x for x in range(8)]
        assert [sorted(b) for b in act.batches] == [list(range(8))]  # full at 8: sent without waiting 5 s
        assert batcher.batch_sizes == [8]

    def test_a_batch_below_max_is_sent_after_the_quiet_window(self):
        act = Recorder()
        with MicroBatcher(act, max_batch=64, window_s=0.05) as batcher:
            start = time.perf_counter()
            assert batcher(3) == 6
            waited = time.perf_counter() - start
        assert 0.04 <= waited < 2.0
        assert act.batches == [[3]]

    def test_requests_arriving_during_a_call_form_the_next_batch(self):
        batches, decoding, release = [], threading.Event(), threading.Event()

        def act(requests: list[int]) -> list[int]:
            batches.append(list(requests))
            decoding.set()
            release.wait(5.0)
            return [2 * r for r in requests]

        with MicroBatcher(act, max_batch=4, window_s=0.01) as batcher, ThreadPoolExecutor(4) as pool:
            first = pool.submit(batcher, 0)
            assert decoding.wait(5.0)  # the first batch ([0]) is decoding now
            later = [pool.submit(batcher, x) for x in (1, 2, 3)]
            time.sleep(0.05)
            release.set()
            assert [f.result() for f in (first, *later)] == [0, 2, 4, 6]
        assert batches[0] == [0] and sorted(batches[1]) == [1, 2, 3]
        assert batcher.batch_sizes == [1, 3] and batcher.busy_s >= 0.05

    def test_a_failing_call_fails_every_caller_of_its_batch_and_the_next_batch_still_runs(self):
        def act(requests: list[int]) -> list[int]:
            if 0 in requests:
                raise ValueError("boom")
            return requests

        with MicroBatcher(act, max_batch=2, window_s=5.0) as batcher, ThreadPoolExecutor(2) as pool:
            failing = [pool.submit(batcher, x) for x in (0, 1)]
            for future in failing:
                with pytest.raises(ValueError, match="boom"):
                    future.result()
            assert list(pool.map(batcher, (5, 6))) == [5, 6]
        assert batcher.batch_sizes == [2, 2]

    def test_a_reply_count_mismatch_is_an_error(self):
        with MicroBatcher(lambda requests: [], max_batch=1, window_s=0.0) as batcher:
            with pytest.raises(RuntimeError, match=re.escape("act returned 0 replies for 1 requests")):
                batcher(1)

    def test_closed_batcher_refuses_requests(self):
        batcher = MicroBatcher(Recorder(), max_batch=1, window_s=0.0)
        batcher.close()
        with pytest.raises(RuntimeError, match=re.escape("this MicroBatcher was closed")):
            batcher(1)

    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"max_batch": 0, "window_s": 0.0}, "MicroBatcher max_batch must be >= 1, got 0"),
        ({"max_batch": 1, "window_s": -1.0}, "MicroBatcher window_s must be >= 0, got -1.0")])
    def test_bad_settings(self, kwargs, message):
        with pytest.raises(ValueError, match=re.escape(message)):
            MicroBatcher(Recorder(), **kwargs)
