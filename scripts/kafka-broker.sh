#!/usr/bin/env bash
# A single-node Kafka broker (KRaft combined mode: broker and controller in
# one JVM, node.id=1), on loopback. This script is the one place that
# writes the broker's settings, formats its storage and starts the JVM:
# the Rust tests run `prepare` and then `run` as their child
# (crates/sonde/tests/common/backends.rs, `Kafka::start`), and the load
# tools' test, the benchmarks and the README's quickstart use `start` and
# `stop`.
#
#   scripts/kafka-broker.sh start DIR PORT [CONTROLLER_PORT]
#   scripts/kafka-broker.sh stop DIR
#   scripts/kafka-broker.sh prepare DIR PORT [CONTROLLER_PORT]
#   scripts/kafka-broker.sh run DIR
#   scripts/kafka-broker.sh cluster-id [COUNT]
#
# prepare writes DIR/server.properties (broker on 127.0.0.1:PORT,
# controller on CONTROLLER_PORT, default PORT+1) and DIR/log4j2.properties,
# and formats DIR/data with a random cluster id unless it holds a
# formatted log already (so a broker keeps its data across restarts); the
# formatter's output goes to stdout.
#
# run replaces itself with the broker's JVM on DIR's properties, in the
# foreground, logging to stdout: its pid is the JVM's, so SIGTERM is
# Kafka's orderly shutdown (the JVM then exits with 143) and SIGKILL kills
# the broker at once, as a test that stops or kills it expects.
#
# start is prepare and then run in the background (pid in DIR/kafka.pid,
# both appended to DIR/kafka.log), and returns once the log says "Kafka
# Server started" and PORT accepts connections; it exits non-zero with the
# log's tail if the broker dies or takes longer than 60 s. stop sends
# SIGTERM, waits for the orderly shutdown (up to 30 s, then SIGKILL) and
# leaves DIR in place.
#
# cluster-id prints COUNT (default 1) random cluster ids, one a line: 16
# random bytes in URL-safe base64 without padding (22 characters), the
# form `kafka-storage.sh random-uuid` prints, never starting with '-',
# which the formatter's argument parser would take for an option (one
# random id in 64 would), as Kafka's own Uuid.randomUuid avoids too.
#
# With SONDE_KAFKA_SECURE="CERT_DIR SSL_PORT MTLS_PORT SASL_SSL_PORT
# WRONGNAME_PORT", prepare adds four listeners beside the plaintext one,
# for the tests of TLS and SASL: SSL (TLS, the server's certificate
# CERT_DIR/broker.pem, a PEM file with its key first), MTLS (the same, and
# a client certificate signed by CERT_DIR/ca.pem required), SASL_SSL (TLS
# and SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, the user "alice" with
# the password "alice-secret" for each; and OAUTHBEARER with Kafka's
# unsecured JWT validator, sessions of at most 3 s so that clients must
# authenticate again, KIP-368) and WRONGNAME (TLS with
# CERT_DIR/wrong-name.pem, a certificate for another host). Brokers talk
# to each other over PLAINTEXT.
#
# With SONDE_KAFKA_CLUSTER="NODE_ID VOTERS CLUSTER_ID" (VOTERS as
# `1@127.0.0.1:PORT,2@127.0.0.1:PORT,3@127.0.0.1:PORT`), prepare writes
# one node of a cluster of that many nodes, each a broker and a
# controller: its node id, the shared quorum, and a replication factor of
# 3 with min.insync.replicas 2 for new topics and the internal ones
# (Kafka's production defaults); every node is formatted with the same
# cluster id.
#
# Environment: SONDE_KAFKA_LIBS, the broker's jars (default
# target/kafka/libs-4.1.0, where scripts/install-kafka.sh puts them);
# SONDE_KAFKA_HEAP, the JVM's maximum heap (default 1g; the tests run
# several brokers at once and ask for 512m); JAVA, the java binary
# (default: java on PATH).
set -euo pipefail

usage() {
  echo "usage: $0 start DIR PORT [CONTROLLER_PORT] | stop DIR | prepare DIR PORT [CONTROLLER_PORT] | run DIR | cluster-id [COUNT]" >&2
  exit 2
}

root="$(cd "$(dirname "$0")/.." && pwd)"
libs="${SONDE_KAFKA_LIBS:-$root/target/kafka/libs-4.1.0}"
heap="${SONDE_KAFKA_HEAP:-1g}"
java="${JAVA:-java}"

check_install() {
  [ -f "$libs/kafka_2.13-4.1.0.jar" ] || {
    echo "kafka-broker: no kafka_2.13-4.1.0.jar in $libs: run scripts/install-kafka.sh and set SONDE_KAFKA_LIBS to what it prints" >&2
    exit 1
  }
  command -v "$java" >/dev/null || { echo "kafka-broker: $java is not installed (Debian package openjdk-17-jdk-headless)" >&2; exit 1; }
}

# The JVM's options for DIR. The JVM expands a classpath entry ending in
# `/*` to every jar in the directory itself.
jvm_options() {
  local dir=$1
  printf '%s\n' -Xms128m "-Xmx$heap" -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$libs/*"
}

cluster_ids() {
  local count=$1 printed=0
  local alphabet=ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_
  local bytes id i v
  while [ "$printed" -lt "$count" ]; do
    # 16 bytes a line, with room for the ids drawn again.
    while [ "$printed" -lt "$count" ] && read -r -a bytes; do
      id=
      # Three bytes make four characters; the last byte makes two (its
      # six high bits, then its two low bits and four zero bits).
      for ((i = 0; i < 15; i += 3)); do
        v=$((bytes[i] << 16 | bytes[i + 1] << 8 | bytes[i + 2]))
        id+=${alphabet:$((v >> 18 & 63)):1}${alphabet:$((v >> 12 & 63)):1}
        id+=${alphabet:$((v >> 6 & 63)):1}${alphabet:$((v & 63)):1}
      done
      v=${bytes[15]}
      id+=${alphabet:$((v >> 2)):1}${alphabet:$(((v & 3) << 4)):1}
      [ "${id:0:1}" = - ] && continue
      echo "$id"
      printed=$((printed + 1))
    done < <(od -An -v -tu1 -w16 -N $(((count - printed + 4) * 16)) /dev/urandom)
  done
}

prepare() {
  local dir=$1 port=$2 controller_port=${3:-$(($2 + 1))}
  check_install
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  # Every replication factor and min ISR is 1, the transaction state
  # log's and the share coordinator's too: a single node cannot hold a
  # second replica, and Kafka's defaults (3 and 2) would leave the
  # consumer-offsets and transaction topics unusable. The internal topics
  # have one partition instead of 50, so their coordinators load at once.
  # Topics a producer creates get one partition. A consumer group's first
  # member is not held back 3 s. The controller fences a broker that
  # missed 4 s of heartbeats (Kafka's default is 9 s): after a SIGKILL the
  # restarted controller replays the killed incarnation's registration and
  # refuses the new one (DuplicateBrokerRegistrationException) until it
  # has fenced the old one, so this bounds a restart after a kill; eight
  # missed heartbeats at 500 ms leave room for a loaded machine.
  # docs/TESTING.md ("Kafka") has each setting and why.
  local listeners="PLAINTEXT://127.0.0.1:$port"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  local certs="" ssl_port mtls_port sasl_port wrong_port
  if [ -n "${SONDE_KAFKA_SECURE:-}" ]; then
    read -r certs ssl_port mtls_port sasl_port wrong_port <<<"$SONDE_KAFKA_SECURE"
    [ -n "$wrong_port" ] || { echo "kafka-broker: SONDE_KAFKA_SECURE needs CERT_DIR and four ports" >&2; exit 2; }
    listeners+=",SSL://127.0.0.1:$ssl_port,MTLS://127.0.0.1:$mtls_port,SASL_SSL://127.0.0.1:$sasl_port,WRONGNAME://127.0.0.1:$wrong_port"
    protocols+=",SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL,WRONGNAME:SSL"
  fi
  local node=1 voters="1@127.0.0.1:$controller_port" cluster_id="" replicas=1 min_isr=1
  if [ -n "${SONDE_KAFKA_CLUSTER:-}" ]; then
    read -r node voters cluster_id <<<"$SONDE_KAFKA_CLUSTER"
    [ -n "$cluster_id" ] || { echo "kafka-broker: SONDE_KAFKA_CLUSTER needs NODE_ID VOTERS CLUSTER_ID" >&2; exit 2; }
    replicas=3
    min_isr=2
  fi
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=$listeners,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=$listeners
listener.security.protocol.map=$protocols
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$replicas
min.insync.replicas=$min_isr
offsets.topic.replication.factor=$replicas
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=$replicas
share.coordinator.state.topic.min.isr=$min_isr
group.initial.rebalance.delay.ms=0
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=500
PROPS
  if [ -n "$certs" ]; then
    # PEM keystores (the key unencrypted, then the chain) and a PEM
    # truststore; the JAAS lines give PLAIN its user and SCRAM its login
    # module (SCRAM's users are stored by the formatter below).
    cat >>"$dir/server.properties" <<PROPS
ssl.keystore.type=PEM
ssl.keystore.location=$certs/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$certs/ca.pem
listener.name.mtls.ssl.client.auth=required
listener.name.wrongname.ssl.keystore.type=PEM
listener.name.wrongname.ssl.keystore.location=$certs/wrong-name.pem
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms=3000
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
PROPS
  fi
  # Kafka logs through slf4j to log4j2, which without a configuration
  # prints only errors: INFO to stdout.
  cat >"$dir/log4j2.properties" <<'LOG'
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
LOG
  if [ ! -f "$dir/data/meta.properties" ]; then
    local jvm
    mapfile -t jvm < <(jvm_options "$dir")
    local scram=()
    if [ -n "$certs" ]; then
      scram=(--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'
        --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]')
    fi
    "$java" "${jvm[@]}" kafka.tools.StorageTool format --cluster-id "${cluster_id:-$(cluster_ids 1)}" \
      --config "$dir/server.properties" "${scram[@]}" ||
      { echo "kafka-broker: formatting $dir/data failed" >&2; exit 1; }
  fi
}

run() {
  local dir
  dir="$(cd "$1" && pwd)"
  check_install
  [ -f "$dir/server.properties" ] || { echo "kafka-broker: no server.properties in $dir: run prepare first" >&2; exit 1; }
  local jvm
  mapfile -t jvm < <(jvm_options "$dir")
  exec "$java" "${jvm[@]}" kafka.Kafka "$dir/server.properties"
}

start() {
  local dir=$1 port=$2 controller_port=${3:-}
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
    echo "kafka-broker: a broker already runs from $dir (pid $(cat "$dir/kafka.pid"))" >&2
    exit 1
  fi
  check_install
  "$0" prepare "$dir" "$port" ${controller_port:+"$controller_port"} >>"$dir/kafka.log" 2>&1 ||
    { echo "kafka-broker: preparing $dir failed:" >&2; tail -20 "$dir/kafka.log" >&2; exit 1; }
  local before
  before=$(grep -c "Kafka Server started" "$dir/kafka.log" 2>/dev/null || true)
  # setsid: the broker outlives this script and the terminal's signals.
  # Not a process group leader, setsid does not fork, and run execs the
  # JVM, so $! is the JVM's pid.
  setsid "$0" run "$dir" >>"$dir/kafka.log" 2>&1 </dev/null &
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
  prepare) [ $# -ge 3 ] || usage; prepare "$2" "$3" "${4:-}" ;;
  run) [ $# -eq 2 ] || usage; run "$2" ;;
  cluster-id) [ $# -le 2 ] || usage; cluster_ids "${2:-1}" ;;
  *) usage ;;
esac
