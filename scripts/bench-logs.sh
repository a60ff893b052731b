#!/usr/bin/env bash
# Log shipping side by side: the same numbered-line load through each
# agent into a local Kafka broker, and a checker that counts what arrived.
#
#   scripts/bench-logs.sh [--install] [--agents "rsyslog sonde"]
#       [--compression "lz4 zstd"] [--total 1GiB] [--files 4] [--line-bytes 150]
#   scripts/bench-logs.sh --sink blackhole [--agents "rsyslog sonde"] [--total 1GiB]
#   scripts/bench-logs.sh --kill 20 [--agents rsyslog] [--kill-total 512MiB]
#       [--kill-rate 16MB] [--follow active|rotated] [--rotate rename|copytruncate]
#   scripts/bench-logs.sh --steady 10MB [--steady-total 600MB] [--files 20] [--idle-files 9980]
#       [--sink blackhole] [--compression lz4] [--agents "sonde rsyslog"]
#   scripts/bench-logs.sh --security "plain tls scram" [--agents sonde] [--compression lz4]
#   either with [--delivery at_least_once|exactly_once] [--port 19092] [--keep-dir]
#       [--multiline REGEX] [--format lines|cri]
#
# Throughput (the default): sonde-logwrite writes --total bytes of
# --line-bytes lines into --files files first; then the agent starts and
# reads them from the beginning into topic bench-<agent>-<compression>.
# The time is from the agent's start until the topic holds as many
# records as lines were written (sonde-logcheck --wait-offsets; with
# Kafka transactions their commit markers take offsets too, which makes
# the time early by the last transaction at most), then the checker reads
# every record and counts lines lost and duplicated; the agent's CPU seconds
# (utime + stime of all its threads, /proc/PID/stat) and peak RSS (VmHWM)
# are read before it is stopped. Printed per run: MB/s (line bytes written,
# newlines included, per second), CPU-s/GB and peak RSS, then a table.
#
# --sink blackhole: the same throughput run with no output, to measure
# reading and splitting alone (no broker is started): sonde ships into its
# `blackhole` sink (the time is when `sonde_sink_records_total` on its
# admin listener reaches the line count); rsyslog, which has no discarding
# output that tells when it is done, writes each line's message to one
# file with omfile (the time is when that file holds every byte).
#
# --kill N (the SIGKILL case): the writer runs at --kill-rate with rename
# rotation every --rotate-bytes (5 generations kept) while the agent is
# SIGKILLed N times at random moments of the writing time and restarted
# after a random pause of up to a second (--kill 0 is the control: the
# same writing and rotation without a kill); once the writer is done the
# agent runs until the topic has been quiet for 30 s, and the checker
# counts lines lost and duplicated. --rotate copytruncate copies each
# file to .1 and truncates it instead, with no write for
# --copytruncate-pause (1s) before each copy so the agent can catch up
# (what logrotate's caveat asks; lines unread at the truncation are
# only in the copy);
# the copies then must not match the agent's paths, so use it with
# --follow active. --follow active (the default) gives the agent the 4 active
# paths (app-<i>.log, what rsyslog's imfile documentation shows); rotated
# gives it a glob covering rotated names too (app-<i>.log*), which an
# agent needs to find a file renamed while it was down (sonde's contract
# asks for it; with the active paths alone such a file's tail is lost).
#
# --steady RATE (the steady case): the agent starts on --files empty
# files, then the writer appends --steady-total bytes to them at RATE in
# 16 KiB writes, as running services do; the agent's CPU is read when the
# writer starts and again once every line is delivered (blackhole: the
# sink's count; Kafka: the topic's end offsets): that CPU, over the
# writer's time, is the share of one core the load costs (printed with
# the time until delivery, the peak RSS and the descriptors the agent
# holds at the end). --idle-files N adds N files of one line each
# (idle-<j>.log) that the agent reads at its start and that stay idle;
# sonde is measured once it has closed them (close_idle, 30 s).
#
# --multiline REGEX joins lines into records at lines matching REGEX
# (a POSIX ERE that is also a Rust regex, like '^f=[0-9]', which starts a
# record at every line the writer writes: the most work per byte): sonde's
# [logs.multiline] start with timeout 100ms, rsyslog's imfile
# startmsg.regex with readTimeout 1 (its least). Each file's last record
# waits for that timeout, which the time includes.
#
# --format cri writes every line as a container runtime's CRI line (a
# whole stdout piece, `<time> stdout F <line>`, the prefix counted in
# --line-bytes) and has sonde read them with format = "cri", shipping the
# line alone; rsyslog has no reader of the format and is skipped.
#
# --security (throughput runs) lists how sonde connects, each a row of
# the same run: plain (the default), tls (TLS to the broker's SSL
# listener, the CA from a file) and scram (SCRAM-SHA-512 over TLS to its
# SASL_SSL listener). Other than plain, the broker gets those listeners
# (scripts/kafka-broker.sh, SONDE_KAFKA_SECURE, on --port + 2 to + 5) and
# certificates openssl makes in the work directory; the checker reads
# over plaintext. rsyslog runs plain only.
#
# --delivery is the sonde sink's delivery mode; with exactly_once the
# checker reads read_committed, as the mode's promise is stated (rsyslog
# has no such mode: its runs are the same either way).
#
# --install installs Debian's rsyslog and rsyslog-kafka (apt-get update
# once, then apt-get install -y). The broker is scripts/kafka-broker.sh on
# --port (the jars from SONDE_KAFKA_LIBS or scripts/install-kafka.sh's
# default directory). The load tools are built with cargo unless
# LOADGEN_BIN names a directory holding sonde-logwrite and sonde-logcheck.
#
# Each agent is a set of functions, agent_<name>_{prepare,start}:
# prepare writes its configuration for a run (or prints why it cannot run
# and returns 1, and the agent is skipped); start launches it in the
# background and sets AGENT_PID. Adding an agent is adding those two.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"

install=0
agents="rsyslog sonde"
compressions="lz4 zstd"
total=1GiB
files=4
line_bytes=150
port=19092
admin_port=18686
kills=
kill_total=512MiB
kill_rate=16MB
rotate_bytes=8MiB
follow=active
delivery=at_least_once
sink=kafka
rotate=rename
ct_pause=1s
keep_dir=0
multiline=
format=lines
steady=
steady_total=600MB
idle_files=0
securities=plain
while [ $# -gt 0 ]; do
  case "$1" in
    --install) install=1 ;;
    --agents) agents=$2; shift ;;
    --compression) compressions=$2; shift ;;
    --total) total=$2; shift ;;
    --files) files=$2; shift ;;
    --line-bytes) line_bytes=$2; shift ;;
    --port) port=$2; shift ;;
    --security) securities=$2; shift ;;
    --kill) kills=$2; shift ;;
    --kill-total) kill_total=$2; shift ;;
    --kill-rate) kill_rate=$2; shift ;;
    --rotate-bytes) rotate_bytes=$2; shift ;;
    --follow) follow=$2; shift ;;
    --delivery) delivery=$2; shift ;;
    --sink) sink=$2; shift ;;
    --rotate) rotate=$2; shift ;;
    --copytruncate-pause) ct_pause=$2; shift ;;
    --keep-dir) keep_dir=1 ;;
    --multiline) multiline=$2; shift ;;
    --format) format=$2; shift ;;
    --steady) steady=$2; shift ;;
    --steady-total) steady_total=$2; shift ;;
    --idle-files) idle_files=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-logs: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$follow" in active | rotated) ;; *) echo "bench-logs: --follow active or rotated" >&2; exit 2 ;; esac
case "$sink" in kafka | blackhole) ;; *) echo "bench-logs: --sink kafka or blackhole" >&2; exit 2 ;; esac
[ "$sink" = kafka ] || [ -z "$kills" ] || { echo "bench-logs: --kill runs into kafka" >&2; exit 2; }
[ "$sink" = kafka ] || compressions=none
case "$format" in lines | cri) ;; *) echo "bench-logs: --format lines or cri" >&2; exit 2 ;; esac
case "$rotate" in rename | copytruncate) ;; *) echo "bench-logs: --rotate rename or copytruncate" >&2; exit 2 ;; esac
case "$delivery" in
  at_least_once) isolation=read_uncommitted ;;
  exactly_once) isolation=read_committed ;;
  *) echo "bench-logs: --delivery at_least_once or exactly_once" >&2; exit 2 ;;
esac
case "$kills" in "" | *[!0-9]*) [ -z "$kills" ] || { echo "bench-logs: --kill takes a count" >&2; exit 2; } ;; esac

if [ "$install" = 1 ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y rsyslog rsyslog-kafka
fi

if [ -n "${LOADGEN_BIN:-}" ]; then
  bin=$LOADGEN_BIN
else
  (cd "$root" && cargo build -q -p sonde-loadgen --bins)
  bin="$root/target/debug"
fi
logwrite="$bin/sonde-logwrite"
logcheck="$bin/sonde-logcheck"
SONDE_BIN=${SONDE_BIN:-$root/target/debug/sonde}

work=$(mktemp -d /tmp/sonde-bench-logs.XXXXXX)
broker_dir="$work/kafka"
AGENT_PID=
cleanup() {
  if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
    kill -KILL "$AGENT_PID" 2>/dev/null || true
  fi
  if [ -f "$broker_dir/kafka.pid" ]; then
    "$root/scripts/kafka-broker.sh" stop "$broker_dir" || true
  fi
  if [ "$keep_dir" = 1 ]; then
    echo "bench-logs: kept $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

now() { date +%s.%N; }

# CPU seconds (utime + stime, every thread of the process) from
# /proc/PID/stat; the fields are counted after the command name, which
# may hold spaces.
cpu_seconds() {
  local stat
  stat=$(cat "/proc/$1/stat")
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  echo "scale=3; (${12} + ${13}) / $(getconf CLK_TCK)" | bc
}

peak_rss_mb() {
  awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"
}

# The paths an agent follows: the active files, or globs covering the
# rotated generations too.
follow_paths() {
  local logs=$1 i
  if [ "$idle_files" -gt 0 ]; then
    # One glob over the active and the idle files.
    echo "$logs/*.log"
    return
  fi
  for ((i = 0; i < files; i++)); do
    if [ "$follow" = rotated ]; then
      echo "$logs/app-$i.log*"
    else
      echo "$logs/app-$i.log"
    fi
  done
}

# --- rsyslog: imfile (inotify) -> omkafka ----------------------------------

# agent_rsyslog_prepare RUN_DIR LOG_DIR TOPIC COMPRESSION
agent_rsyslog_prepare() {
  local run=$1 logs=$2 topic=$3 compression=$4
  [ "$format" = lines ] || { echo "rsyslog has no reader of the $format format"; return 1; }
  command -v rsyslogd >/dev/null || { echo "rsyslogd is not installed (Debian package rsyslog; or --install)"; return 1; }
  [ -n "$(find /usr/lib -name omkafka.so -print -quit 2>/dev/null)" ] ||
    { echo "omkafka is not installed (Debian package rsyslog-kafka; or --install)"; return 1; }
  mkdir -p "$run/rsyslog-state"
  {
    echo "global(workDirectory=\"$run/rsyslog-state\")"
    echo 'module(load="imfile" mode="inotify")'
    echo 'module(load="omkafka")'
    # JSON with the line and the file it came from (addMetadata).
    echo 'template(name="kafkajson" type="list" option.jsonf="on") {'
    echo '  property(outname="message" name="msg" format="jsonf")'
    echo '  property(outname="file" name="$!metadata!filename" format="jsonf")'
    echo '}'
    echo 'template(name="line" type="string" string="%msg%\n")'
    echo 'ruleset(name="tokafka") {'
    if [ "$sink" = blackhole ]; then
      echo "  action(type=\"omfile\" file=\"$run/out.log\" template=\"line\")"
    else
      echo "  action(type=\"omkafka\" broker=[\"127.0.0.1:$port\"] topic=\"$topic\" template=\"kafkajson\""
      # resubmitOnFailure: without it omkafka drops a line librdkafka refuses
      # with "Queue full" (its in-memory queue holds 100,000 messages; a
      # 64 MiB run lost 2 lines that way).
      echo "         resubmitOnFailure=\"on\""
      echo "         confParam=[\"compression.codec=$compression\", \"enable.idempotence=true\"]"
      echo '         topicConfParam=["acks=all"])'
    fi
    echo '}'
    # reopenOnTruncate: imfile's documented setting for copytruncate (off
    # by default, when it ignores a file that shrank); set for those runs.
    local i=0 path truncate= joined=
    [ "$rotate" = copytruncate ] && truncate=' reopenOnTruncate="on"'
    [ -n "$multiline" ] && joined=" startmsg.regex=\"$multiline\" readTimeout=\"1\""
    while read -r path; do
      echo "input(type=\"imfile\" File=\"$path\" Tag=\"app$i\" addMetadata=\"on\" ruleset=\"tokafka\"$truncate$joined)"
      i=$((i + 1))
    done < <(follow_paths "$logs")
  } >"$run/rsyslog.conf"
  local out
  out=$(rsyslogd -N1 -f "$run/rsyslog.conf" 2>&1) || { echo "rsyslogd -N1 refused the config: $out"; return 1; }
  RSYSLOG_VERSION=$(rsyslogd -v | head -1)
}

# agent_rsyslog_done RUN_DIR LINES BYTES: whether the blackhole run is done.
agent_rsyslog_done() {
  [ "$(stat -c %s "$1/out.log" 2>/dev/null || echo 0)" -ge "$3" ]
}

agent_rsyslog_start() {
  local run=$1
  rm -f "$run/rsyslogd.pid"
  rsyslogd -n -f "$run/rsyslog.conf" -i "$run/rsyslogd.pid" >>"$run/agent.log" 2>&1 &
  AGENT_PID=$!
}

# --- sonde: a [[logs]] source into its kafka sink -------------------------

# agent_sonde_prepare RUN_DIR LOG_DIR TOPIC COMPRESSION
agent_sonde_prepare() {
  local run=$1 logs=$2 topic=$3 compression=$4 security=${5:-plain}
  [ -x "$SONDE_BIN" ] || { echo "no sonde binary at $SONDE_BIN (cargo build -p sonde, or set SONDE_BIN)"; return 1; }
  local include
  include=$(follow_paths "$logs" | sed 's/.*/"&"/' | paste -sd, -)
  # The admin listener tells when a blackhole run is done.
  local admin=""
  [ "$sink" = blackhole ] && admin="127.0.0.1:$admin_port"
  cat >"$run/sonde.toml" <<TOML
[agent]
data_dir = "$run/sonde-data"
admin_listen = "$admin"

[[logs]]
name = "app"
include = [$include]
format = "$format"

TOML
  if [ -n "$multiline" ]; then
    cat >>"$run/sonde.toml" <<TOML
[logs.multiline]
start = '$multiline'
timeout = "100ms"

TOML
  fi
  if [ "$sink" = blackhole ]; then
    cat >>"$run/sonde.toml" <<TOML
[[sinks]]
name = "null"
type = "blackhole"
inputs = ["app"]
TOML
  else
    local broker="127.0.0.1:$port" keys=""
    case "$security" in
      plain) ;;
      tls)
        broker="127.0.0.1:$((port + 2))"
        keys="tls = { ca_file = \"$certs/ca.pem\" }" ;;
      scram)
        broker="127.0.0.1:$((port + 4))"
        printf 'alice-secret\n' >"$run/password"
        keys="tls = { ca_file = \"$certs/ca.pem\" }
sasl = { mechanism = \"SCRAM-SHA-512\", username = \"alice\", password_file = \"$run/password\" }" ;;
      *) echo "unknown --security $security (plain, tls or scram)"; return 1 ;;
    esac
    cat >>"$run/sonde.toml" <<TOML
[[sinks]]
name = "kafka"
type = "kafka"
inputs = ["app"]
brokers = ["$broker"]
topic = "$topic"
format = "raw"
compression = "$compression"
delivery = "$delivery"
$keys
TOML
  fi
  local out
  out=$("$SONDE_BIN" validate --config "$run/sonde.toml" 2>&1) ||
    { echo "this sonde cannot ship logs to Kafka yet (sonde validate: $out)"; return 1; }
}

# agent_sonde_done RUN_DIR LINES BYTES: whether the blackhole run is done.
agent_sonde_done() {
  local n
  n=$(curl -s "http://127.0.0.1:$admin_port/metrics" |
    awk '/^sonde_sink_records_total\{.*sink="null"/ { print $NF }')
  [ -n "$n" ] && [ "${n%.*}" -ge "$2" ]
}

agent_sonde_start() {
  local run=$1
  "$SONDE_BIN" run --config "$run/sonde.toml" >>"$run/agent.log" 2>&1 &
  AGENT_PID=$!
}

# ---------------------------------------------------------------------------

stop_agent() {
  if [ -n "$AGENT_PID" ]; then
    kill -TERM "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
    AGENT_PID=
  fi
}

# Certificates for the TLS and SASL_SSL listeners: a CA and the broker's
# certificate for 127.0.0.1 (key first, then the certificate: Kafka's PEM
# keystore).
certs="$work/certs"
if [ "$securities" != plain ]; then
  mkdir -p "$certs"
  (
    cd "$certs"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout broker.key -out broker.csr -subj /CN=127.0.0.1 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
      -out broker.crt -days 2 -extfile san.ext 2>/dev/null
    cat broker.key broker.crt >broker.pem
    cp broker.pem wrong-name.pem
  ) || { echo "bench-logs: making certificates with openssl failed" >&2; exit 1; }
  export SONDE_KAFKA_SECURE="$certs $((port + 2)) $((port + 3)) $((port + 4)) $((port + 5))"
fi
[ "$sink" = blackhole ] || "$root/scripts/kafka-broker.sh" start "$broker_dir" "$port"

# throughput AGENT COMPRESSION: one run; appends a row to $work/results.
throughput() {
  local agent=$1 compression=$2 security=${3:-plain}
  local run="$work/$agent-$compression-$security" topic="bench-$agent-$compression-$security"
  mkdir -p "$run"
  "$logwrite" --dir "$run/logs" --files "$files" --line-bytes "$line_bytes" --total "$total" \
    --format "$format" --summary "$run/summary.json" >/dev/null 2>"$run/write.log"
  local why
  if [ "$security" != plain ] && [ "$agent" != sonde ]; then
    echo "bench-logs: skipping $agent with $security: plain only" >&2
    return 0
  fi
  if ! why=$("agent_${agent}_prepare" "$run" "$run/logs" "$topic" "$compression" "$security"); then
    echo "bench-logs: skipping $agent: $why" >&2
    return 0
  fi
  local bytes
  bytes=$(jq .bytes "$run/summary.json")
  echo "bench-logs: $agent, $compression: $(jq .lines "$run/summary.json") lines, $bytes bytes in $files files ($(tail -1 "$run/write.log"))" >&2
  local t0 tc cpu rss secs mbs cpugb lost=- dup=- rc=0
  t0=$(now)
  "agent_${agent}_start" "$run"
  tc=$(now)
  if [ "$sink" = blackhole ]; then
    local lines deadline
    lines=$(jq .lines "$run/summary.json")
    deadline=$(echo "$t0 + 600" | bc)
    until "agent_${agent}_done" "$run" "$lines" "$bytes"; do
      if [ "$(echo "$(now) > $deadline" | bc)" = 1 ] || ! kill -0 "$AGENT_PID" 2>/dev/null; then
        echo "bench-logs: $agent did not get through the lines within 600 s" >&2
        stop_agent
        return 1
      fi
      sleep 0.02
    done
    secs=$(echo "scale=2; ($(now) - $t0) / 1" | bc)
  else
    # --wait-offsets: the time is when the topic holds as many records as
    # lines were written (polling end offsets costs nothing per record, so
    # the checker's own speed does not bound it); then every record is read
    # and counted.
    "$logcheck" --brokers "127.0.0.1:$port" --topic "$topic" --expect "$run/summary.json" \
      --isolation "$isolation" --wait-offsets --idle 60s >"$run/verdict.json" || rc=$?
    local reached
    reached=$(jq '.offsets_reached_s // empty' "$run/verdict.json")
    secs=n/a
    [ -z "$reached" ] || secs=$(echo "scale=2; ($tc - $t0 + $reached) / 1" | bc)
    lost=$(jq .lost "$run/verdict.json")
    dup=$(jq .duplicated "$run/verdict.json")
    [ "$rc" = 0 ] || echo "bench-logs: $agent, $compression: the checker found lines missing: $(jq -c '{lost, lost_ranges, unparsed}' "$run/verdict.json")" >&2
  fi
  cpu=$(cpu_seconds "$AGENT_PID")
  rss=$(peak_rss_mb "$AGENT_PID")
  stop_agent
  mbs=n/a
  [ "$secs" = n/a ] || mbs=$(echo "scale=1; $bytes / $secs / 1000000" | bc)
  cpugb=$(echo "scale=2; $cpu / ($bytes / 1000000000)" | bc)
  printf '%-8s %-5s %-6s %8s %8s %8s %9s %10s %8s %6s\n' "$agent" "${sink/kafka/$compression}" "$security" "$secs" "$mbs" "$cpu" "$cpugb" "$rss" "$lost" "$dup" >>"$work/results"
  tail -1 "$work/results" >&2
}

# prepare_following AGENT RUN_DIR TOPIC COMPRESSION: prepares the agent for
# a run whose writer starts after the agent (returns 1, saying why, when
# it cannot run) and makes the --files empty files, so that the agent
# follows them from their first line.
prepare_following() {
  local agent=$1 run=$2 topic=$3 compression=$4
  mkdir -p "$run/logs"
  local why
  if ! why=$("agent_${agent}_prepare" "$run" "$run/logs" "$topic" "$compression"); then
    echo "bench-logs: skipping $agent: $why" >&2
    return 1
  fi
  local i
  for ((i = 0; i < files; i++)); do : >"$run/logs/app-$i.log"; done
}

# steadyrun AGENT COMPRESSION: the steady case.
steadyrun() {
  local agent=$1 compression=$2
  local run="$work/$agent-steady-$compression" topic="steady-$agent-$compression"
  prepare_following "$agent" "$run" "$topic" "$compression" || return 0
  local i
  for ((i = 0; i < idle_files; i++)); do echo "idle file $i" >"$run/logs/idle-$i.log"; done
  "agent_${agent}_start" "$run"
  # Its start-up is not what this measures.
  sleep $((2 + idle_files / 2000))
  if [ "$agent" = sonde ] && [ "$idle_files" -gt 0 ]; then
    # Nor the first close_idle: measure once the idle files are closed.
    local open deadline
    deadline=$(echo "$(now) + 120" | bc)
    until open=$(curl -s "http://127.0.0.1:$admin_port/metrics" |
      awk '/^sonde_log_files_open/ { print $NF }') && [ -n "$open" ] && [ "${open%.*}" -le "$files" ]; do
      if [ "$(echo "$(now) > $deadline" | bc)" = 1 ]; then
        echo "bench-logs: sonde still holds $open files open 120 s after its start" >&2
        break
      fi
      sleep 0.5
    done
  fi
  local cpu0 t0 t1 cpu1 secs rc=0 lost=- dup=-
  cpu0=$(cpu_seconds "$AGENT_PID")
  t0=$(now)
  "$logwrite" --dir "$run/logs" --files "$files" --line-bytes "$line_bytes" --total "$steady_total" \
    --rate "$steady" --chunk-bytes 16KiB --summary "$run/summary.json" >/dev/null 2>"$run/write.log"
  local written
  written=$(echo "scale=3; $(now) - $t0" | bc)
  local lines bytes
  lines=$(jq .lines "$run/summary.json")
  bytes=$(jq .bytes "$run/summary.json")
  if [ "$sink" = blackhole ]; then
    local deadline
    deadline=$(echo "$(now) + 120" | bc)
    until "agent_${agent}_done" "$run" "$lines" "$bytes"; do
      if [ "$(echo "$(now) > $deadline" | bc)" = 1 ]; then
        echo "bench-logs: $agent did not deliver every line within 120 s of the writer's end" >&2
        stop_agent
        return 1
      fi
      sleep 0.05
    done
  else
    "$logcheck" --brokers "127.0.0.1:$port" --topic "$topic" --expect "$run/summary.json" \
      --isolation "$isolation" --wait-offsets --idle 60s >"$run/verdict.json" || rc=$?
    lost=$(jq .lost "$run/verdict.json")
    dup=$(jq .duplicated "$run/verdict.json")
  fi
  t1=$(now)
  cpu1=$(cpu_seconds "$AGENT_PID")
  local rss fds
  rss=$(peak_rss_mb "$AGENT_PID")
  fds=$(ls "/proc/$AGENT_PID/fd" | wc -l)
  stop_agent
  secs=$(echo "scale=2; ($t1 - $t0) / 1" | bc)
  local cpu pct
  cpu=$(echo "scale=3; $cpu1 - $cpu0" | bc)
  pct=$(echo "scale=2; 100 * $cpu / $written" | bc)
  printf '%-8s %-9s %8s %8s %8s %8s %10s %6s %8s %6s\n' "$agent" "${sink/kafka/$compression}" "$secs" \
    "$(echo "scale=1; $bytes / $secs / 1000000" | bc)" "$cpu" "$pct" "$rss" "$fds" "$lost" "$dup" >>"$work/results"
  tail -1 "$work/results" >&2
}

# killrun AGENT: the SIGKILL case.
killrun() {
  local agent=$1 compression=lz4
  local run="$work/$agent-kill" topic="kill-$agent"
  prepare_following "$agent" "$run" "$topic" "$compression" || return 0
  "agent_${agent}_start" "$run"
  "$logwrite" --dir "$run/logs" --files "$files" --line-bytes "$line_bytes" --total "$kill_total" \
    --rate "$kill_rate" --rotate "$rotate" --rotate-bytes "$rotate_bytes" --keep 5 \
    --copytruncate-pause "$ct_pause" \
    --summary "$run/summary.json" >/dev/null 2>"$run/write.log" &
  local writer=$!
  # Spread the kills over the writing time, total / rate seconds
  # (numfmt reads 512Mi as 2^20 units and 16M as 10^6, like sonde-logwrite).
  local span
  span=$(echo "scale=3; $(numfmt --from=auto "${kill_total%B}") / $(numfmt --from=auto "${kill_rate%B}")" | bc)
  echo "bench-logs: $agent: $kills SIGKILLs over ~${span%.*} s of writing at $kill_rate with $rotate rotation every $rotate_bytes (follow $follow)" >&2
  # The kill moments: N uniform random times in [0.5 s, span - 0.5 s],
  # sorted; after each kill the agent stays down for up to a second.
  local moments k at down started
  moments=$(for ((k = 0; k < kills; k++)); do
    echo "scale=3; 0.5 + $RANDOM / 32767 * ($span - 1)" | bc
  done | sort -n)
  started=$(now)
  k=0
  for at in $moments; do
    k=$((k + 1))
    sleep "$(echo "scale=3; d = $started + $at - $(now); if (d < 0) d = 0; d" | bc)"
    kill -KILL "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
    down=$(echo "scale=3; $RANDOM / 32767" | bc)
    sleep "$down"
    "agent_${agent}_start" "$run"
    kill -0 "$writer" 2>/dev/null || echo "bench-logs: kill $k came after the writer finished" >&2
  done
  wait "$writer"
  echo "bench-logs: writer done: $(tail -1 "$run/write.log")" >&2
  local rc=0
  "$logcheck" --brokers "127.0.0.1:$port" --topic "$topic" --expect "$run/summary.json" \
    --isolation "$isolation" --idle 30s --until-idle >"$run/verdict.json" || rc=$?
  stop_agent
  jq -c '{expected, unique, lost, duplicated, unexpected, unparsed, lost_ranges}' "$run/verdict.json" >&2
  printf '%-8s %6s %10s %10s %10s %8s %12s %14s\n' "$agent" "$kills" "$(jq .expected "$run/verdict.json")" \
    "$(jq .lost "$run/verdict.json")" "$(jq .duplicated "$run/verdict.json")" "$follow" "$rotate" "$delivery" >>"$work/results"
}

echo "bench-logs: $(nproc) CPUs, $(uname -r), work dir $work" >&2
if [ -n "$steady" ]; then
  echo "bench-logs: steady: $steady_total at $steady into $files files" >&2
  printf '%-8s %-9s %8s %8s %8s %8s %10s %6s %8s %6s\n' agent codec seconds MB/s CPU-s %core peakRSS-MB fds lost dup >"$work/results"
  for compression in $compressions; do
    for agent in $agents; do steadyrun "$agent" "$compression"; done
  done
elif [ -n "$kills" ]; then
  printf '%-8s %6s %10s %10s %10s %8s %12s %14s\n' agent kills expected lost duplicated follow rotate delivery >"$work/results"
  for agent in $agents; do killrun "$agent"; done
else
  printf '%-8s %-5s %-6s %8s %8s %8s %9s %10s %8s %6s\n' agent codec link seconds MB/s CPU-s CPU-s/GB peakRSS-MB lost dup >"$work/results"
  for compression in $compressions; do
    for security in $securities; do
      for agent in $agents; do throughput "$agent" "$compression" "$security"; done
    done
  done
fi
[ -n "${RSYSLOG_VERSION:-}" ] && echo "$RSYSLOG_VERSION" >&2
cat "$work/results"
