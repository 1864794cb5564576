"""What an operator reads from the job it is planned into: the runner's flinkai config.

The runner ships the whole flinkai config as one job parameter
(:data:`~flinkai.runtime.environment.CONFIG_JOB_PARAMETER`); operators read settings
that are the job's, not the statement's, from it (the row-error policy, drift's
defaults). A script run by plain PyFlink has none, and the defaults apply.
"""

from __future__ import annotations

from typing import Any

from flinkai.functions.guard import ErrorPolicy

__all__ = ["client_config", "udf_errors"]


def client_config(t_env: Any) -> Any:
    """The flinkai config the runner shipped as a job parameter, or ``None``."""
    from flinkai.runtime.environment import CONFIG_JOB_PARAMETER, decode_config

    params = t_env.get_config().get("pipeline.global-job-parameters", "") or ""
    for item in str(params).split(","):
        name, sep, value = item.partition(":")
        if sep and name.strip() == CONFIG_JOB_PARAMETER:
            return decode_config(value.strip())
    return None


def udf_errors(t_env: Any) -> ErrorPolicy:
    """``runtime.udf_errors`` of the job's config (``dead_letter`` without one)."""
    client = client_config(t_env)
    return client.runtime.udf_errors if client is not None else "dead_letter"
