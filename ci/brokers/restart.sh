#!/usr/bin/env bash
# Restart a broker that start.sh started, keeping its state (durable queues and
# persistent messages): stop it gracefully, start it again, wait for CONNECTED.
# The reliability tests (tests/interop/test_reliability.py) run it mid-stream.
#
#   restart.sh rabbitmq|activemq
#   STOMPY_BROKER_KILL=1 restart.sh rabbitmq    # SIGKILL instead of a clean stop
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
    rabbitmq | activemq) ;;
    *)
        echo "usage: $0 rabbitmq|activemq" >&2
        exit 64
        ;;
esac
t0=$SECONDS
bash "$here/stop.sh" "$1"
STOMPY_BROKER_KEEP_STATE=1 bash "$here/start.sh" "$1"
echo "brokers: $1: restarted in $((SECONDS - t0)) s"
