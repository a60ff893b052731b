#!/usr/bin/env bash
# Installs a Kafka broker the integration tests start and prints the
# absolute path of its libs directory (the broker's classpath) on stdout;
# progress goes to stderr.
#
#   scripts/install-kafka.sh [VERSION]
#   export SONDE_KAFKA_LIBS="$(scripts/install-kafka.sh)"
#   export SONDE_KAFKA_VERSION=3.9.2 SONDE_KAFKA_LIBS="$(scripts/install-kafka.sh 3.9.2)"
#
# VERSION is a release of org.apache.kafka:kafka_2.13 (default 4.1.0, the
# one every test runs against; scripts/test runs the Kafka suites against
# 3.9.2 and 2.8.2 too). Kafka is not packaged in Debian, but its jars are
# on Maven Central. The committed projects tools/kafka/pom.xml (4.x, which
# logs through log4j2) and tools/kafka/pom-reload4j.xml (2.x and 3.x,
# which log through log4j 1) depend on the broker and its log backend;
# `mvn dependency:copy-dependencies -Dkafka.version=VERSION` copies those
# jars and everything they need at run time into
# target/kafka/libs-VERSION/ (git-ignored). Nothing is downloaded while
# that directory exists and was filled from the current pom (a copy of the
# pom is kept next to it, libs-VERSION.pom). Needs a JDK, Maven and Maven
# Central; any failure exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_VERSION=${1:-4.1.0}
[[ "$KAFKA_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  { echo "install-kafka: '$KAFKA_VERSION' is not a Kafka release such as 4.1.0" >&2; exit 2; }
case "$KAFKA_VERSION" in
  [0-3].*) pom=tools/kafka/pom-reload4j.xml ;;
  *) pom=tools/kafka/pom.xml ;;
esac
out_dir="$PWD/target/kafka"
libs="$out_dir/libs-$KAFKA_VERSION"
stamp="$out_dir/libs-$KAFKA_VERSION.pom"

if [ -d "$libs" ] && cmp -s "$pom" "$stamp"; then
  echo "$libs"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || { echo "install-kafka: mvn is not installed (Debian package maven)" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "install-kafka: java is not installed (Debian package openjdk-17-jdk-headless)" >&2; exit 1; }

echo "install-kafka: copying kafka $KAFKA_VERSION and its dependencies into $libs" >&2
start=$(date +%s)
rm -f "$stamp"
# Fill a fresh directory and move it into place, so that an interrupted
# copy never leaves a libs directory that looks complete.
partial="$libs.partial"
rm -rf "$partial" "$libs"
mkdir -p "$out_dir"
mvn -B -q -f "$pom" dependency:copy-dependencies -Dkafka.version="$KAFKA_VERSION" \
  -DincludeScope=runtime -DoutputDirectory="$partial" >&2
[ -n "$(find "$partial" -maxdepth 1 -name "kafka_2.13-$KAFKA_VERSION.jar")" ] ||
  { echo "install-kafka: mvn finished but kafka_2.13-$KAFKA_VERSION.jar is missing" >&2; exit 1; }
mv "$partial" "$libs"
cp "$pom" "$stamp"
echo "install-kafka: $(find "$libs" -name '*.jar' | wc -l) jars in $(( $(date +%s) - start )) s" >&2
echo "$libs"
