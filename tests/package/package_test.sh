#!/usr/bin/env bash
# The Debian package, installed for real: builds build/idemgate_<version>_amd64.deb with CPack
# from the already-built tree, dpkg -i's it, checks the files, user, modes and dependencies,
# runs --check-config on the installed config as the service user and systemd-analyze verify on
# the installed unit, then purges it. Root only (exit 77 = skipped otherwise).
# usage: package_test.sh BUILD_DIR VERSION
set -euo pipefail
build="$1" version="$2"
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (dpkg -i)"
command -v dpkg >/dev/null && command -v cpack >/dev/null || skip "needs dpkg and cpack"
exec 9>/tmp/idemgate-package-test.lock
flock 9  # one package test per machine at a time
if dpkg-query -W -f='${Status}' idemgate 2>/dev/null | grep -q installed; then
  skip "an idemgate package is installed already; not touching it"
fi
had_user=0; getent passwd idemgate >/dev/null && had_user=1
had_state=0; [ -e /var/lib/idemgate ] && had_state=1
out="$(mktemp -d)"
cleanup() {
  dpkg -P idemgate >/dev/null 2>&1 || true
  [ "$had_state" = 1 ] || rm -rf /var/lib/idemgate
  if [ "$had_user" = 0 ] && getent passwd idemgate >/dev/null; then
    deluser --quiet --system idemgate >/dev/null 2>&1 || true
    getent group idemgate >/dev/null && delgroup --quiet --system idemgate >/dev/null 2>&1 || true
  fi
  rm -rf "$out"
}
trap cleanup EXIT

(cd "$build" && cpack -G DEB -B "$out" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; fail "cpack"; }
deb="$out/idemgate_${version}_amd64.deb"
[ -f "$deb" ] || { ls "$out"; fail "no $deb"; }

depends="$(dpkg-deb -f "$deb" Depends)"
echo "Depends: $depends"
# Every shared library the binary links directly (NEEDED) comes from a package it depends on
# (RocksDB is linked statically: its compression libraries are the ones that show up; what those
# libraries need in turn, e.g. libpq's Kerberos, their own packages depend on).
[[ "$depends" == *adduser* ]] || fail "Depends lacks adduser (postinst uses it)"
needed="$(objdump -p "$build/idemgate" | awk '$1 == "NEEDED" {print $2}')"
for lib in $(ldd "$build/idemgate" | awk '$2 == "=>" {print $1, $3}' |
    while read -r name path; do grep -qx "$name" <<<"$needed" && echo "$path"; done); do
  pkg=""
  real="$(readlink -f "$lib")"
  for path in "$lib" "/usr$lib" "$real" "/usr$real"; do  # /lib is /usr/lib (usrmerge)
    pkg="$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1)" && [ -n "$pkg" ] && break
  done
  [ -n "$pkg" ] || fail "no package owns $lib"
  [[ " $depends" == *" $pkg"[\ ,]* || " $depends" == *" $pkg" ]] ||
    fail "Depends lacks $pkg (for $lib)"
done
contents="$(dpkg-deb -c "$deb")"
for f in ./usr/bin/idemgate ./etc/idemgate/idemgate.toml ./lib/systemd/system/idemgate.service \
    ./usr/share/doc/idemgate/README.md ./usr/share/doc/idemgate/docs/behaviour.md; do
  grep -q " $f\$" <<<"$contents" || fail "package lacks $f"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/idemgate/idemgate.toml ||
  fail "/etc/idemgate/idemgate.toml is not a conffile"

dpkg -i "$deb" || fail "dpkg -i"
/usr/bin/idemgate --version
getent passwd idemgate >/dev/null || fail "no idemgate user"
[ "$(stat -c '%a %U' /var/lib/idemgate)" = "700 idemgate" ] ||
  fail "/var/lib/idemgate is $(stat -c '%a %U' /var/lib/idemgate), want 700 idemgate"
[ "$(stat -c '%a %G' /etc/idemgate/idemgate.toml)" = "640 idemgate" ] ||
  fail "/etc/idemgate/idemgate.toml is $(stat -c '%a %G' /etc/idemgate/idemgate.toml)"
grep -q '^path = "/var/lib/idemgate/data"' /etc/idemgate/idemgate.toml ||
  fail "the installed config does not put the store in /var/lib/idemgate"
# As the unit's ExecStartPre runs it: as the service user.
runuser -u idemgate -- /usr/bin/idemgate --check-config --config /etc/idemgate/idemgate.toml ||
  fail "--check-config on the installed config"
if command -v systemd-analyze >/dev/null; then
  verify="$(systemd-analyze verify /lib/systemd/system/idemgate.service 2>&1)" ||
    { echo "$verify"; fail "systemd-analyze verify"; }
  # verify only warns about some mistakes (unknown keys, bad values): those fail here too.
  if grep -i "idemgate.service" <<<"$verify"; then fail "systemd-analyze verify warned"; fi
  echo "systemd-analyze verify: OK"
else
  echo "note: systemd-analyze is absent; the unit was not verified"
fi

dpkg -r idemgate >/dev/null || fail "dpkg -r"
[ ! -e /usr/bin/idemgate ] || fail "dpkg -r left /usr/bin/idemgate"
[ -f /etc/idemgate/idemgate.toml ] || fail "dpkg -r removed the conffile"
dpkg -P idemgate >/dev/null || fail "dpkg -P"
[ ! -e /etc/idemgate/idemgate.toml ] || fail "dpkg -P left the conffile"
echo "package test: OK ($(basename "$deb"))"
