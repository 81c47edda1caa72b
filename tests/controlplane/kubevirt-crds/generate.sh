#!/usr/bin/env bash
# Regenerate tests/controlplane/crds/kubevirt.io_*.yaml: KubeVirt's own CRDs for
# VirtualMachineInstance, VirtualMachine and KubeVirt, from the kubevirt.io/kubevirt
# module pinned in go.mod (served by the Go module proxy), descriptions stripped.
#
# The generator binary is cached beside the control-plane binaries, keyed by the
# KubeVirt and Go versions, so a second run takes a second. The first build compiles
# a good part of KubeVirt's dependencies (about 15 min on 2 busy cores).
# tests/e2e/test_kubevirt_crds.py checks that the committed files are what this writes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/../crds"}
command -v go >/dev/null || { echo "kubevirt-crds: no Go toolchain on PATH" >&2; exit 3; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
version=$(awk '$1 == "kubevirt.io/kubevirt" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
cache_root=${GPUCLASS_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuclass/assets}
bin="$cache_root/kubevirt-crds-${version}-$(go env GOVERSION)/kubevirt-crds"
if [[ ! -x "$bin" ]]; then
  echo "kubevirt-crds: building the generator against kubevirt.io/kubevirt $version" >&2
  mkdir -p "$(dirname "$bin")"
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
fi
mkdir -p "$out"
"$bin" "$out"
echo "kubevirt-crds: wrote the KubeVirt $version CRDs to $out" >&2
