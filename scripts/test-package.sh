#!/usr/bin/env bash
# The Debian package, checked on this machine (docs/DEPLOY.md): builds it
# with `cargo deb`, reads its contents and control data, installs it,
# checks the user, owners and modes, the shipped config, the installed
# binary answering /health as the service's user with the unit's
# capabilities, and `systemd-analyze verify` of the installed unit; then
# upgrades to a rebuilt package of a higher version, which must keep an
# edited config and a checkpoint, and purges, which must leave nothing.
#
# Needs root and dpkg; without them it says so and skips, or fails when
# SONDE_REQUIRE_BACKENDS=1 (CI). Refuses to run where a sonde package is
# already installed, which it would replace and purge.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "test-package: FAILED: $*" >&2; exit 1; }
ok() { echo "test-package: ok: $*"; }

if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null; then
  [ "${SONDE_REQUIRE_BACKENDS:-}" != 1 ] || fail "needs root and dpkg"
  echo "test-package: skipped (needs root and dpkg)"
  exit 0
fi
command -v cargo-deb >/dev/null ||
  fail "cargo-deb is missing: cargo install cargo-deb --locked (.ci/run does)"
if dpkg-query -W -f='${Status}' sonde 2>/dev/null | grep -q installed; then
  fail "a sonde package is installed on this machine; this test would replace and purge it"
fi

agent_pid=
cleanup() {
  [ -z "$agent_pid" ] || kill "$agent_pid" 2>/dev/null || true
  dpkg --purge sonde >/dev/null 2>&1 || true
}
trap cleanup EXIT

# -- build -----------------------------------------------------------------
# The package ships the `dist` build. SONDE_PACKAGE_PROFILE=dev packages
# the debug binary `cargo test` built instead, without building: what
# this script checks does not depend on the build, and scripts/test
# saves the six minutes a fat-LTO build takes on 2 cores. cargo-deb
# 3.8.0 (the version scripts/setup pins) warns that it may refuse the
# dev profile in a later release.
case "${SONDE_PACKAGE_PROFILE:-dist}" in
  dist) profile=(--profile dist) build=() ;;
  dev)
    [ -x target/debug/sonde ] || fail "SONDE_PACKAGE_PROFILE=dev packages target/debug/sonde, which is not built"
    # --fast: the debug binary's symbols are large, and xz at its
    # default level took a minute over them.
    profile=(--profile dev --fast) build=(--no-build)
    ;;
  *) fail "SONDE_PACKAGE_PROFILE is dist (the default) or dev, not ${SONDE_PACKAGE_PROFILE}" ;;
esac
cargo deb -p sonde --locked "${profile[@]}" "${build[@]}"
version=$(cargo metadata --no-deps --format-version 1 |
  python3 -c 'import json,sys; print([p for p in json.load(sys.stdin)["packages"] if p["name"]=="sonde"][0]["version"])')
deb=target/debian/sonde_${version}-1_$(dpkg --print-architecture).deb
[ -f "$deb" ] || fail "no $deb"
dbgsym=target/debian/sonde-dbgsym_${version}-1_$(dpkg --print-architecture).ddeb
dpkg-deb -c "$dbgsym" | grep -Eq ' \./usr/lib/debug/\.build-id/[0-9a-f]{2}/[0-9a-f]+\.debug$' ||
  fail "no debug symbols by build id in $dbgsym"
ok "built $deb ($(du -h "$deb" | cut -f1)) and its debug symbols ($(du -h "$dbgsym" | cut -f1))"

# -- contents and control data ---------------------------------------------
contents=$(dpkg-deb -c "$deb")
for path in ./usr/bin/sonde ./etc/sonde/sonde.toml ./usr/share/doc/sonde/DEPLOY.md ./usr/share/doc/sonde/CONFIG.md \
  ./usr/share/doc/sonde/copyright; do
  grep -q " $path\$" <<<"$contents" || fail "$path is not in the package:\n$contents"
done
grep -Eq " \./(usr/)?lib/systemd/system/sonde\.service\$" <<<"$contents" ||
  fail "no systemd unit in the package"
grep -E " \./usr/bin/sonde\$" <<<"$contents" | grep -Eq '^-rwxr-xr-x (root/root|0/0) ' ||
  fail "/usr/bin/sonde is not root-owned 0755"
info=$(dpkg-deb -I "$deb")
grep -q "^ Package: sonde\$" <<<"$info" || fail "control: no Package: sonde"
grep -q "^ Version: ${version}-1\$" <<<"$info" || fail "control: version is not ${version}-1"
grep -Eq "^ Depends: .*adduser" <<<"$info" || fail "control: Depends lacks adduser"
for script in conffiles postinst postrm prerm; do
  grep -Eq "^ +[0-9]+ bytes, +[0-9]+ lines +\*? *$script( |\$)" <<<"$info" ||
    fail "control: no $script:\n$info"
done
[ "$(dpkg-deb -f "$deb" Package)" = sonde ] || fail "dpkg-deb -f Package"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/sonde/sonde.toml ||
  fail "/etc/sonde/sonde.toml is not a conffile"
ok "contents, control data, conffile and maintainer scripts"

# -- install ---------------------------------------------------------------
dpkg -i "$deb"
entry=$(getent passwd sonde) || fail "no sonde user"
IFS=: read -r _ _ uid gid _ home shell <<<"$entry"
[ "$uid" -lt 1000 ] || fail "sonde is not a system user (uid $uid)"
[ "$home" = /var/lib/sonde ] && [ "$shell" = /usr/sbin/nologin ] ||
  fail "sonde's home and shell are $home and $shell"
[ "$(getent group sonde | cut -d: -f3)" = "$gid" ] || fail "no sonde group"
mode() { stat -c '%U:%G %a' "$1"; }
[ "$(mode /usr/bin/sonde)" = "root:root 755" ] || fail "/usr/bin/sonde is $(mode /usr/bin/sonde)"
[ "$(mode /etc/sonde/sonde.toml)" = "root:root 644" ] || fail "the config is $(mode /etc/sonde/sonde.toml)"
[ "$(mode /var/lib/sonde)" = "sonde:sonde 750" ] || fail "/var/lib/sonde is $(mode /var/lib/sonde)"
unit=$(dpkg -L sonde | grep -E '/systemd/system/sonde\.service$')
[ "$(mode "$unit")" = "root:root 644" ] || fail "$unit is $(mode "$unit")"
[ -L /etc/systemd/system/multi-user.target.wants/sonde.service ] ||
  fail "the unit is not enabled"
/usr/bin/sonde --version | grep -Eq "^sonde ${version} \([0-9a-f]{12}|unknown\)" ||
  fail "sonde --version: $(/usr/bin/sonde --version)"
/usr/bin/sonde validate /etc/sonde/sonde.toml
ok "user, owners, modes, enabled unit, --version, validate"

verify=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit:\n$verify"
! grep -q "sonde.service" <<<"$verify" || fail "systemd-analyze verify warns:\n$verify"
score=$(systemd-analyze security --offline=true "$unit" 2>&1 | grep 'Overall exposure level')
ok "systemd-analyze verify; security: $score"

# The installed binary as the unit runs it: user sonde, the unit's
# capabilities, its runtime directory, its config.
install -d -o sonde -g sonde -m 0755 /run/sonde
caps=$(sed -n 's/^AmbientCapabilities=//p' "$unit" | tr 'A-Z' 'a-z' | sed 's/cap_/+/g; s/ /,/g')
setpriv --reuid=sonde --regid=sonde --init-groups --inh-caps="$caps" --ambient-caps="$caps" \
  /usr/bin/sonde run --config /etc/sonde/sonde.toml >/dev/null 2>/tmp/sonde-package-agent.log &
agent_pid=$!
for _ in $(seq 100); do
  body=$(curl -fsS http://127.0.0.1:8686/health 2>/dev/null) && break
  sleep 0.1
done
[[ "${body:-}" == ok* ]] || fail "the installed agent does not answer /health:\n$(cat /tmp/sonde-package-agent.log)"
[ -S /run/sonde/metric.sock ] || fail "no /run/sonde/metric.sock"
[ "$(stat -c %U /proc/$agent_pid)" = sonde ] || fail "the agent does not run as sonde"
# The packaged config asks for the admin token: made by the agent, read
# by sonde and its group only; everything but /health refused without it.
token_file=/var/lib/sonde/admin.token
[ "$(stat -c '%U:%G %a' "$token_file")" = "sonde:sonde 640" ] ||
  fail "admin token file: $(stat -c '%U:%G %a' "$token_file")"
code=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8686/metrics)
[ "$code" = 401 ] || fail "/metrics without the token answered $code"
curl -fsS -H "Authorization: Bearer $(cat "$token_file")" http://127.0.0.1:8686/metrics |
  grep -q '^sonde_receiver_points_total' || fail "/metrics with the token"
url=$(setpriv --reuid=sonde --regid=sonde --init-groups /usr/bin/sonde admin-url --config /etc/sonde/sonde.toml)
[[ "$url" == "http://127.0.0.1:8686/login?token=$(cat "$token_file")" ]] || fail "sonde admin-url: $url"
kill -TERM "$agent_pid"
wait "$agent_pid" || fail "the agent did not stop cleanly:\n$(cat /tmp/sonde-package-agent.log)"
agent_pid=
ok "the installed agent answers /health as sonde with the unit's capabilities, and the rest only with its token"

# -- upgrade -----------------------------------------------------------------
sed -i 's/^interval = "30s"/interval = "10s"   # edited/' /etc/sonde/sonde.toml
grep -q '# edited' /etc/sonde/sonde.toml || fail "could not edit the config"
install -d -o sonde -g sonde /var/lib/sonde/checkpoints
echo "checkpoint of the test" >/var/lib/sonde/checkpoints/app
chown sonde:sonde /var/lib/sonde/checkpoints/app
cargo deb -p sonde --locked "${profile[@]}" --no-build --deb-version "${version}-2"
deb2=target/debian/sonde_${version}-2_$(dpkg --print-architecture).deb
dpkg -i "$deb2"
[ "$(dpkg-query -W -f='${Version}' sonde)" = "${version}-2" ] || fail "the upgrade did not install"
grep -q '^interval = "10s"   # edited' /etc/sonde/sonde.toml || fail "the upgrade lost the edited config"
[ ! -e /etc/sonde/sonde.toml.dpkg-new ] || fail "the upgrade left sonde.toml.dpkg-new"
[ "$(cat /var/lib/sonde/checkpoints/app)" = "checkpoint of the test" ] ||
  fail "the upgrade lost the checkpoint"
/usr/bin/sonde validate /etc/sonde/sonde.toml
ok "the upgrade to ${version}-2 keeps the edited config and the checkpoint"

# -- purge -----------------------------------------------------------------
dpkg --purge sonde
for path in /usr/bin/sonde /etc/sonde /var/lib/sonde /run/sonde "$unit" /usr/share/doc/sonde \
  /etc/systemd/system/multi-user.target.wants/sonde.service; do
  [ ! -e "$path" ] && [ ! -L "$path" ] || fail "$path is left after purge"
done
! getent passwd sonde >/dev/null || fail "the sonde user is left after purge"
! getent group sonde >/dev/null || fail "the sonde group is left after purge"
! dpkg-query -W -f='${Status}' sonde 2>/dev/null | grep -q installed || fail "still installed"
ok "purge leaves nothing"
