#!/usr/bin/env bash
# Run every test poolwright has, on a fresh machine.
#
# This is the README's test command and what CI runs after fmt and clippy.
# It installs and starts whatever the tests need, and fails loudly when that
# cannot be done (no test is silently skipped). Today every test runs against
# the embedded simulator and real `poolwright` processes; the AWS (moto) and
# Kubernetes (kube-apiserver + kine + kwok) harnesses join here with their issues.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v git >/dev/null || { echo "scripts/test.sh: git is required (plan provenance tests)" >&2; exit 1; }

echo "== cargo test: unit, integration, property, snapshot, CLI and crash-resume tests"
# Benchmarks (benches/) are not tests: run them with `cargo bench`, figures in BENCHMARKS.md.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run (cargo's own last line is the doc-test suite).
awk '/^test result:/ { passed += $4; failed += $6 } END { printf "tests: %d passed, %d failed\n", passed, failed }' "$log"
exit "$status"
