"""Entry point of a variant's child process: ``python -m flinkai_bench.embed PAYLOAD``."""

import sys

from flinkai_bench.embed.harness import child

child(sys.argv[1])
