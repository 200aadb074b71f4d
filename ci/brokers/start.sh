#!/usr/bin/env bash
# Start the interop brokers detached, each with project-owned state under
# $STOMPY_BROKERS_DIR, and wait until each answers a real STOMP CONNECT.
#
#   start.sh rabbitmq|activemq|coilmq|all
#
# Idempotent: a broker that already answers is left alone. No systemd needed.
# A fresh start wipes the broker's state; STOMPY_BROKER_KEEP_STATE=1 keeps it (its
# queues and persistent messages), as restart.sh does.
# RabbitMQ: STOMP 127.0.0.1:61613, Web-STOMP 127.0.0.1:15674/ws, vhost "/", guest/guest.
# ActiveMQ: STOMP 127.0.0.1:61614, guest/guest and admin/admin; nothing else is opened.
# CoilMQ: STOMP 127.0.0.1:61615, guest/guest, from PyPI into a venv of its own (pip);
# STOMP 1.2 wants the machine's name as host header (ci/brokers/common.sh: coilmq_host).
set -euo pipefail
# shellcheck source=common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"

probe() {  # probe PORT VHOST TIMEOUT [extra args]: wait_stomp.py with guest/guest
    local port=$1 vhost=$2 timeout=$3
    shift 3
    "$PYTHON" "$BROKERS_HERE/wait_stomp.py" 127.0.0.1 "$port" guest guest "$vhost" "$timeout" "$@"
}

# -- RabbitMQ -------------------------------------------------------------------------

# keep_state FILE: STOMPY_BROKER_KEEP_STATE=1 and an earlier start left FILE.
keep_state() {
    [ "${STOMPY_BROKER_KEEP_STATE:-0}" = 1 ] && [ -s "$1" ]
}

rabbitmq_config() {
    # A fresh node: no queues or messages left over from an earlier run.
    rm -rf "$RABBITMQ_DIR"
    mkdir -p "$RABBITMQ_DIR/log" "$RABBITMQ_DIR/mnesia"
    # Plugins are enabled by this file alone, before the node starts.
    echo '[rabbitmq_stomp,rabbitmq_web_stomp].' >"$RABBITMQ_DIR/enabled_plugins"
    : >"$RABBITMQ_DIR/rabbitmq-env.conf"
    cat >"$RABBITMQ_DIR/rabbitmq.conf" <<CONF
# Written by stompy's ci/brokers/start.sh. Loopback only; no AMQP listener.
listeners.tcp = none
stomp.listeners.tcp.1 = 127.0.0.1:$STOMPY_RABBITMQ_PORT
web_stomp.tcp.ip = 127.0.0.1
web_stomp.tcp.port = $STOMPY_RABBITMQ_WS_PORT
# Each STOMP frame in a binary WebSocket message: by default Web-STOMP uses text
# messages even for bodies that are not UTF-8, which RFC 6455 forbids.
web_stomp.ws_frame = binary
loopback_users.guest = true
log.console = false
log.file.level = info
CONF
}

start_rabbitmq() {
    local t0=$SECONDS
    if probe "$STOMPY_RABBITMQ_PORT" / 0 --quiet; then
        say "rabbitmq: already answering STOMP on 127.0.0.1:$STOMPY_RABBITMQ_PORT"
        return 0
    fi
    if [ ! -x "$RABBITMQ_BIN/rabbitmq-server" ]; then
        fail "rabbitmq-server is not installed (run ci/brokers/install.sh)"
        return 2
    fi
    if ! pid_alive "$RABBIT_PIDFILE"; then
        if keep_state "$RABBITMQ_DIR/rabbitmq.conf"; then
            say "rabbitmq: keeping the state in $RABBITMQ_DIR"
        else
            rabbitmq_config
        fi
        rabbitmq_env
        # Erlang distribution on loopback only (epmd itself is the machine's).
        export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
        if ! epmd -names >/dev/null 2>&1; then
            touch "$STOMPY_BROKERS_DIR/epmd.started-by-stompy"
        fi
        say "rabbitmq: starting node $STOMPY_RABBITMQ_NODENAME (state in $RABBITMQ_DIR)"
        # stdio goes to a file: a daemon must not hold the caller's pipes open.
        "$RABBITMQ_BIN/rabbitmq-server" -detached </dev/null >>"$RABBITMQ_DIR/startup.log" 2>&1
    else
        say "rabbitmq: node running (pid $(cat "$RABBIT_PIDFILE")), waiting for STOMP"
    fi
    if ! probe "$STOMPY_RABBITMQ_PORT" / "$STOMPY_BROKER_START_TIMEOUT" \
        --pid-file "$RABBIT_PIDFILE"; then
        fail "rabbitmq did not answer STOMP on 127.0.0.1:$STOMPY_RABBITMQ_PORT"
        log_tail "$RABBITMQ_DIR/startup.log" "$RABBITMQ_DIR/log/$STOMPY_RABBITMQ_NODENAME.log"
        return 1
    fi
    if ! probe "$STOMPY_RABBITMQ_WS_PORT" / 20 --ws /ws; then
        fail "rabbitmq Web-STOMP did not answer on 127.0.0.1:$STOMPY_RABBITMQ_WS_PORT/ws"
        log_tail "$RABBITMQ_DIR/log/$STOMPY_RABBITMQ_NODENAME.log"
        return 1
    fi
    say "rabbitmq: ready in $((SECONDS - t0)) s"
}

# -- ActiveMQ -------------------------------------------------------------------------

activemq_config() {
    cat >"$ACTIVEMQ_DIR/conf/activemq.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by stompy's ci/brokers/start.sh: one STOMP connector on loopback,
     simple authentication, no JMX, no web console, no other protocol. -->
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans
         http://www.springframework.org/schema/beans/spring-beans.xsd
         http://activemq.apache.org/schema/core
         http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core"
          brokerName="stompy" useJmx="false" dataDirectory="$ACTIVEMQ_DIR/data">
    <plugins>
      <simpleAuthenticationPlugin anonymousAccessAllowed="false">
        <users>
          <authenticationUser username="guest" password="guest" groups="users"/>
          <authenticationUser username="admin" password="admin" groups="users,admins"/>
        </users>
      </simpleAuthenticationPlugin>
    </plugins>
    <!-- A queue hands out at most maxPageSize messages that wait for an ACK (200 by
         default): stompy's Spark reads hold a whole batch unacknowledged. -->
    <destinationPolicy>
      <policyMap>
        <policyEntries>
          <policyEntry queue="&gt;" maxPageSize="65535" maxBrowsePageSize="65535"/>
        </policyEntries>
      </policyMap>
    </destinationPolicy>
    <persistenceAdapter>
      <kahaDB directory="$ACTIVEMQ_DIR/data/kahadb"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="64 mb"/></memoryUsage>
        <storeUsage><storeUsage limit="1 gb"/></storeUsage>
        <tempUsage><tempUsage limit="1 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:$STOMPY_ACTIVEMQ_PORT"/>
    </transportConnectors>
  </broker>
</beans>
XML
    # Debian's ActiveMQ logs through log4j 1.2 (log4j.properties on the classpath,
    # which starts with $ACTIVEMQ_CONF): everything to stdout, which
    # start-stop-daemon sends to activemq.log.
    cat >"$ACTIVEMQ_DIR/conf/log4j.properties" <<'PROPS'
log4j.rootLogger=INFO, stdout
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d{HH:mm:ss.SSS} %-5p %c{1} | %m%n
PROPS
}

java_cmd() {
    local candidate
    for candidate in /usr/lib/jvm/default-java/bin/java /usr/lib/jvm/java-17-openjdk-*/bin/java; do
        if [ -x "$candidate" ]; then
            echo "$candidate"
            return
        fi
    done
    command -v java
}

start_activemq() {
    local t0=$SECONDS
    if probe "$STOMPY_ACTIVEMQ_PORT" / 0 --quiet; then
        say "activemq: already answering STOMP on 127.0.0.1:$STOMPY_ACTIVEMQ_PORT"
        return 0
    fi
    if [ ! -x /usr/bin/activemq ] || ! command -v start-stop-daemon >/dev/null 2>&1; then
        fail "activemq (or start-stop-daemon) is not installed (run ci/brokers/install.sh)"
        return 2
    fi
    if ! pid_alive "$AMQ_PIDFILE"; then
        if keep_state "$ACTIVEMQ_DIR/conf/activemq.xml"; then
            say "activemq: keeping the state in $ACTIVEMQ_DIR"
        else
            # A fresh broker: no queues or messages left over from an earlier run.
            rm -rf "$ACTIVEMQ_DIR"
            mkdir -p "$ACTIVEMQ_DIR/conf" "$ACTIVEMQ_DIR/data" "$ACTIVEMQ_DIR/tmp"
            activemq_config
        fi
        # /usr/bin/activemq reads these; it then sources Debian's activemq-options,
        # which only sets the heap (512M), ACTIVEMQ_BASE (unused by our activemq.xml)
        # and the output of "start" mode, which we do not use.
        export INSTANCE=stompy
        export ACTIVEMQ_USER
        ACTIVEMQ_USER=$(id -un)  # no su: run as whoever runs this script
        export ACTIVEMQ_HOME=/usr/share/activemq
        export ACTIVEMQ_BASE="$ACTIVEMQ_DIR"
        export ACTIVEMQ_CONF="$ACTIVEMQ_DIR/conf"
        export ACTIVEMQ_DATA="$ACTIVEMQ_DIR/data"
        export ACTIVEMQ_TMP="$ACTIVEMQ_DIR/tmp"
        export ACTIVEMQ_PIDFILE="$ACTIVEMQ_DIR/console.pid"  # the script's own
        export JAVACMD
        JAVACMD=${JAVACMD:-$(java_cmd)}
        say "activemq: starting (state in $ACTIVEMQ_DIR, java $JAVACMD)"
        # "console" runs the broker in the foreground of its shell; start-stop-daemon
        # puts that in the background, in its own session, and keeps its output.
        start-stop-daemon --start --background --make-pidfile --pidfile "$AMQ_PIDFILE" \
            --output "$AMQ_LOG" --chdir "$ACTIVEMQ_DIR" \
            --startas /usr/bin/activemq -- console "xbean:file:$ACTIVEMQ_DIR/conf/activemq.xml"
    else
        say "activemq: running (pid $(cat "$AMQ_PIDFILE")), waiting for STOMP"
    fi
    if ! probe "$STOMPY_ACTIVEMQ_PORT" / "$STOMPY_BROKER_START_TIMEOUT" \
        --pid-file "$AMQ_PIDFILE"; then
        fail "activemq did not answer STOMP on 127.0.0.1:$STOMPY_ACTIVEMQ_PORT"
        log_tail "$AMQ_LOG"
        return 1
    fi
    say "activemq: ready in $((SECONDS - t0)) s"
}

# -- CoilMQ ---------------------------------------------------------------------------

start_coilmq() {
    local t0=$SECONDS host
    host=$(coilmq_host)
    if probe "$STOMPY_COILMQ_PORT" "$host" 0 --quiet; then
        say "coilmq: already answering STOMP on 127.0.0.1:$STOMPY_COILMQ_PORT"
        return 0
    fi
    if ! pid_alive "$COILMQ_PIDFILE"; then
        # Its store is in memory: a fresh start is always a fresh broker.
        if [ ! -x "$COILMQ_DIR/venv/bin/coilmq" ]; then
            say "coilmq: installing coilmq==$STOMPY_COILMQ_VERSION into $COILMQ_DIR/venv"
            rm -rf "$COILMQ_DIR/venv"
            mkdir -p "$COILMQ_DIR"
            "$PYTHON" -m venv "$COILMQ_DIR/venv"
            "$COILMQ_DIR/venv/bin/pip" install -q "coilmq==$STOMPY_COILMQ_VERSION"
        fi
        printf '[auth]\nguest = guest\n' >"$COILMQ_DIR/users.ini"
        cat >"$COILMQ_DIR/coilmq.cfg" <<CONF
[coilmq]
auth.factory = coilmq.auth.simple:make_simple
auth.simple.file = $COILMQ_DIR/users.ini
CONF
        say "coilmq: starting $STOMPY_COILMQ_VERSION (log in $COILMQ_LOG)"
        # setsid: a session of its own, so stop.sh can end it and nothing else.
        setsid "$COILMQ_DIR/venv/bin/coilmq" -c "$COILMQ_DIR/coilmq.cfg" -b 127.0.0.1 \
            -p "$STOMPY_COILMQ_PORT" </dev/null >>"$COILMQ_LOG" 2>&1 &
        echo $! >"$COILMQ_PIDFILE"
    fi
    if ! probe "$STOMPY_COILMQ_PORT" "$host" "$STOMPY_BROKER_START_TIMEOUT" \
        --pid-file "$COILMQ_PIDFILE"; then
        fail "coilmq did not answer STOMP on 127.0.0.1:$STOMPY_COILMQ_PORT"
        log_tail "$COILMQ_LOG"
        return 1
    fi
    say "coilmq: ready in $((SECONDS - t0)) s"
}

main() {
    local which=${1:-all} rc=0
    mkdir -p "$STOMPY_BROKERS_DIR"
    case "$which" in
        rabbitmq) start_rabbitmq || rc=$? ;;
        activemq) start_activemq || rc=$? ;;
        coilmq) start_coilmq || rc=$? ;;
        all)
            # The JVM, the Erlang VM and CoilMQ boot in parallel; each waits for its own CONNECTED.
            start_rabbitmq >"$STOMPY_BROKERS_DIR/start-rabbitmq.out" 2>&1 &
            local rabbit=$!
            start_activemq >"$STOMPY_BROKERS_DIR/start-activemq.out" 2>&1 &
            local amq=$!
            start_coilmq >"$STOMPY_BROKERS_DIR/start-coilmq.out" 2>&1 &
            local coil=$!
            wait "$rabbit" || rc=$?
            cat "$STOMPY_BROKERS_DIR/start-rabbitmq.out"
            wait "$amq" || rc=$?
            cat "$STOMPY_BROKERS_DIR/start-activemq.out"
            wait "$coil" || rc=$?
            cat "$STOMPY_BROKERS_DIR/start-coilmq.out"
            ;;
        *)
            echo "usage: $0 rabbitmq|activemq|coilmq|all" >&2
            return 64
            ;;
    esac
    return "$rc"
}

main "$@"
