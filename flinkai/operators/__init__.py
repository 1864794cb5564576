"""Stream operators for SQL scripts: keyed state and timers where a UDF has none.

A script applies one with::

    CREATE TEMPORARY VIEW drift_events AS
      APPLY OPERATOR 'flinkai.operators.drift.detect_drift' TO embedded
      WITH ('key' = 'stream_id', 'time' = 'event_ms', 'embedding' = 'embedding');

An operator is a factory ``fn(t_env, table, options) -> Table``; the runner
registers the returned table as the view.

* :func:`flinkai.operators.drift.detect_drift`: drift events per key.
* :func:`flinkai.operators.drift.adaptive_windows`: adaptive micro-batch window
  aggregates per key, shrinking on drift.
"""

from flinkai.operators.drift import adaptive_windows, detect_drift

__all__ = ["adaptive_windows", "detect_drift"]
