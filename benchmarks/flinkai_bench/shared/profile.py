"""A stage profile of a running embed job: where an event's time goes, from real profilers.

Two sampling profilers run over the same window while the job is busy:

- **py-spy** on the process that runs the Python UDFs. A job submitted from Python to
  the local MiniCluster runs its UDF worker in loopback mode, in the submitting
  process itself, so that is ``os.getpid()`` of the bench child.
- **Java Flight Recorder** (``jcmd JFR.start``, built into the JDK) on the Flink JVM.

Each sample is put in one stage by its stack, leaf first: the first frame that names a
stage decides. Library frames (pandas, numpy, json, pyarrow) name none, so pandas
called by ``parse_click`` counts as parsing and pyarrow called by PyFlink's coders
counts as the Python boundary.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "JVM_STAGES",
    "PYTHON_IDLE",
    "PYTHON_STAGES",
    "StageProfile",
    "StageProfiler",
    "classify",
    "parse_jfr_samples",
    "parse_pyspy_raw",
]

#: (stage, substrings of a Python frame "function (file:line)"), checked leaf first.
PYTHON_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tokenise", ("flinkai/models/tokens.py", "tokenizers/")),
    ("model", ("flinkai/backends/onnx.py", "onnxruntime/", "flinkai/backends/triton.py")),
    ("parse", ("flinkai/functions/events.py", "flinkai/udfs/events.py")),
    (
        "encode",
        (
            "flinkai/udfs/vectorizer.py",
            "flinkai/functions/embedding.py",
            "flinkai/functions/guard.py",
            "flinkai/functions/rows.py",
            "flinkai/runtime/udf.py",
            "baseline_udfs/",
        ),
    ),
    ("python boundary", ("pyflink/", "apache_beam/", "grpc/", "google/protobuf")),
    ("bench harness", ("benchmarks/flinkai_bench/", "py4j/")),
)

JVM_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("encode", ("flink.formats.json", "jackson", "FloatingDecimal", "flink.formats.raw")),
    (
        "sink",
        (
            "kafka.clients.producer",
            "connector.kafka.sink",
            "kafka-producer-network-thread",
        ),
    ),
    (
        "source",
        (
            "kafka.clients.consumer",
            "connector.base.source",
            "connector.kafka.source",
            "SourceOperator",
            "Source Data Fetcher",
        ),
    ),
    (
        "python boundary",
        ("org.apache.flink.python", "org.apache.beam", "org.apache.arrow", "io.grpc", "grpc-"),
    ),
    ("row copies", ("table.runtime.typeutils", "table.data.")),
    ("checkpoint", ("checkpoint", "Checkpoint")),
)


#: Leaf frames of a thread that waits rather than works. py-spy's ``--nonblocking`` mode
#: cannot always tell idle threads (gRPC's spin threads, pools) from busy ones.
PYTHON_IDLE = (
    "Condition.wait (threading.py",
    "Event.wait (threading.py",
    "Thread.run (threading.py",
    "_serve (grpc/_server.py",
    "channel_spin (grpc/_channel.py",
    "_wait_once (grpc/_common.py",
    "SocketIO.readinto (socket.py",
    "select (selectors.py",
    "_worker (concurrent/futures/thread.py",
)


def classify(frames: Sequence[str], stages: Sequence[tuple[str, Sequence[str]]]) -> str:
    """The stage of one sample; ``frames`` run from the leaf to the root.

    Frames that name no stage (pandas, numpy, json, pyarrow, the JDK) are skipped, so
    they count for the nearest caller that does.
    """
    for frame in frames:
        for stage, needles in stages:
            if any(n in frame for n in needles):
                return stage
    return "other"


def parse_pyspy_raw(text: str) -> list[tuple[list[str], int]]:
    """py-spy ``--format raw`` (collapsed stacks, root first) as (leaf-first frames, count)."""
    samples = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        samples.append((frames[::-1], int(count)))
    return samples


_JFR_SAMPLE = re.compile(r"jdk\.ExecutionSample \{(.*?)\n\}", re.S)
_JFR_THREAD = re.compile(r'sampledThread = "([^"]*)"')
_JFR_FRAME = re.compile(r"^\s+([\w$.<>/]+)\(", re.M)


def parse_jfr_samples(text: str) -> list[tuple[list[str], int]]:
    """``jfr print --events jdk.ExecutionSample`` output as (leaf-first frames + thread, 1)."""
    samples = []
    for body in _JFR_SAMPLE.findall(text):
        thread = _JFR_THREAD.search(body)
        trace = body.split("stackTrace = [", 1)[1] if "stackTrace = [" in body else ""
        frames = _JFR_FRAME.findall(trace)
        # The thread's name goes last: it decides only where no frame does.
        samples.append(([*frames, f"thread {thread.group(1) if thread else '?'}"], 1))
    return samples


def _shares(
    samples: Iterable[tuple[list[str], int]], stages: Sequence[tuple[str, Sequence[str]]]
) -> tuple[dict[str, float], int]:
    counts: Counter[str] = Counter()
    for frames, n in samples:
        if frames and any(idle in frames[0] for idle in PYTHON_IDLE):
            continue
        counts[classify(frames, stages)] += n
    total = sum(counts.values())
    return ({k: v / total for k, v in counts.most_common()} if total else {}), total


@dataclass
class StageProfile:
    """Stage shares of the sampled CPU time, per process, with what was sampled."""

    duration_s: float
    python: dict[str, float] = field(default_factory=dict)
    python_samples: int = 0
    jvm: dict[str, float] = field(default_factory=dict)
    jvm_samples: int = 0
    top_jvm_frames: list[tuple[str, int]] = field(default_factory=list)
    top_python_frames: list[tuple[str, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration_s": self.duration_s,
            "python": self.python,
            "python_samples": self.python_samples,
            "jvm": self.jvm,
            "jvm_samples": self.jvm_samples,
            "top_jvm_frames": self.top_jvm_frames,
            "top_python_frames": self.top_python_frames,
            "errors": self.errors,
        }


def _top(samples: Iterable[tuple[list[str], int]], n: int = 12) -> list[tuple[str, int]]:
    counts: Counter[str] = Counter()
    for frames, c in samples:
        if frames and not any(idle in frames[0] for idle in PYTHON_IDLE):
            counts[frames[0]] += c
    return counts.most_common(n)


class StageProfiler:
    """Profiles this process (py-spy) and a JVM (JFR) for ``duration_s`` once ``ready()``.

    Runs in a thread beside the blocking job run: :meth:`start` returns at once,
    :meth:`result` joins and parses.
    """

    def __init__(
        self,
        duration_s: float,
        python_pid: int,
        jvm_pid: Callable[[], int | None],
        ready: Callable[[], bool],
        ready_timeout_s: float = 600.0,
    ) -> None:
        self.duration_s = duration_s
        self._python_pid = python_pid
        self._jvm_pid = jvm_pid
        self._ready = ready
        self._ready_timeout_s = ready_timeout_s
        self._profile = StageProfile(duration_s)
        self._py_raw = ""
        self._jfr_text = ""
        self._last_ready_error = "no error"
        self._thread = threading.Thread(target=self._run, name="stage-profiler", daemon=True)

    def start(self) -> StageProfiler:
        self._thread.start()
        return self

    def result(self, timeout_s: float = 120.0) -> StageProfile:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._profile.errors.append("the profiler did not finish")
            return self._profile
        p = self._profile
        py = parse_pyspy_raw(self._py_raw)
        jvm = parse_jfr_samples(self._jfr_text)
        p.python, p.python_samples = _shares(py, PYTHON_STAGES)
        p.jvm, p.jvm_samples = _shares(jvm, JVM_STAGES)
        p.top_python_frames, p.top_jvm_frames = _top(py), _top(jvm)
        return p

    def _run(self) -> None:
        try:
            self._work()
        except Exception as e:  # a profile is extra evidence: its failure must not end the run
            self._profile.errors.append(f"profiler failed: {type(e).__name__}: {e}")

    def _work(self) -> None:
        deadline = time.monotonic() + self._ready_timeout_s
        while not self._poll_ready():
            if time.monotonic() > deadline:
                self._profile.errors.append(
                    f"the job produced no output to profile ({self._last_ready_error})"
                )
                return
            time.sleep(1.0)
        with tempfile.TemporaryDirectory(prefix="flinkai-profile-") as tmp:
            jvm = self._jvm_pid()
            jfr_file = Path(tmp) / "jvm.jfr"
            py_file = Path(tmp) / "python.txt"
            if jvm is not None:
                self._jcmd(jvm, "JFR.start", f"name=ceiling filename={jfr_file} settings=profile")
            py = self._pyspy(py_file)
            time.sleep(self.duration_s)
            if jvm is not None:
                self._jcmd(jvm, "JFR.stop", "name=ceiling")
            if py is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    py.wait(timeout=30)
                if py_file.exists():
                    self._py_raw = py_file.read_text()
                else:
                    self._profile.errors.append("py-spy wrote no profile")
            if jfr_file.exists():
                events = ["--stack-depth", "64", "--events", "jdk.ExecutionSample"]
                out = subprocess.run(
                    ["jfr", "print", *events, str(jfr_file)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                self._jfr_text = out.stdout
            elif jvm is not None:
                self._profile.errors.append("JFR wrote no recording")

    def _poll_ready(self) -> bool:
        try:
            return self._ready()
        except Exception as e:  # a slow broker answer is "not yet", not the end of profiling
            self._last_ready_error = f"{type(e).__name__}: {e}"
            return False

    def _pyspy(self, out: Path) -> subprocess.Popen[bytes] | None:
        # The venv's bin folder is not on PATH when its python is run directly.
        beside = Path(sys.executable).parent / "py-spy"
        exe = str(beside) if beside.exists() else shutil.which("py-spy")
        if exe is None:
            self._profile.errors.append("py-spy not installed (pip install 'flinkai[bench]')")
            return None
        window = ["--duration", str(int(self.duration_s)), "--rate", "100", "--nonblocking"]
        output = ["--format", "raw", "--output", str(out)]
        return subprocess.Popen(
            [exe, "record", "--pid", str(self._python_pid), *window, *output],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _jcmd(self, pid: int, *command: str) -> None:
        exe = shutil.which("jcmd")
        if exe is None:
            self._profile.errors.append("jcmd not found (a JDK, not a JRE, is needed for JFR)")
            return
        cmd = [exe, str(pid), *(" ".join(command).split())]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            self._profile.errors.append(f"jcmd {command[0]}: {done.stderr.strip()[:200]}")
