#!/usr/bin/env bash
# Run every test poolwright has, on a fresh machine.
#
# This is the README's test command and what CI runs after fmt and clippy.
# It installs and starts whatever the tests need, and fails loudly when that
# cannot be done (no test is silently skipped). Today every test runs against
# the embedded simulator, real `poolwright` processes, and a real AWS API
# (moto, installed here from PyPI; the tests start and reset it themselves), and
# a real Kubernetes control plane (kine + kube-apiserver + kwok, built here),
# a real Prometheus (Debian's package) for FleetRollout gates, and git's own
# servers (git daemon, git http-backend under lighttpd, sshd) for `run --git-url`.
# Last, the Debian package is built with cargo-deb and installed with dpkg.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v git >/dev/null || { echo "scripts/test.sh: git is required (plan provenance tests)" >&2; exit 1; }
# openssl makes the certificates of the https / mutual-TLS plug-in test.
if ! command -v openssl >/dev/null; then
  echo "== installing openssl (apt)"
  { apt-get update -qq && apt-get install -y -qq openssl; } >/dev/null \
    || { echo "scripts/test.sh: openssl is required (the TLS plug-in test) and could not be installed" >&2; exit 1; }
fi

# Debian's chromium and chromedriver: the status page is tested in a real browser.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "== installing chromium and chromium-driver (apt)"
  { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; } >/dev/null \
    || { echo "scripts/test.sh: chromium and chromium-driver are required (the web page test) and could not be installed" >&2; exit 1; }
fi

# Debian's prometheus: FleetRollout gates query a real Prometheus (tests/support/prometheus.rs
# starts one per test, scraping an exporter the test controls).
if ! command -v prometheus >/dev/null; then
  echo "== installing prometheus (apt)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } >/dev/null \
    || { echo "scripts/test.sh: prometheus is required (the fleet gate tests) and could not be installed" >&2; exit 1; }
fi

# git's own servers for `run --git-url` (tests/support/git_servers.rs): `git daemon`
# and `git http-backend` come with git; lighttpd (with its TLS module) hosts the
# backend for https with a token, and OpenSSH's sshd serves ssh:// with a deploy key.
# GnuPG makes the OpenPGP keys and signatures of the --git-verify gpg test.
if ! [ -x /usr/sbin/lighttpd ] || ! [ -e /usr/lib/lighttpd/mod_openssl.so ] || ! [ -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null || ! command -v gpg >/dev/null || ! command -v gpg-agent >/dev/null; then
  echo "== installing lighttpd, lighttpd-mod-openssl, openssh-server and gnupg (apt)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lighttpd lighttpd-mod-openssl openssh-server openssh-client gnupg; } >/dev/null \
    || { echo "scripts/test.sh: lighttpd, lighttpd-mod-openssl, openssh-server and gnupg are required (the config repo tests) and could not be installed" >&2; exit 1; }
fi
# Debian starts the services it installs where it can; the tests start their own.
for unit in lighttpd ssh; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$unit" 2>/dev/null; then
    systemctl stop "$unit" 2>/dev/null || true
  fi
done

# moto: the AWS provider's tests run against it (tests/support/moto.rs starts it).
MOTO_VERSION=5.2.6
python=$(command -v python3 || command -v python || true)
[ -n "$python" ] || { echo "scripts/test.sh: python3 is required for moto (the AWS tests)" >&2; exit 1; }
if ! "$python" -c "import moto, flask, flask_cors; assert moto.__version__ == '$MOTO_VERSION'" 2>/dev/null; then
  echo "== installing moto[server]==$MOTO_VERSION (pip)"
  "$python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" \
    || { echo "scripts/test.sh: pip could not install moto[server]==$MOTO_VERSION" >&2; exit 1; }
fi
export POOLWRIGHT_MOTO_SERVER="$python -m moto.server"

# The reference plug-in (examples/plugins/ec2-instances) runs on boto3, pinned.
plugin_dir=examples/plugins/ec2-instances
if ! "$python" -c "import boto3, botocore; assert (boto3.__version__, botocore.__version__) == ('1.43.11', '1.43.11')" 2>/dev/null; then
  echo "== installing the reference plug-in's requirements (pip)"
  "$python" -m pip install --quiet --disable-pip-version-check -r "$plugin_dir/requirements.txt" \
    || { echo "scripts/test.sh: pip could not install $plugin_dir/requirements.txt" >&2; exit 1; }
fi
export POOLWRIGHT_PYTHON="$python"
echo "== the reference plug-in's own tests (python unittest, against moto)"
(cd "$plugin_dir" && "$python" -m unittest -q test_plugin) \
  || { echo "scripts/test.sh: the reference plug-in's tests failed" >&2; exit 1; }

# The Kubernetes control plane (kine, kube-apiserver, kwok), built once from Go
# modules and cached outside the checkout (13 to 19 minutes cold on 2 cores).
command -v go >/dev/null || { echo "scripts/test.sh: go is required to build the Kubernetes test components" >&2; exit 1; }
echo "== Kubernetes test components (scripts/test-components.sh)"
POOLWRIGHT_TEST_BIN=$(bash scripts/test-components.sh) \
  || { echo "scripts/test.sh: building the Kubernetes test components failed (see above)" >&2; exit 1; }
export POOLWRIGHT_TEST_BIN

# mdBook builds the user documentation (docs/): a page SUMMARY.md names that is
# missing fails the build. Links, anchors, YAML samples, command samples and the
# generated reference pages are checked by tests/it/docs.rs.
MDBOOK_VERSION=0.5.4
tools="${XDG_CACHE_HOME:-$HOME/.cache}/poolwright/tools/mdbook-$MDBOOK_VERSION"
if ! [ -x "$tools/bin/mdbook" ]; then
  echo "== installing mdbook $MDBOOK_VERSION (cargo install, cached in $tools)"
  mdlog=$(mktemp)
  if ! cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features --root "$tools" >"$mdlog" 2>&1; then
    tail -30 "$mdlog" >&2
    echo "scripts/test.sh: cargo could not install mdbook $MDBOOK_VERSION (the documentation build)" >&2
    exit 1
  fi
  rm -f "$mdlog"
fi
echo "== the documentation (mdbook build docs)"
if ! book=$("$tools/bin/mdbook" build docs 2>&1); then
  echo "$book" >&2
  echo "scripts/test.sh: the documentation (docs/) does not build" >&2
  exit 1
fi
echo "$book" | grep -v ' INFO ' || true

# cargo-deb builds the Debian package that scripts/test-deb.sh installs with
# dpkg after the cargo tests (dpkg-shlibdeps, from dpkg-dev, finds its libc
# dependency; strip and objcopy, from binutils, split off its debug info).
CARGO_DEB_VERSION=3.8.0
cargo_deb="${XDG_CACHE_HOME:-$HOME/.cache}/poolwright/tools/cargo-deb-$CARGO_DEB_VERSION"
if ! [ -x "$cargo_deb/bin/cargo-deb" ]; then
  echo "== installing cargo-deb $CARGO_DEB_VERSION (cargo install, cached in $cargo_deb)"
  deblog=$(mktemp)
  if ! cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --root "$cargo_deb" >"$deblog" 2>&1; then
    tail -30 "$deblog" >&2
    echo "scripts/test.sh: cargo could not install cargo-deb $CARGO_DEB_VERSION (the package test)" >&2
    exit 1
  fi
  rm -f "$deblog"
fi
export POOLWRIGHT_CARGO_DEB="$cargo_deb/bin/cargo-deb"
if ! command -v dpkg-shlibdeps >/dev/null || ! command -v objcopy >/dev/null || ! command -v readelf >/dev/null; then
  echo "== installing dpkg-dev and binutils (apt)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dpkg-dev binutils; } >/dev/null \
    || { echo "scripts/test.sh: dpkg-dev and binutils are required (the package test) and could not be installed" >&2; exit 1; }
fi
# The package test installs with dpkg: root, or a sudo that needs no password.
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  # -k: sudo's cached credentials could expire during the cargo tests.
  sudo -n -k true 2>/dev/null \
    || { echo "scripts/test.sh: the package test installs a .deb with dpkg and needs root or a passwordless sudo" >&2; exit 1; }
  as_root=(sudo -n)
fi

echo "== cargo test: unit, integration, property, snapshot, CLI and crash-resume tests"
# Benchmarks (benches/) are not tests: run them with `cargo bench`, figures in BENCHMARKS.md.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# The package: built from the binary the tests just ran (the dev profile, so
# nothing is compiled again), installed, reinstalled, removed and purged.
echo "== the Debian package (scripts/package-deb.sh, then scripts/test-deb.sh as root)"
deb_status=0
if deb=$(bash scripts/package-deb.sh --profile dev --no-build); then
  set +e
  "${as_root[@]}" bash scripts/test-deb.sh "$deb" 2>&1 | tee "$log.deb"
  deb_status=${PIPESTATUS[0]}
  set -e
  cat "$log.deb" >>"$log"
  # test-deb.sh always ends with its count; without one it did not run.
  if ! grep -qE '^deb: [0-9]+ passed, [0-9]+ failed' "$log.deb"; then
    echo "deb: 0 passed, 1 failed (scripts/test-deb.sh did not run: exit status $deb_status)" | tee -a "$log"
    [ "$deb_status" -ne 0 ] || deb_status=1
  fi
  rm -f "$log.deb"
else
  echo "deb: 0 passed, 1 failed (scripts/package-deb.sh could not build the package)" | tee -a "$log"
  deb_status=1
fi

# One closing line for the whole run (cargo's own last line is the doc-test suite).
awk '/^test result:/ { passed += $4; failed += $6 }
     /^deb: [0-9]+ passed, [0-9]+ failed/ { passed += $2; failed += $4 }
     END { printf "tests: %d passed, %d failed\n", passed, failed }' "$log"
[ "$status" -eq 0 ] || exit "$status"
exit "$deb_status"
