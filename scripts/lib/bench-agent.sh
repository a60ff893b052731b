# Sourced by the benchmark scripts: the agent config they all run.
#
# bench_agent_config FILE INTERVAL ADMIN STATSD MSGPACK SINK_PATH [AGENT_LINE...]
#   writes to FILE an agent with a window of INTERVAL, its admin listener
#   on ADMIN (HOST:PORT), StatsD and msgpack UDP receivers on STATSD and
#   MSGPACK (HOST:PORT), a file sink writing SINK_PATH, its data_dir in
#   FILE's directory, and any extra AGENT_LINEs (`key = value`) in [agent].
bench_agent_config() {
  local file=$1 interval=$2 admin=$3 statsd=$4 msgpack=$5 sink=$6
  shift 6
  {
    printf '[agent]\ninterval = "%s"\nadmin_listen = "%s"\ndata_dir = "%s"\n' \
      "$interval" "$admin" "$(dirname "$file")"
    local line
    for line in "$@"; do printf '%s\n' "$line"; done
    printf '[[receivers]]\nprotocol = "statsd"\nlisten = "udp://%s"\n' "$statsd"
    printf '[[receivers]]\nprotocol = "msgpack"\nlisten = "udp://%s"\n' "$msgpack"
    printf '[[sinks]]\ntype = "file"\npath = "%s"\n' "$sink"
  } >"$file"
}
