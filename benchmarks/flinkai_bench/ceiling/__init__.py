"""``flinkai bench ceiling``: the framework's own rate, with the model taken out.

The embed job runs with a null model (:mod:`flinkai_bench.research.null_model`): the real ORT backend,
tokeniser and artifact folder, a graph with no compute to speak of. What is left is the
data path (Kafka source, the hop into the Python worker, parsing, tokenising, result
encoding, the Kafka sink), and that is what a GPU deployment would wait for.
"""

from flinkai_bench.ceiling.command import register, suite_entry

__all__ = ["register", "suite_entry"]
