#!/usr/bin/env bash
# Builds the OpenTelemetry Collector the otlp_http sink's integration test
# runs (tools/otelcol/builder.yaml: OTLP receiver + debug exporter) and
# prints the binary's absolute path on stdout; progress goes to stderr.
#
#   export SONDE_OTELCOL="$(scripts/build-otelcol.sh)"
#
# The collector is not packaged in Debian. ocb (the OpenTelemetry Collector
# Builder) is installed with `go install` into target/otelcol/ocb-<version>/
# (GOBIN there, so nothing lands in ~/go/bin), and generates and compiles
# the collector into target/otelcol/dist/. Both are git-ignored. Nothing is
# rebuilt while the binary exists and was built from the current manifest
# (a copy of the manifest is kept next to it). Needs Go and the Go module
# proxy; any failure exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep in step with tools/otelcol/builder.yaml (see the comment there on
# why this version).
OCB_VERSION=v0.150.0
manifest=tools/otelcol/builder.yaml
out_dir=target/otelcol/dist
binary="$PWD/$out_dir/otelcol-sonde-test"
stamp="$out_dir/builder.yaml.built"

if [ -x "$binary" ] && cmp -s "$manifest" "$stamp"; then
  echo "$binary"
  exit 0
fi

command -v go >/dev/null 2>&1 || { echo "build-otelcol: go is not installed" >&2; exit 1; }
# The collector's modules at v0.150.0 declare `go 1.25.0`. An older go
# (Debian bookworm's golang-go is 1.19) cannot build them; say so rather
# than fail deep inside ocb.
go_minor=$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
if [ -z "$go_minor" ] || [ "$go_minor" -lt 25 ]; then
  echo "build-otelcol: needs Go >= 1.25 for collector $OCB_VERSION, found $(go env GOVERSION)" >&2
  exit 1
fi

gobin="$PWD/target/otelcol/ocb-$OCB_VERSION"
ocb="$gobin/builder"
if [ ! -x "$ocb" ]; then
  echo "build-otelcol: go install go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION" >&2
  mkdir -p "$gobin"
  GOBIN="$gobin" go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION" >&2
fi

echo "build-otelcol: building the collector from $manifest" >&2
start=$(date +%s)
rm -f "$stamp"
"$ocb" --config "$manifest" >&2
[ -x "$binary" ] || { echo "build-otelcol: ocb finished but $binary is missing" >&2; exit 1; }
cp "$manifest" "$stamp"
echo "build-otelcol: built in $(( $(date +%s) - start )) s" >&2
echo "$binary"
