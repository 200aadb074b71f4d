#!/usr/bin/env bash
# Stop the brokers start.sh started (by their pid files, never by name), gracefully
# with SIGTERM, then SIGKILL after a grace period. Idempotent: nothing running is fine.
# STOMPY_BROKER_KILL=1 kills RabbitMQ's node with SIGKILL at once (a crash).
#
#   stop.sh [rabbitmq|activemq|coilmq|all]
set -euo pipefail
# shellcheck source=common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"

GRACE=${STOMPY_BROKER_STOP_TIMEOUT:-30}

# wait_gone GRACE CHECK...: poll until the command CHECK fails, at most GRACE seconds.
wait_gone() {
    local tries=$(($1 * 5))
    shift
    while "$@" && [ "$tries" -gt 0 ]; do
        sleep 0.2
        tries=$((tries - 1))
    done
    ! "$@"
}

group_alive() { [ -n "$(pgrep -g "$1" 2>/dev/null || true)" ]; }

stop_rabbitmq() {
    if ! pid_alive "$RABBIT_PIDFILE"; then
        say "rabbitmq: not running"
    else
        local pid
        pid=$(head -n1 "$RABBIT_PIDFILE" | tr -dc '0-9')
        if [ "${STOMPY_BROKER_KILL:-0}" = 1 ]; then
            # A crash, as the reliability tests want it: no orderly shutdown at all.
            say "rabbitmq: killing pid $pid (SIGKILL)"
            kill -KILL "$pid" 2>/dev/null || true
        else
            say "rabbitmq: stopping pid $pid (SIGTERM)"
            # The Erlang VM (OTP 23+) turns SIGTERM into an orderly init:stop().
            kill -TERM "$pid" 2>/dev/null || true
        fi
        if ! wait_gone "$GRACE" kill -0 "$pid" 2>/dev/null; then
            say "rabbitmq: still alive after ${GRACE} s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$RABBIT_PIDFILE"
    # epmd outlives the node; stop it only if start.sh started it and no node is left.
    if [ -e "$STOMPY_BROKERS_DIR/epmd.started-by-stompy" ]; then
        epmd -kill >/dev/null 2>&1 || true
        rm -f "$STOMPY_BROKERS_DIR/epmd.started-by-stompy"
    fi
}

stop_activemq() {
    if ! pid_alive "$AMQ_PIDFILE"; then
        say "activemq: not running"
        rm -f "$AMQ_PIDFILE"
        return 0
    fi
    local pid pgid
    pid=$(head -n1 "$AMQ_PIDFILE" | tr -dc '0-9')
    pgid=$(ps -o pgid= -p "$pid" | tr -dc '0-9')
    if [ -n "$pgid" ] && [ "$pgid" != "$(ps -o pgid= -p $$ | tr -dc '0-9')" ]; then
        # start-stop-daemon --background gave it a session (and process group) of its
        # own: the launcher shell and the JVM under it. The JVM's shutdown hook stops
        # the broker cleanly on SIGTERM.
        say "activemq: stopping process group $pgid (SIGTERM)"
        kill -TERM -- "-$pgid" 2>/dev/null || true
        if ! wait_gone "$GRACE" group_alive "$pgid"; then
            say "activemq: still alive after ${GRACE} s: SIGKILL"
            kill -KILL -- "-$pgid" 2>/dev/null || true
        fi
    else
        say "activemq: stopping pid $pid and its children (SIGTERM)"
        pkill -TERM -P "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_gone "$GRACE" kill -0 "$pid" 2>/dev/null; then
            pkill -KILL -P "$pid" 2>/dev/null || true
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$AMQ_PIDFILE"
}

stop_coilmq() {
    if ! pid_alive "$COILMQ_PIDFILE"; then
        say "coilmq: not running"
    else
        local pid
        pid=$(head -n1 "$COILMQ_PIDFILE" | tr -dc '0-9')
        say "coilmq: stopping pid $pid (SIGTERM)"
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_gone "$GRACE" kill -0 "$pid" 2>/dev/null; then
            say "coilmq: still alive after ${GRACE} s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$COILMQ_PIDFILE"
}

case "${1:-all}" in
    rabbitmq) stop_rabbitmq ;;
    activemq) stop_activemq ;;
    coilmq) stop_coilmq ;;
    all)
        stop_activemq &
        stop_coilmq &
        stop_rabbitmq
        wait
        ;;
    *)
        echo "usage: $0 [rabbitmq|activemq|coilmq|all]" >&2
        exit 64
        ;;
esac
