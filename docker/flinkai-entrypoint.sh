#!/usr/bin/env bash
# Container entry point: lay the mounted Flink config over the image's, then hand
# over to the Flink image's own entry point (jobmanager | standalone-job | taskmanager).
#
# Kubernetes mounts ConfigMaps read-only, but Flink's entry point rewrites
# conf/config.yaml (rpc address, blob port), so the mounted file is copied into
# the writable conf folder instead of being mounted over it.
set -euo pipefail

overlay="${FLINK_CONF_OVERLAY_DIR:-}"
if [ -n "$overlay" ] && [ -d "$overlay" ]; then
  for f in "$overlay"/*; do
    [ -f "$f" ] && cp -L "$f" "$FLINK_HOME/conf/$(basename "$f")"
  done
fi

exec /docker-entrypoint.sh "$@"
