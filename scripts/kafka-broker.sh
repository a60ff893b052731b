#!/usr/bin/env bash
# A single-node Kafka broker on loopback. Kafka 3.x and 4.x run in KRaft
# combined mode (broker and controller in one JVM, node.id=1); Kafka 2.x
# runs as broker.id=1 with a ZooKeeper of its own (from the same jars).
# This script is the one place that writes the broker's settings, formats
# its storage and starts the JVMs: the Rust tests run `prepare`, then
# `zookeeper` (2.x only) and `run` as their children
# (crates/sonde/tests/common/backends.rs, `Kafka::start`), and the load
# tools' test, the benchmarks and the README's quickstart use `start` and
# `stop`.
#
#   scripts/kafka-broker.sh start DIR PORT [CONTROLLER_PORT]
#   scripts/kafka-broker.sh stop DIR
#   scripts/kafka-broker.sh prepare DIR PORT [CONTROLLER_PORT]
#   scripts/kafka-broker.sh run DIR
#   scripts/kafka-broker.sh zookeeper DIR PORT
#   scripts/kafka-broker.sh version
#   scripts/kafka-broker.sh cluster-id [COUNT]
#
# prepare writes DIR/server.properties (broker on 127.0.0.1:PORT; with
# KRaft the controller on CONTROLLER_PORT, with ZooKeeper the broker
# connects to ZooKeeper on 127.0.0.1:CONTROLLER_PORT; default PORT+1) and
# the log configuration, and (KRaft) formats DIR/data with a random
# cluster id unless it holds a formatted log already (so a broker keeps
# its data across restarts); the formatter's output goes to stdout. With
# ZooKeeper and SONDE_KAFKA_SECURE, ZooKeeper must be running: prepare
# stores the SCRAM users there.
#
# run replaces itself with the broker's JVM on DIR's properties, in the
# foreground, logging to stdout: its pid is the JVM's, so SIGTERM is
# Kafka's orderly shutdown (the JVM then exits with 143) and SIGKILL kills
# the broker at once, as a test that stops or kills it expects. With
# ZooKeeper, run first waits (up to 30 s) until ZooKeeper answers and no
# longer holds the registration of a broker 1 that was killed (it expires
# with that broker's 4 s session; Kafka 2.x exits rather than wait).
#
# zookeeper writes DIR/zookeeper.properties (127.0.0.1:PORT, data in
# DIR/zookeeper, 500 ms ticks, no admin server, the four-letter words ruok
# and dump) and replaces itself with ZooKeeper's JVM, logging to stdout.
#
# start is (with ZooKeeper: zookeeper in DIR/zookeeper in the background,
# pid in DIR/zookeeper.pid, log DIR/zookeeper/zookeeper.log) prepare and
# then run in the background (pid in DIR/kafka.pid, both appended
# to DIR/kafka.log), and returns once the log says the server started and
# PORT accepts connections; it exits non-zero with the log's tail if the
# broker dies or takes longer than 60 s. stop sends SIGTERM, waits for the
# orderly shutdown (up to 30 s, then SIGKILL), then stops ZooKeeper the
# same way, and leaves DIR in place.
#
# version prints the Kafka version of the jars (from the name of the
# kafka_2.13-VERSION.jar in SONDE_KAFKA_LIBS).
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
# to each other over PLAINTEXT. KRaft stores the SCRAM users when the
# formatter runs (--add-scram); with ZooKeeper, prepare stores them in
# ZooKeeper (kafka.admin.ConfigCommand).
#
# With SONDE_KAFKA_CLUSTER="NODE_ID VOTERS CLUSTER_ID" (VOTERS as
# `1@127.0.0.1:PORT,2@127.0.0.1:PORT,3@127.0.0.1:PORT`), prepare writes
# one node of a cluster of that many nodes, each a broker and a
# controller: its node id, the shared quorum, and a replication factor of
# 3 with min.insync.replicas 2 for new topics and the internal ones
# (Kafka's production defaults); every node is formatted with the same
# cluster id. KRaft only: before Kafka 3.0 prepare refuses it.
#
# Environment: SONDE_KAFKA_LIBS, the broker's jars (default
# target/kafka/libs-$SONDE_KAFKA_VERSION, where scripts/install-kafka.sh
# puts them); SONDE_KAFKA_VERSION, the version they must hold (default:
# the version of the jars in SONDE_KAFKA_LIBS, else 4.1.0);
# SONDE_KAFKA_HEAP, the JVM's maximum heap (default 1g; the tests run
# several brokers at once and ask for 512m); JAVA, the java binary
# (default: java on PATH).
set -euo pipefail

usage() {
  echo "usage: $0 start DIR PORT [CONTROLLER_PORT] | stop DIR | prepare DIR PORT [CONTROLLER_PORT] | run DIR | zookeeper DIR PORT | version | cluster-id [COUNT]" >&2
  exit 2
}

root="$(cd "$(dirname "$0")/.." && pwd)"
version="${SONDE_KAFKA_VERSION:-}"
libs="${SONDE_KAFKA_LIBS:-$root/target/kafka/libs-${version:-4.1.0}}"
heap="${SONDE_KAFKA_HEAP:-1g}"
java="${JAVA:-java}"

# The broker's log line once it serves clients: KafkaRaftServer's, and
# the ZooKeeper-mode KafkaServer's.
STARTED='Kafka Server started|\[KafkaServer id=[0-9]+\] started'

# Sets version (from the broker's jar unless SONDE_KAFKA_VERSION names
# one), major, and mode (kraft from 3.0 on, zookeeper before).
check_install() {
  local jars=("$libs"/kafka_2.13-*.jar) jar found=
  for jar in "${jars[@]}"; do
    [[ "$jar" =~ /kafka_2\.13-([0-9]+\.[0-9]+\.[0-9]+)\.jar$ ]] || continue
    if [ -z "$version" ] || [ "$version" = "${BASH_REMATCH[1]}" ]; then
      found=${BASH_REMATCH[1]}
      break
    fi
  done
  [ -n "$found" ] || {
    echo "kafka-broker: no kafka_2.13-${version:-VERSION}.jar in $libs: run scripts/install-kafka.sh ${version:-[VERSION]} and set SONDE_KAFKA_LIBS to what it prints" >&2
    exit 1
  }
  version=$found
  major=${version%%.*}
  if [ "$major" -ge 3 ]; then mode=kraft; else mode=zookeeper; fi
  command -v "$java" >/dev/null || { echo "kafka-broker: $java is not installed (Debian package openjdk-17-jdk-headless)" >&2; exit 1; }
}

# The JVM's options for DIR, with a maximum heap: log4j2's configuration
# for Kafka 4.x, log4j 1's before. The JVM expands a classpath entry
# ending in `/*` to every jar in the directory itself.
jvm_options() {
  local dir=$1 max=$2 log
  if [ "$major" -ge 4 ]; then
    log="-Dlog4j2.configurationFile=$dir/log4j2.properties"
  else
    log="-Dlog4j.configuration=file:$dir/log4j.properties"
  fi
  printf '%s\n' -Xms128m "-Xmx$max" -Djava.awt.headless=true "$log" -cp "$libs/*"
}

# Writes DIR's log configuration: INFO to stdout. Without one, log4j2
# prints only errors and log4j 1 nothing at all.
write_log_config() {
  local dir=$1
  if [ "$major" -ge 4 ]; then
    cat >"$dir/log4j2.properties" <<'LOG'
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
LOG
  else
    cat >"$dir/log4j.properties" <<'LOG'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
LOG
  fi
}

# Sends a four-letter word to ZooKeeper on 127.0.0.1:PORT and prints the
# answer (nothing when it does not answer).
zk_word() {
  local port=$1 word=$2
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 0
    printf '%s' "$word" >&3
    timeout 2 cat <&3
  ) 2>/dev/null || true
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
  # missed heartbeats at 500 ms leave room for a loaded machine. With
  # ZooKeeper the broker's session is 4 s for the same reason: its
  # registration outlives a killed broker until the session expires.
  # Settings a version does not know (the share coordinator's before 4.0)
  # are logged as unused and ignored.
  # docs/TESTING.md ("Kafka") has each setting and why.
  local listeners="PLAINTEXT://127.0.0.1:$port"
  local protocols="PLAINTEXT:PLAINTEXT"
  local certs="" ssl_port mtls_port sasl_port wrong_port
  if [ -n "${SONDE_KAFKA_SECURE:-}" ]; then
    read -r certs ssl_port mtls_port sasl_port wrong_port <<<"$SONDE_KAFKA_SECURE"
    [ -n "$wrong_port" ] || { echo "kafka-broker: SONDE_KAFKA_SECURE needs CERT_DIR and four ports" >&2; exit 2; }
    listeners+=",SSL://127.0.0.1:$ssl_port,MTLS://127.0.0.1:$mtls_port,SASL_SSL://127.0.0.1:$sasl_port,WRONGNAME://127.0.0.1:$wrong_port"
    protocols+=",SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL,WRONGNAME:SSL"
  fi
  local node=1 voters="1@127.0.0.1:$controller_port" cluster_id="" replicas=1 min_isr=1
  if [ -n "${SONDE_KAFKA_CLUSTER:-}" ]; then
    [ "$mode" = kraft ] || { echo "kafka-broker: SONDE_KAFKA_CLUSTER needs Kafka 3.0 or newer (KRaft), not $version" >&2; exit 2; }
    read -r node voters cluster_id <<<"$SONDE_KAFKA_CLUSTER"
    [ -n "$cluster_id" ] || { echo "kafka-broker: SONDE_KAFKA_CLUSTER needs NODE_ID VOTERS CLUSTER_ID" >&2; exit 2; }
    replicas=3
    min_isr=2
  fi
  if [ "$mode" = kraft ]; then
    cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=$listeners,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=$listeners
listener.security.protocol.map=$protocols,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=500
PROPS
  else
    cat >"$dir/server.properties" <<PROPS
broker.id=1
zookeeper.connect=127.0.0.1:$controller_port
zookeeper.session.timeout.ms=4000
listeners=$listeners
advertised.listeners=$listeners
listener.security.protocol.map=$protocols
PROPS
  fi
  cat >>"$dir/server.properties" <<PROPS
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
group.initial.rebalance.delay.ms=0
PROPS
  if [ "$major" -ge 4 ]; then
    cat >>"$dir/server.properties" <<PROPS
share.coordinator.state.topic.replication.factor=$replicas
share.coordinator.state.topic.min.isr=$min_isr
PROPS
  fi
  if [ -n "$certs" ]; then
    # PEM keystores (the key unencrypted, then the chain) and a PEM
    # truststore; the JAAS lines give PLAIN its user and SCRAM its login
    # module (SCRAM's users are stored by the formatter below, or in
    # ZooKeeper by ConfigCommand). Kafka 2.x refuses a PEM key without a password
    # ("SSL PEM key store is specified, but key password is not
    # specified"): it gets the same keys and chains as PKCS12 keystores
    # (openssl pkcs12 -export) with a password.
    local name prefix
    for name in broker wrong-name; do
      prefix=ssl.keystore
      [ "$name" = broker ] || prefix=listener.name.wrongname.ssl.keystore
      if [ "$major" -ge 3 ]; then
        printf '%s\n' "$prefix.type=PEM" "$prefix.location=$certs/$name.pem"
      else
        openssl pkcs12 -export -in "$certs/$name.pem" -out "$dir/$name.p12" -passout pass:keystore-secret ||
          { echo "kafka-broker: converting $certs/$name.pem to PKCS12 failed (openssl needed)" >&2; exit 1; }
        printf '%s\n' "$prefix.type=PKCS12" "$prefix.location=$dir/$name.p12" "$prefix.password=keystore-secret"
      fi
    done >>"$dir/server.properties"
    cat >>"$dir/server.properties" <<PROPS
ssl.truststore.type=PEM
ssl.truststore.location=$certs/ca.pem
listener.name.mtls.ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms=3000
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
PROPS
  fi
  write_log_config "$dir"
  if [ "$mode" = zookeeper ]; then
    # The SCRAM users live in ZooKeeper, which must be running.
    if [ -n "$certs" ]; then
      await_zookeeper "$controller_port"
      local jvm
      mapfile -t jvm < <(jvm_options "$dir" 256m)
      "$java" "${jvm[@]}" kafka.admin.ConfigCommand --zookeeper "127.0.0.1:$controller_port" \
        --alter --entity-type users --entity-name alice \
        --add-config 'SCRAM-SHA-256=[password=alice-secret],SCRAM-SHA-512=[password=alice-secret]' ||
        { echo "kafka-broker: storing the SCRAM user in ZooKeeper failed" >&2; exit 1; }
    fi
  elif [ ! -f "$dir/data/meta.properties" ]; then
    local jvm
    mapfile -t jvm < <(jvm_options "$dir" "$heap")
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

# Waits (up to 30 s) until ZooKeeper on 127.0.0.1:PORT answers.
await_zookeeper() {
  local port=$1 deadline=$((SECONDS + 30))
  until [ "$(zk_word "$port" ruok)" = imok ]; do
    [ $SECONDS -lt $deadline ] ||
      { echo "kafka-broker: no ZooKeeper on 127.0.0.1:$port after 30 s (scripts/kafka-broker.sh zookeeper DIR $port runs one)" >&2; exit 1; }
    sleep 0.2
  done
}

# With ZooKeeper: waits until ZooKeeper answers and holds no registration
# of broker 1 (a killed broker's lasts until its session expires).
await_registration() {
  local dir=$1 zk
  zk=$(sed -n 's/^zookeeper\.connect=127\.0\.0\.1:\([0-9]*\)$/\1/p' "$dir/server.properties")
  [ -n "$zk" ] || { echo "kafka-broker: no zookeeper.connect in $dir/server.properties" >&2; exit 1; }
  await_zookeeper "$zk"
  local deadline=$((SECONDS + 30))
  while zk_word "$zk" dump | grep -q '^[[:space:]]*/brokers/ids/1$'; do
    [ $SECONDS -lt $deadline ] ||
      { echo "kafka-broker: ZooKeeper still holds broker 1's registration after 30 s" >&2; exit 1; }
    sleep 0.2
  done
}

run() {
  local dir
  dir="$(cd "$1" && pwd)"
  check_install
  [ -f "$dir/server.properties" ] || { echo "kafka-broker: no server.properties in $dir: run prepare first" >&2; exit 1; }
  [ "$mode" = kraft ] || await_registration "$dir"
  local jvm
  mapfile -t jvm < <(jvm_options "$dir" "$heap")
  exec "$java" "${jvm[@]}" kafka.Kafka "$dir/server.properties"
}

zookeeper() {
  local dir=$1 port=$2
  check_install
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  cat >"$dir/zookeeper.properties" <<PROPS
dataDir=$dir/zookeeper
clientPort=$port
clientPortAddress=127.0.0.1
tickTime=500
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,dump
PROPS
  write_log_config "$dir"
  local jvm
  mapfile -t jvm < <(jvm_options "$dir" 128m)
  exec "$java" "${jvm[@]}" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zookeeper.properties"
}

# Waits until PID's log FILE has more than BEFORE lines matching PATTERN
# and 127.0.0.1:PORT accepts connections; exits non-zero with the log's
# tail if PID dies or 60 s pass.
await_ready() {
  local what=$1 pid=$2 file=$3 pattern=$4 before=$5 port=$6
  local deadline=$((SECONDS + 60))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "kafka-broker: $what exited during start:" >&2
      tail -30 "$file" >&2
      exit 1
    fi
    if [ "$(grep -cE "$pattern" "$file" || true)" -gt "${before:-0}" ] &&
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "kafka-broker: $what not ready after 60 s:" >&2
      tail -30 "$file" >&2
      kill -KILL "$pid" 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
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
  # setsid: the JVMs outlive this script and the terminal's signals.
  # Not a process group leader, setsid does not fork, and run and
  # zookeeper exec their JVMs, so $! is the JVM's pid.
  if [ "$mode" = zookeeper ] && ! { [ -f "$dir/zookeeper.pid" ] && kill -0 "$(cat "$dir/zookeeper.pid")" 2>/dev/null; }; then
    local zk_port=${controller_port:-$((port + 1))}
    mkdir -p "$dir/zookeeper"
    setsid "$0" zookeeper "$dir/zookeeper" "$zk_port" >>"$dir/zookeeper/zookeeper.log" 2>&1 </dev/null &
    echo $! >"$dir/zookeeper.pid"
    await_ready ZooKeeper $! "$dir/zookeeper/zookeeper.log" 'binding to port' 0 "$zk_port"
  fi
  "$0" prepare "$dir" "$port" ${controller_port:+"$controller_port"} >>"$dir/kafka.log" 2>&1 ||
    { echo "kafka-broker: preparing $dir failed:" >&2; tail -20 "$dir/kafka.log" >&2; exit 1; }
  local before
  before=$(grep -cE "$STARTED" "$dir/kafka.log" 2>/dev/null || true)
  setsid "$0" run "$dir" >>"$dir/kafka.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/kafka.pid"
  await_ready "the broker" "$pid" "$dir/kafka.log" "$STARTED" "$before" "$port"
  echo "kafka-broker: Kafka $version ready on 127.0.0.1:$port (pid $pid, log $dir/kafka.log)" >&2
}

# Sends SIGTERM to the pid in FILE, waits for the exit (up to 30 s, then
# SIGKILL) and removes FILE.
stop_pid() {
  local file=$1 what=$2 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill -TERM "$pid" 2>/dev/null; then
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then
        echo "kafka-broker: $what did not stop 30 s after SIGTERM, killing" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.2
    done
  fi
  rm -f "$file"
}

stop() {
  local dir=$1
  [ -f "$dir/kafka.pid" ] || [ -f "$dir/zookeeper.pid" ] ||
    { echo "kafka-broker: no broker pid in $dir" >&2; exit 1; }
  stop_pid "$dir/kafka.pid" "the broker"
  stop_pid "$dir/zookeeper.pid" ZooKeeper
}

case "${1:-}" in
  start) [ $# -ge 3 ] || usage; start "$2" "$3" "${4:-}" ;;
  stop) [ $# -eq 2 ] || usage; stop "$2" ;;
  prepare) [ $# -ge 3 ] || usage; prepare "$2" "$3" "${4:-}" ;;
  run) [ $# -eq 2 ] || usage; run "$2" ;;
  zookeeper) [ $# -eq 3 ] || usage; zookeeper "$2" "$3" ;;
  version) [ $# -eq 1 ] || usage; check_install; echo "$version" ;;
  cluster-id) [ $# -le 2 ] || usage; cluster_ids "${2:-1}" ;;
  *) usage ;;
esac
