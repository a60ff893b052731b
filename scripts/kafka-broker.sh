#!/usr/bin/env bash
# A single-node Kafka broker (KRaft combined mode) for benchmarks and tools
# outside the Rust tests, with the settings of the test harness
# (crates/sonde/tests/common/backends.rs, `Kafka::start`).
#
#   scripts/kafka-broker.sh start DIR PORT [CONTROLLER_PORT]
#   scripts/kafka-broker.sh stop DIR
#
# start writes DIR/server.properties (broker on 127.0.0.1:PORT, controller
# on CONTROLLER_PORT, default PORT+1), formats DIR/data, starts the broker
# in the background (pid in DIR/kafka.pid, log in DIR/kafka.log) and
# returns once it logged "Kafka Server started" and accepts connections on
# PORT; it exits non-zero with the log's tail if the broker dies or takes
# longer than 60 s. stop sends SIGTERM, waits for the orderly shutdown (up
# to 30 s, then SIGKILL) and leaves DIR in place.
#
# Every replication factor and min ISR is 1, the transaction state log's
# too: a single node cannot hold a second replica, and Kafka's defaults (3
# and 2) would leave the consumer-offsets and transaction topics unusable.
# The internal topics have one partition, so their coordinators load at once.
#
# The jars come from $SONDE_KAFKA_LIBS, else target/kafka/libs-4.1.0 as
# scripts/install-kafka.sh leaves them.
set -euo pipefail

usage() {
  echo "usage: $0 start DIR PORT [CONTROLLER_PORT] | stop DIR" >&2
  exit 2
}

root="$(cd "$(dirname "$0")/.." && pwd)"
libs="${SONDE_KAFKA_LIBS:-$root/target/kafka/libs-4.1.0}"

start() {
  local dir=$1 port=$2 controller_port=${3:-$(($2 + 1))}
  [ -f "$libs/kafka_2.13-4.1.0.jar" ] || {
    echo "kafka-broker: no kafka_2.13-4.1.0.jar in $libs: run scripts/install-kafka.sh and set SONDE_KAFKA_LIBS to what it prints" >&2
    exit 1
  }
  command -v java >/dev/null || { echo "kafka-broker: java is not installed (Debian package openjdk-17-jdk-headless)" >&2; exit 1; }
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
    echo "kafka-broker: a broker already runs from $dir (pid $(cat "$dir/kafka.pid"))" >&2
    exit 1
  fi
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=500
PROPS
  cat >"$dir/log4j2.properties" <<'LOG'
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
LOG
  local jvm=(-Xms128m -Xmx1g -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$libs/*")
  if [ ! -f "$dir/data/meta.properties" ]; then
    # A random cluster id: 16 bytes in URL-safe base64 without padding,
    # drawn again when it starts with '-' (the formatter would read it as
    # an option), as Kafka's own Uuid.randomUuid does.
    local id=-
    while [ "${id#-}" != "$id" ]; do
      id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    done
    java "${jvm[@]}" kafka.tools.StorageTool format --cluster-id "$id" \
      --config "$dir/server.properties" >>"$dir/kafka.log" 2>&1 ||
      { echo "kafka-broker: formatting $dir/data failed:" >&2; tail -20 "$dir/kafka.log" >&2; exit 1; }
  fi
  local before
  before=$(grep -c "Kafka Server started" "$dir/kafka.log" 2>/dev/null || true)
  setsid java "${jvm[@]}" kafka.Kafka "$dir/server.properties" >>"$dir/kafka.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/kafka.pid"
  local deadline=$((SECONDS + 60))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "kafka-broker: the broker exited during start:" >&2
      tail -30 "$dir/kafka.log" >&2
      exit 1
    fi
    if [ "$(grep -c "Kafka Server started" "$dir/kafka.log" || true)" -gt "${before:-0}" ] &&
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      break
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "kafka-broker: not ready after 60 s:" >&2
      tail -30 "$dir/kafka.log" >&2
      kill -KILL "$pid" 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
  echo "kafka-broker: ready on 127.0.0.1:$port (pid $pid, log $dir/kafka.log)" >&2
}

stop() {
  local dir=$1
  [ -f "$dir/kafka.pid" ] || { echo "kafka-broker: no broker pid in $dir" >&2; exit 1; }
  local pid
  pid=$(cat "$dir/kafka.pid")
  if kill -TERM "$pid" 2>/dev/null; then
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then
        echo "kafka-broker: no orderly shutdown after 30 s, killing" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.2
    done
  fi
  rm -f "$dir/kafka.pid"
}

case "${1:-}" in
  start) [ $# -ge 3 ] || usage; start "$2" "$3" "${4:-}" ;;
  stop) [ $# -eq 2 ] || usage; stop "$2" ;;
  *) usage ;;
esac
