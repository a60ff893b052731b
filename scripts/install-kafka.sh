#!/usr/bin/env bash
# Installs the Kafka broker the integration tests start and prints the
# absolute path of its libs directory (the broker's classpath) on stdout;
# progress goes to stderr.
#
#   export SONDE_KAFKA_LIBS="$(scripts/install-kafka.sh)"
#
# Kafka is not packaged in Debian, but its jars are on Maven Central. The
# committed project tools/kafka/pom.xml depends on the broker
# (org.apache.kafka:kafka_2.13) and a log4j backend; `mvn
# dependency:copy-dependencies` copies those jars and everything they need
# at run time into target/kafka/libs-<version>/ (git-ignored). Nothing is
# downloaded while that directory exists and was filled from the current
# pom (a copy of the pom is kept next to it). Needs a JDK, Maven and Maven
# Central; any failure exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep in step with kafka.version in tools/kafka/pom.xml.
KAFKA_VERSION=4.1.0
pom=tools/kafka/pom.xml
out_dir="$PWD/target/kafka"
libs="$out_dir/libs-$KAFKA_VERSION"
stamp="$out_dir/pom.xml.copied"

if [ -d "$libs" ] && cmp -s "$pom" "$stamp"; then
  echo "$libs"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || { echo "install-kafka: mvn is not installed (Debian package maven)" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "install-kafka: java is not installed (Debian package openjdk-17-jdk-headless)" >&2; exit 1; }
grep -q "<kafka.version>$KAFKA_VERSION</kafka.version>" "$pom" ||
  { echo "install-kafka: $pom does not pin kafka $KAFKA_VERSION" >&2; exit 1; }

echo "install-kafka: copying kafka $KAFKA_VERSION and its dependencies into $libs" >&2
start=$(date +%s)
rm -f "$stamp"
# Fill a fresh directory and move it into place, so that an interrupted
# copy never leaves a libs directory that looks complete.
partial="$libs.partial"
rm -rf "$partial" "$libs"
mkdir -p "$out_dir"
mvn -B -q -f "$pom" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$partial" >&2
[ -n "$(find "$partial" -maxdepth 1 -name "kafka_2.13-$KAFKA_VERSION.jar")" ] ||
  { echo "install-kafka: mvn finished but kafka_2.13-$KAFKA_VERSION.jar is missing" >&2; exit 1; }
mv "$partial" "$libs"
cp "$pom" "$stamp"
echo "install-kafka: $(find "$libs" -name '*.jar' | wc -l) jars in $(( $(date +%s) - start )) s" >&2
echo "$libs"
