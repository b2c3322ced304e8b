#!/usr/bin/env bash
# `COND && ok ... || not_ok ...` is if/else here (ok never fails):
# shellcheck disable=SC2015
# Install poolwright's .deb on this machine and check what it put where.
#
#   sudo bash scripts/test-deb.sh target/debian/poolwright_0.1.0-1_amd64.deb
#
# As root, on a machine without poolwright installed (it refuses otherwise:
# the purge at the end would delete that install's state): `dpkg -i DEB`, then checks the binary
# (`poolwright version`, stripped, its debug info in the -dbgsym.ddeb beside
# DEB), the man pages, the completions, the docs, the systemd unit (ExecStart,
# installed but neither enabled nor started, `systemd-analyze verify`), the
# system user and group, the owners and modes of /var/lib/poolwright and
# /etc/poolwright, the conffile, `dpkg -L`; a second `dpkg -i` (an edited
# conffile and the state survive it); `dpkg -r` (state and conffile kept);
# `dpkg --purge` (state gone, /etc/poolwright only if empty, user and group
# kept). A user and group that this run created are deleted at the end, so the
# machine is left as it was found.
#
# One line per check: `ok - WHAT` or `not ok - WHAT: WHY`; the last line is
# `deb: N passed, M failed`, and the exit status is non-zero when M > 0.
set -uo pipefail

passed=0
failed=0
ok() {
  echo "ok - $1"
  passed=$((passed + 1))
}
not_ok() {
  echo "not ok - $1: $2"
  failed=$((failed + 1))
}
# check WHAT COMMAND...: ok when COMMAND succeeds, else its output is the why.
check() {
  local what=$1 out rc
  shift
  if out=$("$@" 2>&1); then
    ok "$what"
  else
    rc=$?
    not_ok "$what" "$(printf '%s' "${out:-exit status $rc}" | tr '\n' ' ' | cut -c1-400)"
  fi
}
finish() {
  echo "deb: $passed passed, $failed failed"
  exit $((failed > 0))
}
# A fatal problem: nothing after it can be checked.
fatal() {
  not_ok "$1" "$2"
  finish
}

[ $# -eq 1 ] || fatal "usage" "scripts/test-deb.sh DEB (one .deb file)"
deb=$1
[ "$(id -u)" -eq 0 ] || fatal "running as root" "dpkg -i needs root (uid is $(id -u)): run it with sudo"
[ -f "$deb" ] || fatal "the package file" "$deb does not exist"
command -v dpkg >/dev/null && command -v dpkg-deb >/dev/null || fatal "dpkg" "dpkg and dpkg-deb are required"
package=$(dpkg-deb -f "$deb" Package 2>&1) || fatal "reading $deb" "$package"
[ "$package" = poolwright ] || fatal "the package name" "$deb is package '$package', not poolwright"
deb_version=$(dpkg-deb -f "$deb" Version)
upstream=${deb_version%-*} # 0.1.0-1 -> 0.1.0

export DEBIAN_FRONTEND=noninteractive
dpkg_run() { dpkg "$@" </dev/null 2>&1; }
status() { dpkg-query -W -f='${db:Status-Status}' poolwright 2>/dev/null || echo not-installed; }

# mode/owner/group of a path, as stat prints them: 750 poolwright poolwright
perms() { stat -c '%a %U %G' "$1" 2>&1; }
expect_perms() { # WHAT PATH "MODE USER GROUP"
  local got
  got=$(perms "$2")
  if [ "$got" = "$3" ]; then ok "$1 ($3)"; else not_ok "$1" "want $3, got $got"; fi
}
login_def() { # KEY DEFAULT
  local v
  v=$(awk -v k="$1" '$1 == k { print $2 }' /etc/login.defs 2>/dev/null)
  echo "${v:-$2}"
}

# The paths this package claims; a dpkg configured to skip some (Docker's
# slim images exclude /usr/share/man and /usr/share/doc) cannot pass.
excludes=$(cat /etc/dpkg/dpkg.cfg /etc/dpkg/dpkg.cfg.d/* 2>/dev/null | grep -E '^path-exclude' || true)

# --- Before: no earlier install (its state would be purged with it), and
# what exists that the package would touch.
case "$(status)" in
  not-installed) ok "no earlier install" ;;
  *) fatal "no earlier install" "poolwright is $(status) on this machine: this test would replace it and purge /var/lib/poolwright; run it on a machine without poolwright, or 'dpkg --purge poolwright' first if that state is not wanted" ;;
esac
getent passwd poolwright >/dev/null && user_before=1 || user_before=0
getent group poolwright >/dev/null && group_before=1 || group_before=0
[ -e /etc/poolwright ] && etc_before=1 || etc_before=0
uid_before=$(id -u poolwright 2>/dev/null || true)
[ "$user_before" = 1 ] && echo "# the user poolwright exists already (uid $uid_before): the postinst must keep it"

# --- Install.
if out=$(dpkg_run -i "$deb"); then
  ok "dpkg -i $deb"
else
  fatal "dpkg -i $deb" "$(printf '%s' "$out" | tail -n 15 | tr '\n' ' ')"
fi
[ "$(status)" = installed ] && ok "dpkg says installed" || not_ok "dpkg says installed" "status is $(status)"

# --- The binary.
bin=/usr/bin/poolwright
expect_perms "$bin" $bin "755 root root"
if version=$($bin version 2>&1); then
  if [[ "$version" =~ ^poolwright\ ${upstream//./\\.}\ \(.+\)$ ]]; then
    ok "poolwright version prints '$version'"
  else
    not_ok "poolwright version" "printed '$version', want 'poolwright $upstream (REVISION)'"
  fi
else
  not_ok "poolwright version" "failed: $version"
fi
if command -v readelf >/dev/null; then
  sections=$(readelf -S -W $bin 2>&1)
  if grep -qE '\.debug_(info|line)' <<<"$sections"; then
    not_ok "the binary is stripped" "it still has .debug_* sections"
  else
    ok "the binary is stripped"
  fi
  grep -q '\.gnu_debuglink' <<<"$sections" && ok "the binary links to its separate debug file" \
    || not_ok "the binary links to its separate debug file" "no .gnu_debuglink section"
  build_id=$(readelf -n $bin 2>/dev/null | awk '/Build ID:/ { print $3 }')
  ddeb=$(dirname "$deb")/poolwright-dbgsym_${deb_version}_$(dpkg-deb -f "$deb" Architecture).ddeb
  if [ -z "$build_id" ]; then
    not_ok "the dbgsym package holds the debug info" "the binary has no GNU build ID"
  elif ! [ -f "$ddeb" ]; then
    not_ok "the dbgsym package holds the debug info" "no $ddeb beside the .deb"
  elif dpkg-deb -c "$ddeb" | grep -q "usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"; then
    ok "the dbgsym package holds the debug info (.build-id/${build_id:0:2}/${build_id:2}.debug)"
  else
    not_ok "the dbgsym package holds the debug info" "$ddeb has no .build-id/${build_id:0:2}/${build_id:2}.debug"
  fi
else
  not_ok "the binary is stripped" "readelf (binutils) is not installed"
fi

# --- Man pages.
man1=/usr/share/man/man1
if [ -n "$excludes" ] && grep -q '/usr/share/man' <<<"$excludes"; then
  not_ok "man pages" "this dpkg excludes /usr/share/man (/etc/dpkg/dpkg.cfg.d); remove that path-exclude"
else
  check "$man1/poolwright.1.gz is a gzipped man page" \
    sh -c "gzip -t $man1/poolwright.1.gz && gzip -dc $man1/poolwright.1.gz | grep -q '^\.TH'"
  check "a page for a nested command ($man1/poolwright-rollout-pause.1.gz)" test -s $man1/poolwright-rollout-pause.1.gz
  if command -v man >/dev/null; then
    where=$(man -w poolwright 2>&1)
    [ "$where" = "$man1/poolwright.1.gz" ] && ok "man -w poolwright finds $where" \
      || not_ok "man -w poolwright" "gave '$where'"
  fi
fi

# --- Completions and docs.
for f in /usr/share/bash-completion/completions/poolwright \
  /usr/share/zsh/vendor-completions/_poolwright \
  /usr/share/fish/vendor_completions.d/poolwright.fish; do
  check "completions $f" test -s "$f"
done
check "bash completion names the commands" grep -q rollout /usr/share/bash-completion/completions/poolwright
doc=/usr/share/doc/poolwright
check "$doc/README.md" test -s $doc/README.md
check "$doc/copyright is the Apache-2.0 license" \
  sh -c "grep -q '^License: Apache-2.0' $doc/copyright && grep -q 'Apache License' $doc/copyright"

# --- The unit.
unit=
for d in /usr/lib/systemd/system /lib/systemd/system; do
  [ -f "$d/poolwright.service" ] && { unit=$d/poolwright.service; break; }
done
if [ -z "$unit" ]; then
  not_ok "the systemd unit" "no poolwright.service in /usr/lib/systemd/system or /lib/systemd/system"
else
  ok "the systemd unit $unit"
  expect_perms "$unit" "$unit" "644 root root"
  check "the unit runs /usr/bin/poolwright" grep -q '^ExecStart=/usr/bin/poolwright run ' "$unit"
  check "the unit names no /usr/local" sh -c "! grep -n /usr/local $unit"
  state=$(systemctl is-enabled poolwright.service 2>&1)
  [ "$state" = disabled ] && ok "the unit is not enabled (systemctl is-enabled: disabled)" \
    || not_ok "the unit is not enabled" "systemctl is-enabled says '$state'"
  wants=$(ls /etc/systemd/system/*.wants/poolwright.service 2>/dev/null || true)
  [ -z "$wants" ] && ok "no .wants symlink for the unit" || not_ok "no .wants symlink for the unit" "$wants"
  if [ -d /run/systemd/system ]; then
    active=$(systemctl is-active poolwright.service 2>&1)
    [ "$active" = inactive ] && ok "the unit is not started" || not_ok "the unit is not started" "systemctl is-active says '$active'"
  else
    echo "# systemd is not running here: nothing could start the unit"
  fi
  if command -v systemd-analyze >/dev/null; then
    check "systemd-analyze verify $unit" systemd-analyze verify "$unit"
  fi
fi

# --- The account and the directories.
sys_uid_max=$(( $(login_def UID_MIN 1000) - 1 ))
sys_gid_max=$(( $(login_def GID_MIN 1000) - 1 ))
if entry=$(getent passwd poolwright); then
  IFS=: read -r _ _ uid gid _ home shell <<<"$entry"
  [ "$uid" -le "$sys_uid_max" ] && ok "poolwright is a system user (uid $uid)" \
    || not_ok "poolwright is a system user" "uid $uid > $sys_uid_max"
  [ "$home" = /var/lib/poolwright ] && ok "its home is /var/lib/poolwright" || not_ok "its home" "is $home"
  case "$shell" in
    */nologin|/bin/false) ok "it has no login shell ($shell)" ;;
    *) not_ok "it has no login shell" "its shell is $shell" ;;
  esac
  [ "$(getent group "$gid" | cut -d: -f1)" = poolwright ] && ok "its primary group is poolwright" \
    || not_ok "its primary group is poolwright" "gid $gid is '$(getent group "$gid" | cut -d: -f1)'"
  if [ -n "$uid_before" ]; then
    [ "$uid" = "$uid_before" ] && ok "the existing user was kept (uid $uid)" || not_ok "the existing user was kept" "uid $uid_before became $uid"
  fi
else
  not_ok "the user poolwright" "getent passwd poolwright finds none"
fi
if gentry=$(getent group poolwright); then
  ggid=$(cut -d: -f3 <<<"$gentry")
  [ "$ggid" -le "$sys_gid_max" ] && ok "poolwright is a system group (gid $ggid)" \
    || not_ok "poolwright is a system group" "gid $ggid > $sys_gid_max"
else
  not_ok "the group poolwright" "getent group poolwright finds none"
fi
check "/var/lib/poolwright is a directory" test -d /var/lib/poolwright
expect_perms "/var/lib/poolwright" /var/lib/poolwright "750 poolwright poolwright"
# A command run with no --state-dir from a directory without ./.poolwright
# (an operator's home on the bastion) looks in the service's state directory
# and names it; no daemon runs here, so it says none answers there.
check "poolwright status without flags names the service's state directory" \
  sh -c 'cd / && out=$(env -u POOLWRIGHT_STATE_DIR poolwright status 2>&1); echo "$out" | grep -q "/var/lib/poolwright"'
check "/etc/poolwright is a directory" test -d /etc/poolwright
expect_perms "/etc/poolwright" /etc/poolwright "750 root poolwright"
expect_perms "/etc/default/poolwright" /etc/default/poolwright "644 root root"
check "/etc/default/poolwright is a conffile" \
  sh -c "dpkg-query -W -f='\${Conffiles}' poolwright | grep -q '^ */etc/default/poolwright '"
check "/etc/default/poolwright explains POOLWRIGHT_CONFIG and POOLWRIGHT_ARGS" \
  sh -c "grep -q '^#POOLWRIGHT_CONFIG=' /etc/default/poolwright && grep -q '^#POOLWRIGHT_ARGS=' /etc/default/poolwright"

# --- dpkg -L lists what it installed.
listed=$(dpkg -L poolwright 2>&1)
for p in $bin "${unit:-/usr/lib/systemd/system/poolwright.service}" $man1/poolwright.1.gz \
  /usr/share/bash-completion/completions/poolwright /usr/share/zsh/vendor-completions/_poolwright \
  /usr/share/fish/vendor_completions.d/poolwright.fish /etc/default/poolwright $doc/copyright $doc/README.md; do
  grep -qxF "$p" <<<"$listed" && ok "dpkg -L lists $p" || not_ok "dpkg -L lists $p" "it does not"
done

# --- A second install changes nothing it should keep.
echo "# an administrator's edit" >>/etc/default/poolwright
echo marker >/var/lib/poolwright/test-deb.marker
uid_first=$(id -u poolwright 2>/dev/null || true)
if out=$(dpkg_run -i "$deb"); then
  ok "dpkg -i again (reinstall)"
else
  not_ok "dpkg -i again (reinstall)" "$(printf '%s' "$out" | tail -n 15 | tr '\n' ' ')"
fi
[ "$(id -u poolwright 2>/dev/null || true)" = "$uid_first" ] && ok "the reinstall kept the user (uid $uid_first)" \
  || not_ok "the reinstall kept the user" "uid $uid_first became $(id -u poolwright 2>&1)"
expect_perms "after the reinstall, /var/lib/poolwright" /var/lib/poolwright "750 poolwright poolwright"
expect_perms "after the reinstall, /etc/poolwright" /etc/poolwright "750 root poolwright"
check "the reinstall kept the edited conffile" grep -q "an administrator's edit" /etc/default/poolwright
check "the reinstall kept the state" test -f /var/lib/poolwright/test-deb.marker
state=$(systemctl is-enabled poolwright.service 2>&1)
[ "$state" = disabled ] && ok "after the reinstall the unit is still not enabled" \
  || not_ok "after the reinstall the unit is still not enabled" "systemctl is-enabled says '$state'"

# --- Remove keeps state and configuration; purge removes them, not the account.
check "dpkg -r poolwright" dpkg_run -r poolwright
check "remove took the binary" test ! -e $bin
check "remove took the unit" test ! -e "${unit:-/usr/lib/systemd/system/poolwright.service}"
check "remove kept the conffile" test -f /etc/default/poolwright
check "remove kept the state" test -f /var/lib/poolwright/test-deb.marker
[ "$(status)" = config-files ] && ok "dpkg says config-files" || not_ok "dpkg says config-files" "status is $(status)"

if [ "$etc_before" = 0 ]; then
  echo "not the package's" >/etc/poolwright/kubeconfig
fi
check "dpkg --purge poolwright" dpkg_run --purge poolwright
[ "$(status)" = not-installed ] && ok "dpkg says not installed" || not_ok "dpkg says not installed" "status is $(status)"
check "purge removed the conffile /etc/default/poolwright" test ! -e /etc/default/poolwright
check "purge removed /var/lib/poolwright" test ! -e /var/lib/poolwright
if [ "$etc_before" = 0 ]; then
  check "purge kept a non-empty /etc/poolwright (an administrator's files)" test -f /etc/poolwright/kubeconfig
  rm -f /etc/poolwright/kubeconfig
  rmdir /etc/poolwright 2>/dev/null || true
fi
check "purge kept the user poolwright" getent passwd poolwright
check "purge kept the group poolwright" getent group poolwright

# --- Leave the machine as found: an account this run created goes.
if [ "$user_before" = 0 ] && getent passwd poolwright >/dev/null; then
  userdel poolwright 2>/dev/null || echo "# could not delete the user poolwright this run created"
fi
if [ "$group_before" = 0 ] && getent group poolwright >/dev/null; then
  groupdel poolwright 2>/dev/null || echo "# could not delete the group poolwright this run created"
fi

finish
