"""Text embeddings from a Triton Inference Server over gRPC.

The server runs the exported ONNX graph (Triton's ``onnxruntime`` backend on a GPU
cluster, or ``flinkai serve triton`` locally); both take **tokenised** ``int64``
inputs. So this client tokenises with the same ``tokenizer.json`` and truncation as
the ONNX backend, sorts texts by token length, pads each sub-batch to its own
longest text, and sends the sub-batches concurrently (``tritonclient.grpc.aio`` on a
private event loop thread). Outputs are put back in input order.

Each sub-batch request has ``client_timeout = triton.timeout_s`` and is retried with
exponential backoff and jitter; a circuit breaker shared by all requests fails calls
fast while the server is down. Errors map to caller decisions:

========================================  ==========================================
gRPC status                               raised
========================================  ==========================================
``DEADLINE_EXCEEDED``                     :class:`BackendTimeoutError` (retried)
``UNAVAILABLE`` and other server failures :class:`BackendUnavailableError` (retried)
``NOT_FOUND`` (unknown model or version)  :class:`ModelNotFoundError` (not retried)
``INVALID_ARGUMENT``                      :class:`InvalidInputError` (not retried)
breaker open                              :class:`CircuitOpenError` (not retried)
========================================  ==========================================
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidInputError,
    ModelNotFoundError,
)
from flinkai.backends.resilience import CircuitBreaker, Retrier, RetryPolicy
from flinkai.config import Config, EmbeddingConfig, ModelConfig, TritonConfig
from flinkai.errors import ConfigError, require
from flinkai.models.tokens import load_tokenizer, plan_sub_batches

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "TritonEmbeddingBackend", "TritonStats"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Sub-batch requests one ``infer_batch`` keeps in flight. Each request's deadline
#: runs while it waits in Triton's queue, so flooding the server with every
#: sub-batch at once would turn a busy server into timeouts.
DEFAULT_MAX_IN_FLIGHT = 4

_WARMUP_TEXTS = ("Warm-up: the first request opens the connection.", "ok")

# gRPC status (as tritonclient reports it) -> error; the type decides whether it is retried.
_STATUS_ERRORS: dict[str, type[BackendError]] = {
    "StatusCode.DEADLINE_EXCEEDED": BackendTimeoutError,
    "StatusCode.UNAVAILABLE": BackendUnavailableError,
    # A server that is shutting down or whose model process died answers with these.
    "StatusCode.CANCELLED": BackendUnavailableError,
    "StatusCode.ABORTED": BackendUnavailableError,
    "StatusCode.INTERNAL": BackendUnavailableError,
    "StatusCode.UNKNOWN": BackendUnavailableError,
    "StatusCode.RESOURCE_EXHAUSTED": BackendUnavailableError,
    "StatusCode.NOT_FOUND": ModelNotFoundError,
    "StatusCode.INVALID_ARGUMENT": InvalidInputError,
    "StatusCode.OUT_OF_RANGE": InvalidInputError,
}


@dataclass
class TritonStats:
    """Counters since the backend was created (read them for metrics and tests)."""

    requests: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0


class TritonEmbeddingBackend(EmbeddingBackend):
    """Embeds texts with a model served by Triton (gRPC).

    Connection settings come from ``config.triton`` (URL, deadline, retries, breaker),
    the model spec from ``config.model`` (its artifact folder must hold
    ``manifest.json`` and ``tokenizer.json``; ``model.onnx`` is not needed on the
    client), sub-batching from ``config.embedding``.

    Args:
        config: The flinkai config.
        triton: Overrides ``config.triton``.
        model: Overrides ``config.model``.
        embedding: Overrides ``config.embedding``.
        max_in_flight: Sub-batch requests sent concurrently per ``infer_batch`` call.
        clock: Monotonic clock of the circuit breaker (tests inject one).

    Example:
        >>> with TritonEmbeddingBackend(load_config()) as backend:  # doctest: +SKIP
        ...     vectors = backend.infer_batch(["a text", "another one"]).outputs
    """

    name = "triton"

    def __init__(
        self,
        config: Config | None = None,
        *,
        triton: TritonConfig | None = None,
        model: ModelConfig | None = None,
        embedding: EmbeddingConfig | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        base = config or Config()
        self.triton_config = triton or base.triton
        self.model_config = model or base.model
        self.embedding_config = embedding or base.embedding
        if self.triton_config.timeout_s <= 0:
            raise ConfigError(f"triton.timeout_s must be > 0, got {self.triton_config.timeout_s}")
        if max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.dim = self.model_config.dim
        self.stats = TritonStats()
        self.breaker = CircuitBreaker.from_triton_config(self.triton_config, clock=clock)
        self._retrier = Retrier(
            RetryPolicy.from_triton_config(self.triton_config),
            self.breaker,
            on_retry=self._on_retry,
        )
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._loop: _LoopThread | None = None
        self._client: Any = None
        self._grpc: Any = None
        self._tokenizer: Any = None
        self._sub_batch = self.embedding_config.batch_size

    # -- lifecycle ---------------------------------------------------------------------

    def load(self) -> None:
        """Read the manifest and tokenizer, connect, check the server and model, warm up.

        Raises:
            ArtifactError: ``manifest.json`` or ``tokenizer.json`` is missing or does
                not match ``config.model`` (run ``flinkai model export``).
            MissingDependencyError: ``tritonclient`` is not installed (extra ``triton``).
            BackendUnavailableError: The server cannot be reached or is not live.
            ModelNotFoundError: The server does not serve the model (or version), or serves
                one whose inputs or outputs differ from the manifest.
            BackendTimeoutError: The checks or the warm-up request exceeded ``timeout_s``.
        """
        with self._lock:
            if self._client is not None:
                return
            phases = self.cold_start.phases_s
            t0 = time.perf_counter()
            grpc_aio: Any = require("tritonclient.grpc.aio", "triton")
            self._grpc = require("tritonclient.grpc", "triton")
            phases["import_client"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            manifest, tokenizer_path = _client_artifacts(self.model_config)
            phases["artifacts_verify"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            tokenizer = load_tokenizer(tokenizer_path, self.model_config.max_seq_length)
            phases["tokenizer_load"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            loop = _LoopThread(f"flinkai-triton-{self.triton_config.url}")
            try:
                client = loop.run(self._connect(grpc_aio), timeout_s=30.0)
                phases["connect"] = time.perf_counter() - t0
                self._loop, self._client, self._tokenizer = loop, client, tokenizer
                self.dim = manifest.dim
                self._version = f"{manifest.name}@{manifest.version}"

                t0 = time.perf_counter()
                self._call(self._check_server(manifest))
                phases["server_check"] = time.perf_counter() - t0

                t0 = time.perf_counter()
                self._embed(list(_WARMUP_TEXTS))
                phases["warmup_first_batch"] = time.perf_counter() - t0
            except BaseException:
                self._release()
                if self._loop is None:
                    loop.close()
                raise
            log.info(
                "connected to %s for %s in %.2fs (%s)",
                self.triton_config.url,
                self._version,
                self.cold_start.total_s,
                ", ".join(f"{k} {v:.3f}s" for k, v in phases.items()),
            )

    def close(self) -> None:
        """Close the gRPC channel and stop the event loop thread; :meth:`load` may follow."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        loop, client = self._loop, self._client
        self._loop = self._client = self._tokenizer = None
        if loop is None:
            return
        if client is not None:
            try:
                loop.run(client.close(), timeout_s=5.0)
            except (BackendError, RuntimeError) as e:
                log.warning(
                    "closing the Triton channel to %s failed: %s", self.triton_config.url, e
                )
        loop.close()

    @property
    def loaded(self) -> bool:
        return self._client is not None

    # -- inference ---------------------------------------------------------------------

    def _infer(self, batch: Sequence[str]) -> np.ndarray:
        """Embed texts on the server.

        Args:
            batch: Texts; each is truncated to ``model.max_seq_length`` tokens.

        Returns:
            float32 array ``[len(batch), dim]``, L2-normalised rows, in input order.

        Raises:
            InvalidInputError: An element is not a ``str``, or the server rejected the request.
            BackendTimeoutError: A request still exceeded ``timeout_s`` after the retries.
            BackendUnavailableError: The server was unreachable after the retries.
            CircuitOpenError: The breaker is open; no request was sent.
            ModelNotFoundError: The server does not serve the model.
            BackendError: Called before :meth:`load`, or the reply had the wrong shape.
        """
        texts = list(batch)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInputError(f"batch[{i}] is {type(text).__name__}, expected str")
        if self._client is None:
            raise BackendError(f"{type(self).__name__}.infer_batch called before load()")
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        tokenizer = self._tokenizer
        if tokenizer is None:
            raise BackendError(f"{type(self).__name__} was closed")
        # No padding cut (embedding.max_padding) here: each cut is one more RPC and one
        # more outcome for the circuit breaker, and a GPU server pays little for padding.
        subs = list(
            plan_sub_batches(
                tokenizer, texts, self._sub_batch, self.embedding_config.sort_by_length
            )
        )
        parts = [sub.index for sub in subs]
        feeds = [sub.feed for sub in subs]
        n = len(texts)
        results = self._call(self._infer_all(feeds))
        out = np.empty((n, self.dim), dtype=np.float32)
        for idx, result in zip(parts, results, strict=True):
            out[idx] = result
        return out

    # -- async side (runs on the loop thread) ------------------------------------------

    async def _connect(self, grpc_aio: Any) -> Any:
        # The channel binds to the running loop, so it is created on the loop thread.
        # Reconnect backoff is capped low: gRPC's default grows to 2 minutes, which would
        # keep a restarted server unused long after it is back.
        max_backoff_ms = int(max(1.0, self.triton_config.backoff_max_s) * 1000)
        channel_args = [
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", max_backoff_ms),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
        ]
        return grpc_aio.InferenceServerClient(
            self.triton_config.url, channel_args=channel_args, **tls_options(self.triton_config)
        )

    async def _check_server(self, manifest: Any) -> None:
        name, version = self.triton_config.model_name, self.triton_config.model_version
        url = self.triton_config.url
        timeout = self.triton_config.timeout_s
        port = url.rpartition(":")[2]
        hint = f"is a Triton server running there? (`flinkai serve triton --port {port}`)"
        if self.triton_config.tls:
            ca = self.triton_config.ca_file or "the system trust store"
            hint += (
                f"; over TLS: is its certificate signed by a CA in {ca}, and does it "
                "accept triton.cert_file (mutual TLS)?"
            )
        else:
            hint += "; or does it serve TLS only (triton.tls)?"
        live = await self._rpc(lambda: self._client.is_server_live(client_timeout=timeout), hint)
        if not live:
            raise BackendUnavailableError(f"Triton at {url} is not live; {hint}")
        ready = await self._rpc(
            lambda: self._client.is_model_ready(name, version, client_timeout=timeout), hint
        )
        if not ready:
            which = f"{name!r} version {version!r}" if version else repr(name)
            raise ModelNotFoundError(f"Triton at {url} does not serve a ready model {which}")
        meta = await self._rpc(
            lambda: self._client.get_model_metadata(
                name, version, as_json=True, client_timeout=timeout
            ),
            hint,
        )
        served_in = sorted(t["name"] for t in meta.get("inputs", []))
        served_out = {
            t["name"]: [int(d) for d in t.get("shape", [])] for t in meta.get("outputs", [])
        }
        output = manifest.outputs[0].name
        if served_in != sorted(manifest.input_names) or output not in served_out:
            raise ModelNotFoundError(
                f"model {name!r} at {url} has inputs {served_in} / outputs {sorted(served_out)}, "
                f"but {self.model_config.name}'s manifest expects {sorted(manifest.input_names)} "
                f"/ {output}"
            )
        if served_out[output][-1:] != [manifest.dim]:
            raise ModelNotFoundError(
                f"model {name!r} at {url} returns {output} of shape {served_out[output]}, "
                f"expected [..., {manifest.dim}]"
            )
        config = await self._rpc(
            lambda: self._client.get_model_config(
                name, version, as_json=True, client_timeout=timeout
            ),
            hint,
        )
        max_batch = int(config.get("config", {}).get("max_batch_size", 0) or 0)
        if max_batch > 0 and self._sub_batch > max_batch:
            log.info("sending sub-batches of %d: the server's max_batch_size", max_batch)
            self._sub_batch = max_batch

    async def _infer_all(self, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
        """Send every sub-batch, at most ``max_in_flight`` at a time; first error wins."""
        results: list[np.ndarray] = []
        if self.breaker.state != "closed" and feeds:
            # A recovering breaker admits one trial request; sent together with the
            # others, it would be cancelled as soon as they were refused, and the
            # breaker could never close. So the first sub-batch probes alone.
            results.append(await self._retrier.acall(lambda: self._attempt(feeds[0])))
            feeds = feeds[1:]
        gate = asyncio.Semaphore(self._max_in_flight)

        async def one(feed: dict[str, np.ndarray]) -> np.ndarray:
            async with gate:
                return await self._retrier.acall(lambda: self._attempt(feed))

        tasks = [asyncio.ensure_future(one(feed)) for feed in feeds]
        if not tasks:
            return results
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            # Collect every outcome, so no task's exception goes unretrieved.
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in outcomes:  # input order: the first failed sub-batch decides the error
            if isinstance(outcome, BaseException) and not isinstance(
                outcome, asyncio.CancelledError
            ):
                raise outcome
        return results + [o for o in outcomes if isinstance(o, np.ndarray)]

    async def _attempt(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        grpc = self._grpc
        self.stats.attempts += 1
        inputs = []
        for name, array in feed.items():
            tensor = grpc.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        output = grpc.InferRequestedOutput("sentence_embedding")
        result = await self._rpc(
            lambda: self._client.infer(
                self.triton_config.model_name,
                inputs,
                model_version=self.triton_config.model_version,
                outputs=[output],
                client_timeout=self.triton_config.timeout_s,
            ),
            "",
        )
        array = result.as_numpy("sentence_embedding")
        rows = len(feed["input_ids"])
        if array is None or array.shape != (rows, self.dim):
            shape = None if array is None else array.shape
            raise BackendError(
                f"Triton returned sentence_embedding of shape {shape}, expected {(rows, self.dim)}"
            )
        return np.asarray(array, dtype=np.float32)

    async def _rpc(self, call: Callable[[], Awaitable[T]], hint: str) -> T:
        """Await one tritonclient call, mapping its exception to a backend error."""
        try:
            return await call()
        except self._grpc.InferenceServerException as e:
            raise _map_error(e, self.triton_config.url, hint) from e

    # -- plumbing ----------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None:
            coro.close()
            raise BackendError(f"{type(self).__name__} was closed")
        self.stats.requests += 1
        cfg = self.triton_config
        # Each request is bounded by its deadline and the retries by their count; this
        # outer bound only guards against a wedged event loop.
        bound = (cfg.max_retries + 1) * (cfg.timeout_s + cfg.backoff_max_s) * 4 + 30.0
        try:
            return loop.run(coro, timeout_s=bound)
        except BackendError:
            self.stats.failures += 1
            raise

    def _on_retry(self, attempt: int, error: BaseException, delay_s: float) -> None:
        self.stats.retries += 1
        log.debug(
            "Triton request attempt %d failed (%s); retrying in %.2fs", attempt + 1, error, delay_s
        )


def tls_options(config: TritonConfig) -> dict[str, Any]:
    """tritonclient's TLS arguments: file paths, read by gRPC when it connects."""
    if not config.tls:
        return {}
    return {
        "ssl": True,
        "root_certificates": config.ca_file or None,
        "private_key": config.key_file or None,
        "certificate_chain": config.cert_file or None,
    }


def _map_error(error: Any, url: str, hint: str) -> BackendError:
    status = str(error.status() or "")
    kind = _STATUS_ERRORS.get(status, BackendError)
    message = error.message() if callable(getattr(error, "message", None)) else str(error)
    text = f"Triton at {url}: {status.removeprefix('StatusCode.') or 'error'}: {message}"
    if hint and kind is BackendUnavailableError:
        text = f"{text}; {hint}"
    return kind(text)


def _client_artifacts(model_config: ModelConfig) -> tuple[Any, Any]:
    """The manifest and tokenizer path; the client never reads ``model.onnx``."""
    from flinkai.models.artifacts import (
        TOKENIZER_FILE,
        ArtifactError,
        read_matching_manifest,
        verify_files,
    )

    root, manifest = read_matching_manifest(model_config)
    if model_config.max_seq_length > manifest.max_seq_length:
        raise ConfigError(
            f"model.max_seq_length={model_config.max_seq_length} exceeds the "
            f"{manifest.max_seq_length} tokens {root} was exported with"
        )
    tokenizer = manifest.file(TOKENIZER_FILE)
    if tokenizer is None:
        raise ArtifactError(f"{root}: manifest does not list {TOKENIZER_FILE}")
    # Only the tokenizer is checked: a Flink worker that talks to Triton may not have
    # (or want) the 90 MB model file.
    verify_files(root, dataclasses.replace(manifest, files=(tokenizer,)))
    return manifest, root / TOKENIZER_FILE


class _LoopThread:
    """An asyncio event loop in a daemon thread; blocking callers submit coroutines."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], *, timeout_s: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError as e:
            future.cancel()
            raise BackendTimeoutError(
                f"no result within {timeout_s:.0f}s (event loop stuck?)"
            ) from e

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()
