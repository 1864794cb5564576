"""Local services flinkai starts on this machine, and the one supervisor they share.

:mod:`.process` holds what every service needs: free loopback ports, a child in its
own session, readiness waits, log tails, and stops that signal only what this
process started, by PID. The Kafka broker (:mod:`flinkai.kafka.broker`), the Flink
cluster (:mod:`flinkai.runtime.cluster`) and the Triton server
(:mod:`flinkai.serve.triton_server`) are built on it. :mod:`.server` adds the
lifecycle of a server that outlives its starter (pid and port files, stop, kill,
wait), shared by the Kafka broker and the Chroma server (:mod:`flinkai.rag.server`).
:mod:`.prometheus` runs a real Prometheus that scrapes Flink's reporter and
``flinkai.gpu_metrics`` and answers PromQL (the chart's autoscaling queries).
"""

from flinkai.local.process import (
    LOOPBACK,
    free_port,
    group_members,
    kill_stragglers,
    pid_alive,
    port_in_use,
    read_int_file,
    signal_group,
    spawn,
    stop_group,
    tail,
    tcp_open,
    wait_until,
)

__all__ = [
    "LOOPBACK",
    "free_port",
    "group_members",
    "kill_stragglers",
    "pid_alive",
    "port_in_use",
    "read_int_file",
    "signal_group",
    "spawn",
    "stop_group",
    "tail",
    "tcp_open",
    "wait_until",
]
