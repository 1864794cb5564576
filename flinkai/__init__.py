"""flinkai: AI functions for Apache Flink SQL jobs."""

__version__ = "0.1.0"
__all__ = ["__version__"]
