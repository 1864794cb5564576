"""Local services flinkai starts on this machine, and the one supervisor they share.

:mod:`.process` holds what every service needs: free loopback ports, a child in its
own session, readiness waits, log tails, and stops that signal only what this
process started, by PID. The Flink cluster (:mod:`flinkai.runtime.cluster`) uses it
directly. :mod:`.server` adds the one lifecycle every local server shares (launch,
readiness wait, pid and port files, stop, kill, wait): the Kafka broker
(:mod:`flinkai.kafka.broker`), the Chroma server (:mod:`flinkai.rag.server`),
Prometheus and the Triton server (:mod:`flinkai.serve.triton_server`) build on it.
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
