"""Entry point of a variant's child process: ``python -m flinkai.bench.embed PAYLOAD``."""

import sys

from flinkai.bench.embed.harness import child

child(sys.argv[1])
