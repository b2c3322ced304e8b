#!/usr/bin/env bash
# Builds, once, the real Kubernetes control-plane pieces the integration tests run against,
# from Go modules, into a cache outside the checkout:
#   kine            etcd shim (sqlite backend) — github.com/k3s-io/kine
#   kube-apiserver  k8s.io/kubernetes, built inside a wrapper module that pins every
#                   k8s.io staging module to the matching v0.X.Y with replace directives
#   kwok            plays the kubelets — sigs.k8s.io/kwok/cmd/kwok, with its "fast" stages
# Prints the cache directory on success. A failed build exits non-zero naming the component.
set -euo pipefail

KINE_VERSION=v0.17.5
KUBERNETES_VERSION=v1.36.3
KWOK_VERSION=v0.8.0
STAGING_VERSION="v0${KUBERNETES_VERSION#v1}"

# POOLWRIGHT_TEST_BIN may already name a built directory (what this script prints).
if [ -n "${POOLWRIGHT_TEST_BIN:-}" ] && [ -x "$POOLWRIGHT_TEST_BIN/kube-apiserver" ] && [ -f "$POOLWRIGHT_TEST_BIN/kwok-stages.yaml" ]; then
  echo "$POOLWRIGHT_TEST_BIN"
  exit 0
fi
cache=${POOLWRIGHT_TEST_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/poolwright/test-bin}
bin="$cache/kine-$KINE_VERSION.k8s-$KUBERNETES_VERSION.kwok-$KWOK_VERSION"
mkdir -p "$bin"
export GOFLAGS=-buildvcs=false
export CGO_ENABLED=1

# Nothing to do when every piece is cached (the usual case after the first run).
if [ -x "$bin/kine" ] && [ -x "$bin/kwok" ] && [ -f "$bin/kwok-stages.yaml" ] && [ -x "$bin/kube-apiserver" ]; then
  echo "$bin"
  exit 0
fi
# A cold build fills ~4.5 GB of Go build and module caches that only this build
# needs: keep them in a scratch directory beside the binaries and remove it once
# everything is built (left in place after a failure, so a retry is faster).
scratch="$cache/go-scratch"
export GOCACHE="$scratch/build" GOMODCACHE="$scratch/mod"

log() { echo "test-components: $*" >&2; }

build_kine() {
  [ -x "$bin/kine" ] && return 0
  log "building kine $KINE_VERSION"
  GOBIN="$bin" go install "github.com/k3s-io/kine@$KINE_VERSION" \
    || { log "FAILED: go install github.com/k3s-io/kine@$KINE_VERSION"; return 1; }
}

build_kube_apiserver() {
  [ -x "$bin/kube-apiserver" ] && return 0
  log "building kube-apiserver $KUBERNETES_VERSION (staging modules at $STAGING_VERSION)"
  local work="$cache/src/kube-apiserver-$KUBERNETES_VERSION"
  mkdir -p "$work"
  (
    cd "$work"
    # The kubernetes module replaces its staging modules with ./staging paths; a module that
    # depends on it must re-pin each of them to the published version.
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -f "$gomod" ] || { log "FAILED: could not download k8s.io/kubernetes@$KUBERNETES_VERSION"; exit 1; }
    {
      echo "module poolwright.test/kube-apiserver"
      echo
      echo "go $(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')"
      echo
      echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
      echo
      echo "replace ("
      sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\t\1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
      echo ")"
    } > go.mod
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
    go mod tidy >/dev/null 2>&1 || go mod tidy
    go build -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  ) || { log "FAILED: kube-apiserver $KUBERNETES_VERSION (wrapper module in $work)"; return 1; }
}

build_kwok() {
  [ -x "$bin/kwok" ] && return 0
  log "building kwok $KWOK_VERSION"
  GOBIN="$bin" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || { log "FAILED: go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"; return 1; }
}

# kwok does nothing without stages: take its own "fast" node and pod stages
# (nodes Ready at once, pods Running, deleted pods finalized) from the module.
kwok_stages() {
  [ -f "$bin/kwok-stages.yaml" ] && return 0
  local dir
  dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir/kustomize/stage" ] || { log "FAILED: kwok $KWOK_VERSION stages not found in the module cache"; return 1; }
  local s="$dir/kustomize/stage"
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"; cat "$s/$f"
  done > "$bin/kwok-stages.yaml.tmp" && mv "$bin/kwok-stages.yaml.tmp" "$bin/kwok-stages.yaml"
}

build_kine
build_kwok
kwok_stages
build_kube_apiserver
chmod -R u+w "$scratch" 2>/dev/null || true
rm -rf "$scratch" "$cache/src"
log "built into $bin (scratch caches removed)"
echo "$bin"
