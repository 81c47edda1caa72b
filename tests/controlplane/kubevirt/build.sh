#!/usr/bin/env bash
# Build (or reuse) kubevirt-parts: KubeVirt's own admission webhooks and launcher-Pod
# renderer for the test control plane (main.go says what it runs), from the
# kubevirt.io/kubevirt module pinned in go.mod.
#
# Cached like the other control-plane binaries, in its own folder keyed by the KubeVirt
# version, the Go version and a hash of this folder's go.mod, go.sum and *.go:
#   ${GPUCLASS_ASSETS_CACHE:-~/.cache/gpuclass/assets}/kubevirt-parts-<kubevirt>-<go>-<hash>/
# Built under a lock, from a copy of this folder (the repository's go.mod and go.sum
# are never rewritten); older folders of this program are removed once a new one is in.
#
# Prints the binary's path on its last line. GPUCLASS_KUBEVIRT_PARTS, when it names an
# executable, wins. tests/controlplane/build.sh runs this too, so `make test` builds it.
set -euo pipefail

if [[ -n "${GPUCLASS_KUBEVIRT_PARTS:-}" && -x "${GPUCLASS_KUBEVIRT_PARTS}" ]]; then
  echo "$GPUCLASS_KUBEVIRT_PARTS"
  exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "kubevirt-parts: no Go toolchain on PATH; install Go >= 1.26 or set GPUCLASS_KUBEVIRT_PARTS" >&2; exit 3; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
version=$(awk '$1 == "kubevirt.io/kubevirt" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
sources=$(cd "$here" && cat go.mod go.sum $(ls ./*.go | sort) | sha256sum | cut -c1-12)
cache_root=${GPUCLASS_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuclass/assets}
prefix="kubevirt-parts-${version}-$(go env GOVERSION)"
dest="$cache_root/$prefix-$sources"
bin="$dest/kubevirt-parts"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache_root"
exec 8>"$cache_root/.lock-kubevirt-parts"
flock 8
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

work=$(mktemp -d "$cache_root/.build-kubevirt.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/go.mod" "$here/go.sum" "$here"/*.go "$work/"
echo "kubevirt-parts: building against kubevirt.io/kubevirt $version (first time only; docs/testing.md gives the measured time)" >&2
(cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$work/kubevirt-parts" .)
mkdir -p "$dest"
mv "$work/kubevirt-parts" "$bin"
for old in "$cache_root/$prefix"-*; do
  [[ "$old" == "$dest" ]] || rm -rf "$old"
done
echo "kubevirt-parts: ready" >&2
echo "$bin"
