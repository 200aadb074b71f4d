# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by its callers
# Shared settings for start.sh and stop.sh (sourced, not run).
# Every setting can be overridden from the environment.

BROKERS_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "$(id -u)" -eq 0 ]; then
    : "${STOMPY_BROKERS_DIR:=/var/tmp/stompy-brokers}"
else
    : "${STOMPY_BROKERS_DIR:=/var/tmp/stompy-brokers-$(id -u)}"
fi
: "${STOMPY_RABBITMQ_PORT:=61613}"
: "${STOMPY_RABBITMQ_WS_PORT:=15674}"
: "${STOMPY_RABBITMQ_DIST_PORT:=25673}"
: "${STOMPY_RABBITMQ_NODENAME:=rabbit@localhost}"
: "${STOMPY_ACTIVEMQ_PORT:=61614}"
: "${STOMPY_COILMQ_PORT:=61615}"
#: The CoilMQ release from PyPI, in a venv of its own (it pins its own dependencies).
: "${STOMPY_COILMQ_VERSION:=1.1.0}"
: "${STOMPY_BROKER_START_TIMEOUT:=90}"
: "${PYTHON:=python3}"

RABBITMQ_DIR="$STOMPY_BROKERS_DIR/rabbitmq"
RABBIT_PIDFILE="$RABBITMQ_DIR/rabbit.pid"
RABBITMQ_BIN=/usr/lib/rabbitmq/bin
ACTIVEMQ_DIR="$STOMPY_BROKERS_DIR/activemq"
AMQ_PIDFILE="$ACTIVEMQ_DIR/activemq.pid"
AMQ_LOG="$ACTIVEMQ_DIR/activemq.log"
COILMQ_DIR="$STOMPY_BROKERS_DIR/coilmq"
COILMQ_PIDFILE="$COILMQ_DIR/coilmq.pid"
COILMQ_LOG="$COILMQ_DIR/coilmq.log"

# coilmq_host: the CONNECT host header CoilMQ takes with STOMP 1.2 (its machine's
# fully qualified name; any other is "Virtual hosting is not supported").
coilmq_host() { "$PYTHON" -c 'import socket; print(socket.getfqdn())'; }

say() { echo "brokers: $*"; }
fail() { echo "brokers: ERROR: $*" >&2; }

# pid_alive FILE: the pid in FILE names a live process.
pid_alive() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(head -n1 "$1" | tr -dc '0-9')
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# log_tail FILE...: the last lines of each existing file, to stderr.
log_tail() {
    local f
    for f in "$@"; do
        if [ -s "$f" ]; then
            if grep -qE '(ERROR|error|Caused by)' "$f"; then
                echo "----- first errors in $f -----" >&2
                grep -m 10 -E '(ERROR|error|Caused by)' "$f" | cut -c1-300 >&2
            fi
            echo "----- last 40 lines of $f -----" >&2
            tail -n 40 "$f" | cut -c1-300 >&2
        fi
    done
}

# The environment every RabbitMQ command (server and CLI) of our node needs: all of
# it under $RABBITMQ_DIR, nothing read from /etc/rabbitmq or /var/lib/rabbitmq.
rabbitmq_env() {
    export HOME="$RABBITMQ_DIR"  # the Erlang cookie lives here
    export RABBITMQ_NODENAME="$STOMPY_RABBITMQ_NODENAME"
    export RABBITMQ_CONF_ENV_FILE="$RABBITMQ_DIR/rabbitmq-env.conf"
    export RABBITMQ_CONFIG_FILE="$RABBITMQ_DIR/rabbitmq.conf"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$RABBITMQ_DIR/advanced.config"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$RABBITMQ_DIR/enabled_plugins"
    export RABBITMQ_MNESIA_BASE="$RABBITMQ_DIR/mnesia"
    export RABBITMQ_LOG_BASE="$RABBITMQ_DIR/log"
    export RABBITMQ_PID_FILE="$RABBIT_PIDFILE"
    export RABBITMQ_DIST_PORT="$STOMPY_RABBITMQ_DIST_PORT"
}
