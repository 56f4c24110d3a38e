"""`StepDriver`: requests join an in-process vLLM engine's running batch one at a time.

`VLLMPolicy.submit` hands each request to a driver thread that owns the engine's request loop:
it adds every newly submitted request to the engine (`LLM.enqueue`: the same rendering and
bookkeeping `LLM.generate` uses) and calls `llm_engine.step()` over and over, resolving a
request's future as soon as its output is finished. vLLM's scheduler admits a request added
between two steps into the next step's batch, so requests join and leave the running batch
continuously, which is what `LLM.generate` does inside one call but cannot do across calls.

Why this and not vLLM's `AsyncLLM`: `AsyncLLM` is a second engine (its own EngineCore process,
weights and KV cache) with an asyncio event loop to run, while the policy already holds an `LLM`
whose EngineCore runs in its own process and keeps decoding while this thread prepares inputs.
Driving that engine step by step shares it with `act` (one model, one KV cache, one prefix
cache) and is the truest form of continuous batching the synchronous API allows: a request
waits for at most one engine step before it joins the batch.

Sharing the engine with `act`: `LLM.generate` steps the engine until it has no unfinished
requests and would collect (and drop) the driver's outputs, so the two never overlap. They share
one lock, which `act` holds for its whole call and the driver holds while any of its requests is
in the engine (it releases it whenever it has none). The driver also prepares prompts and
converts outputs under that lock, on its own thread, so the policy's tokenizer (a Rust tokenizer
that must not be used from two threads at once) is never used concurrently by `act` and the
driver.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from optima_agents.policies.base import Action

__all__ = ["DriverClosedError", "Finish", "Prepare", "StepDriver"]

Prepare = Callable[[], "tuple[Any, Any, Any] | Action"]
"""Builds a request's (prompt, vllm.SamplingParams, vllm LoRARequest or None), or the `Action` that answers it at once
(e.g. an error for a prompt too long for the model). Runs on the driver thread."""

Finish = Callable[[Any], Action]
"""Turns the request's finished `vllm.RequestOutput` into its `Action`. Runs on the driver thread."""


class DriverClosedError(RuntimeError):
    """Raised (as a future's exception) for requests still pending when the driver closed."""


@dataclass
class _Job:
    future: Future[Action]
    prepare: Prepare
    finish: Finish


class StepDriver:
    """Feeds submitted requests into `llm` and steps it on a background thread.

    Args:
        llm: a `vllm.LLM`.
        lock: the lock `act` holds around `LLM.generate` (see the module doc).

    The thread starts on the first `submit` and is a daemon, so an interpreter exit does not wait
    for it; `close` stops it.
    """

    def __init__(self, llm: Any, lock: threading.Lock):
        self.llm = llm
        self.lock = lock
        self._incoming: list[_Job] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, prepare: Prepare, finish: Finish) -> Future[Action]:
        """Queue one request; its future resolves with `finish(output)`, with `prepare`'s Action,
        or with the exception raised while preparing, adding or stepping it."""
        future: Future[Action] = Future()
        with self._wake:
            if self._closed:
                raise DriverClosedError("the vLLM policy was closed; no more requests can be submitted")
            self._incoming.append(_Job(future, prepare, finish))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="vllm-step-driver", daemon=True)
                self._thread.start()
            self._wake.notify()
        return future

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop the thread after its current step; requests not finished by then fail with
        `DriverClosedError`."""
        with self._wake:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    # ------------------------------------------------------------------ the driver thread
    def _loop(self) -> None:
        active: dict[str, _Job] = {}
        held = [False]
        reason = "the vLLM policy was closed before this request finished"
        try:
            self._serve(active, held)
        except BaseException as exc:
            reason = f"the vLLM step driver stopped: {type(exc).__name__}: {exc}"
            raise
        finally:
            with self._wake:
                self._closed = True
                leftover, self._incoming = [*active.values(), *self._incoming], []
            for job in leftover:
                if not job.future.done():
                    job.future.set_exception(DriverClosedError(reason))
            if held[0]:
                self.lock.release()

    def _serve(self, active: dict[str, _Job], held: list[bool]) -> None:
        """Add new requests, step while any is in the engine, sleep when there is nothing to do.
        `held[0]` says whether this thread holds the engine lock."""
        while True:
            with self._wake:
                while not self._incoming and not active and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                jobs, self._incoming = self._incoming, []
            if jobs and not held[0]:
                self.lock.acquire()
                held[0] = True
            for job in jobs:
                self._add(job, active)
            if active:
                self._step(active)
            if not active and held[0]:
                self.lock.release()
                held[0] = False

    def _add(self, job: _Job, active: dict[str, _Job]) -> None:
        if not job.future.set_running_or_notify_cancel():
            return  # cancelled before it reached the engine
        try:
            prepared = job.prepare()
            if isinstance(prepared, Action):
                job.future.set_result(prepared)
                return
            prompt, params, lora = prepared
            (request_id,) = self.llm.enqueue([prompt], [params], lora_request=lora, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001  (handed to the caller through the future, as `act` would raise it)
            job.future.set_exception(exc)
            return
        active[_external_id(request_id)] = job

    def _step(self, active: dict[str, _Job]) -> None:
        try:
            outputs = self.llm.llm_engine.step()
        except Exception as exc:  # noqa: BLE001  (the engine failed: every request in it fails with its error)
            failed = dict(active)
            active.clear()
            with contextlib.suppress(Exception):  # best effort: a dead engine cannot abort anything
                self.llm.llm_engine.abort_request(list(failed))
            for job in failed.values():
                job.future.set_exception(exc)
            return
        for output in outputs:
            job = active.pop(_external_id(output.request_id), None) if output.finished else None
            if job is None:
                continue
            try:
                job.future.set_result(job.finish(output))
            except Exception as exc:  # noqa: BLE001  (handed to the caller through the future)
                job.future.set_exception(exc)


def _external_id(request_id: str) -> str:
    """The id `LLM` gave a request (a counter, "17"), from the engine's id for it ("17-1a2b3c4d":
    vLLM's `InputProcessor.assign_request_id` appends random characters, which `enqueue` returns
    but outputs and `abort_request` do not use)."""
    return request_id.split("-", 1)[0]
