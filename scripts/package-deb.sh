#!/usr/bin/env bash
# Build poolwright's Debian package with cargo-deb (3.8).
#
#   bash scripts/package-deb.sh [--profile dist|dev] [--no-build]
#
# 1. `cargo build --locked --profile P` (skipped with --no-build: the binary of
#    that profile must already be there, e.g. target/debug/poolwright after
#    `cargo test`). dist, the default, is the release profile with line
#    tables: cargo-deb strips them into the dbgsym package;
# 2. target/deb-assets/: `poolwright package-assets` (man pages, gzipped here,
#    and completions), the packaged unit (ExecStart=/usr/bin/poolwright, from
#    systemd/poolwright.service, which stays as it is for the hand install) and
#    the Debian copyright file made from LICENSE;
# 3. `cargo deb --no-build --profile P --output target/debian/`, with the
#    metadata of [package.metadata.deb] in Cargo.toml and the maintainer scripts
#    of debian/.
#
# The last line on stdout is the .deb's path (all else goes to stderr), so
# `deb=$(bash scripts/package-deb.sh)` works. cargo-deb also writes
# poolwright-dbgsym_*.ddeb beside it (the debug info). cargo-deb is the
# `cargo-deb` on PATH, or the executable $POOLWRIGHT_CARGO_DEB names; install it
# with `cargo install cargo-deb --version 3.8.0 --locked`.
#
# --profile dev is for tests (scripts/test-deb.sh): cargo-deb warns that it
# does not support dev builds, and the package is compressed fast.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "scripts/package-deb.sh: $*" >&2
  exit 1
}
say() { echo "== $*" >&2; }

profile=dist
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) [ $# -ge 2 ] || die "--profile needs a value (dist or dev)"; profile=$2; shift 2 ;;
    --profile=*) profile=${1#--profile=}; shift ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (usage: scripts/package-deb.sh [--profile dist|dev] [--no-build])" ;;
  esac
done
case "$profile" in
  dist) profile_dir=dist ;;
  dev) profile_dir=debug ;;
  *) die "--profile must be dist or dev, not '$profile'" ;;
esac

# The tools, before any work.
if [ -n "${POOLWRIGHT_CARGO_DEB:-}" ]; then
  [ -x "$POOLWRIGHT_CARGO_DEB" ] || die "POOLWRIGHT_CARGO_DEB=$POOLWRIGHT_CARGO_DEB is not an executable"
  cargo_deb=("$POOLWRIGHT_CARGO_DEB")
elif command -v cargo-deb >/dev/null; then
  cargo_deb=(cargo deb)
else
  die "cargo-deb is not on PATH: install it with 'cargo install cargo-deb --version 3.8.0 --locked', or set POOLWRIGHT_CARGO_DEB to its path"
fi
cargo_deb_version=$("${cargo_deb[@]}" --version 2>/dev/null | awk '{ print $NF }') \
  || die "'${cargo_deb[*]} --version' failed"
case "$cargo_deb_version" in
  3.[3-9]*|3.[1-9][0-9]*) ;; # 3.3+ installs units under /usr/lib/systemd/system
  *) die "cargo-deb $cargo_deb_version is too old or unknown: the metadata in Cargo.toml is for 3.8 (3.3 at least)" ;;
esac
case "$cargo_deb_version" in
  3.8.*) ;;
  *) echo "scripts/package-deb.sh: warning: cargo-deb $cargo_deb_version; the packaging was written for 3.8" >&2 ;;
esac
# cargo-deb runs dpkg-shlibdeps for $auto depends (without it the package
# would silently lack its libc dependency) and strip/objcopy for the binary
# and its dbgsym package.
for tool in dpkg-shlibdeps:dpkg-dev strip:binutils objcopy:binutils gzip:gzip sed:sed; do
  command -v "${tool%%:*}" >/dev/null \
    || die "${tool%%:*} is required (apt-get install ${tool#*:})"
done

if [ "$build" = 1 ]; then
  say "cargo build --locked --profile $profile --bin poolwright"
  cargo build --locked --profile "$profile" --bin poolwright >&2 \
    || die "cargo build --profile $profile failed (see above)"
fi

# Where Cargo put the binary (CARGO_TARGET_DIR and build.target-dir count);
# cargo-deb reads the same and maps target/release/ in the assets to it.
metadata=$(cargo metadata --format-version 1 --no-deps) || die "cargo metadata failed"
target_dir=$(printf '%s' "$metadata" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || die "cannot read target_directory from cargo metadata"
bin="$target_dir/$profile_dir/poolwright"
[ -x "$bin" ] || die "no binary at $bin: build it (cargo build --profile $profile), or drop --no-build"

# Generated assets, always from scratch: the set of man pages follows the commands.
assets=target/deb-assets
rm -rf "$assets"
mkdir -p "$assets/systemd"

say "$bin package-assets $assets"
"$bin" package-assets "$assets" >&2 \
  || die "'$bin package-assets $assets' failed (a binary older than the package-assets command?)"
[ -s "$assets/man/poolwright.1" ] || die "package-assets wrote no $assets/man/poolwright.1"
for f in poolwright.bash _poolwright poolwright.fish; do
  [ -s "$assets/completions/$f" ] || die "package-assets wrote no $assets/completions/$f"
done
# Debian policy: man pages gzip -9, and -n keeps the name and time out of the
# archive so the same pages give the same bytes.
gzip -n -9 "$assets"/man/*.1
pages=$(find "$assets/man" -name '*.1.gz' | wc -l)
say "$pages man page(s) gzipped"

# The unit as packaged: the binary in /usr/bin, the man page as documentation.
sed -e 's|/usr/local/bin/poolwright|/usr/bin/poolwright|g' \
  -e 's|^# Install: see docs/how-to/service.md.*|# Installed by the poolwright package (docs/how-to/install.md); settings in /etc/default/poolwright.|' \
  -e '/^Documentation=/a Documentation=man:poolwright(1)' \
  systemd/poolwright.service > "$assets/systemd/poolwright.service"
grep -q '^ExecStart=/usr/bin/poolwright run ' "$assets/systemd/poolwright.service" \
  || die "the packaged unit has no 'ExecStart=/usr/bin/poolwright run' (did systemd/poolwright.service change?)"
! grep -q '/usr/local/bin' "$assets/systemd/poolwright.service" \
  || die "the packaged unit still names /usr/local/bin"

# /usr/share/doc/poolwright/copyright in Debian's machine-readable format, the
# license text (LICENSE) as its License paragraph.
[ -s LICENSE ] || die "LICENSE is missing"
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: poolwright"
  echo "Source: https://github.com/poolwright/poolwright"
  echo
  echo "Files: *"
  echo "Copyright: the poolwright contributors"
  echo "License: Apache-2.0"
  echo
  echo "License: Apache-2.0"
  sed -e 's/[[:space:]]*$//' LICENSE | sed -e '/./,$!d' -e 's/^$/./' -e 's/^/ /'
} > "$assets/copyright"

say "${cargo_deb[*]} --no-build --profile $profile --output target/debian/ (cargo-deb $cargo_deb_version)"
extra=()
[ "$profile" = dev ] && extra+=(--fast)
mkdir -p target/debian
out=$("${cargo_deb[@]}" --no-build --profile "$profile" --output target/debian/ "${extra[@]}") \
  || die "cargo-deb failed (see above)"
# cargo-deb prints each archive it made on stdout (the .ddeb, then the .deb).
printf '%s\n' "$out" | grep -v '\.deb$' >&2 || true
deb=$(printf '%s\n' "$out" | grep '\.deb$' | tail -n 1 || true)
if [ -z "$deb" ] || ! [ -f "$deb" ]; then
  die "cargo-deb reported no .deb (its output: $out)"
fi
deb="$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")"
say "package: $deb"
echo "$deb"
