#!/usr/bin/env bash
# The Debian package, installed for real: builds idemgate_<version>-<revision>_amd64.deb with CPack
# from the already-built tree, checks its control fields, files, man pages and copyright (and
# runs lintian on it when installed: no errors), dpkg -i's it, checks the user, modes and
# dependencies, runs --check-config on the installed config as the service user and
# systemd-analyze verify on the installed unit; then enables the unit, removes the package (the
# unit masked), installs it again (still enabled), purges it, and finds no link left behind.
# Root only (exit 77 = skipped otherwise).
# usage: package_test.sh BUILD_DIR VERSION
set -euo pipefail
build="$1" version="$2"
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (dpkg -i)"
command -v dpkg >/dev/null && command -v cpack >/dev/null || skip "needs dpkg and cpack"
# lintian checks the .deb (Debian's lintian; installed when missing, as the build packages are).
(source "$(dirname "$0")/../../scripts/lib.sh" && ensure_packages lintian) ||
  echo "note: lintian could not be installed"
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
  # A failed run may leave what the test enabled (an idemgate package was not installed before).
  rm -f /etc/systemd/system/multi-user.target.wants/idemgate.service
  [ "$had_state" = 1 ] || rm -rf /var/lib/idemgate
  if [ "$had_user" = 0 ] && getent passwd idemgate >/dev/null; then
    deluser --quiet --system idemgate >/dev/null 2>&1 || true
    getent group idemgate >/dev/null && delgroup --quiet --system idemgate >/dev/null 2>&1 || true
  fi
  rm -rf "$out"
}
trap cleanup EXIT

(cd "$build" && cpack -G DEB -B "$out" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; fail "cpack"; }
deb="$(ls "$out"/idemgate_"${version}"-*_amd64.deb 2>/dev/null | head -1)"
[ -f "$deb" ] || { ls "$out"; fail "no idemgate_${version}-*_amd64.deb"; }

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
[ "$(dpkg-deb -f "$deb" Maintainer)" = "idemgate maintainers <maintainers@idemgate.dev>" ] ||
  fail "Maintainer: $(dpkg-deb -f "$deb" Maintainer)"
[[ "$(dpkg-deb -f "$deb" Homepage)" == https://* ]] || fail "no Homepage"
contents="$(dpkg-deb -c "$deb")"
for f in ./usr/bin/idemgate ./etc/idemgate/idemgate.toml ./lib/systemd/system/idemgate.service \
    ./usr/share/doc/idemgate/README.md ./usr/share/doc/idemgate/docs/behaviour.md \
    ./usr/share/doc/idemgate/copyright ./usr/share/doc/idemgate/changelog.Debian.gz \
    ./usr/share/doc/idemgate/docs/configuration.md ./usr/share/doc/idemgate/docs/install.md \
    ./usr/share/man/man8/idemgate.8.gz ./usr/share/man/man5/idemgate.toml.5.gz; do
  grep -q " $f\$" <<<"$contents" || fail "package lacks $f"
done
# The tests and benchmarks stay out of the package.
if grep -E '_test|_bench|demo-payment-api|config-reference' <<<"$contents"; then
  fail "the package holds test or build-only files"
fi
# The man pages render without warnings, and idemgate.toml(5) names every key of the table.
man_dir="$out/man"; mkdir -p "$man_dir"
dpkg-deb -x "$deb" "$man_dir"
for page in man8/idemgate.8.gz man5/idemgate.toml.5.gz; do
  warnings="$(zcat "$man_dir/usr/share/man/$page" | LC_ALL=C.UTF-8 MANWIDTH=80 groff -man -Tutf8 -ww -z 2>&1)"
  [ -z "$warnings" ] || fail "$page: $warnings"
done
for key in store.postgres listen idempotency max_waiters shutdown_grace backup_dir; do
  zcat "$man_dir/usr/share/man/man5/idemgate.toml.5.gz" | grep -q "$key" || fail "idemgate.toml(5) lacks $key"
done
grep -q '^License: Apache-2.0' "$man_dir/usr/share/doc/idemgate/copyright" || fail "copyright"
zcat "$man_dir/usr/share/doc/idemgate/changelog.Debian.gz" | head -1 | grep -q "^idemgate ($(dpkg-deb -f "$deb" Version))" ||
  fail "changelog.Debian.gz does not start with version $version"
if command -v lintian >/dev/null; then
  # A .deb that CPack (not dpkg-buildpackage) made: these tags are about how it was built.
  lint="$(lintian --tag-display-limit 0 "$deb" 2>&1 || true)"
  echo "$lint"
  if grep -q '^E: ' <<<"$lint"; then fail "lintian reported errors"; fi
  echo "lintian: no errors ($(grep -c '^W: ' <<<"$lint" || true) warnings)"
else
  echo "note: lintian is absent; the package was not linted"
fi
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

# The unit is not enabled on install (the config needs an upstream first); the admin enables it.
wants=/etc/systemd/system/multi-user.target.wants/idemgate.service
[ ! -e "$wants" ] && [ ! -L "$wants" ] || fail "the install enabled the unit by itself"
systemctl enable idemgate.service >/dev/null 2>&1 || fail "systemctl enable"
[ -L "$wants" ] || fail "systemctl enable made no $wants"

dpkg -r idemgate >/dev/null || fail "dpkg -r"
[ ! -e /usr/bin/idemgate ] || fail "dpkg -r left /usr/bin/idemgate"
[ -f /etc/idemgate/idemgate.toml ] || fail "dpkg -r removed the conffile"
[ "$(readlink /etc/systemd/system/idemgate.service)" = /dev/null ] || fail "dpkg -r did not mask the unit"
# Installed again: unmasked, and still enabled.
dpkg -i "$deb" >/dev/null || fail "dpkg -i after dpkg -r"
[ ! -L /etc/systemd/system/idemgate.service ] || fail "the reinstall left the unit masked"
[ -L "$wants" ] && [ -e "$wants" ] || fail "the reinstall lost the enable link"

dpkg -P idemgate >/dev/null || fail "dpkg -P"
[ ! -e /etc/idemgate/idemgate.toml ] || fail "dpkg -P left the conffile"
[ ! -L "$wants" ] || fail "dpkg -P left $wants -> $(readlink "$wants")"
[ ! -L /etc/systemd/system/idemgate.service ] || fail "dpkg -P left the mask"
dangling="$(find /etc/systemd/system -xtype l -name 'idemgate*' 2>/dev/null)"
[ -z "$dangling" ] || fail "dangling links after purge: $dangling"
[ ! -e /var/lib/systemd/deb-systemd-helper-enabled/idemgate.service.dsh-also ] ||
  fail "dpkg -P left deb-systemd-helper's state"
echo "package test: OK ($(basename "$deb"))"
