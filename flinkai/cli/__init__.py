"""The ``flinkai`` command line: one module per command group, each with ``register()``."""
