#!/usr/bin/env bash
# Run every test poolwright has, on a fresh machine.
#
# This is the README's test command and what CI runs after fmt and clippy.
# It installs and starts whatever the tests need, and fails loudly when that
# cannot be done (no test is silently skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test (unit, integration, property and CLI tests)"
cargo test --locked --all-targets
cargo test --locked --doc
