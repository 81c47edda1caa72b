#!/usr/bin/env bash
# Build the Go floor of the webhook benchmarks (main.go: a minimal controller-runtime
# webhook) from its Go module, the way tests/controlplane/build.sh builds the control
# plane: into a cache folder keyed by the controller-runtime and Go versions, under a
# lock, from a copy of this folder (the repository's go.mod/go.sum are never rewritten),
# with CGO_ENABLED=0. A build whose sources changed gets a new folder: the key also
# holds a hash of main.go, go.mod and go.sum.
#
# Prints the path of the gofloor binary on its last line.
# GPUCLASS_GOFLOOR, when it names an executable, wins.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [[ -n "${GPUCLASS_GOFLOOR:-}" && -x "${GPUCLASS_GOFLOOR}" ]]; then
  echo "$GPUCLASS_GOFLOOR"
  exit 0
fi

command -v go >/dev/null || { echo "gofloor: no Go toolchain on PATH; install Go >= 1.26 or set GPUCLASS_GOFLOOR" >&2; exit 3; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
cr_version=$(awk '$1 == "sigs.k8s.io/controller-runtime" {print $2}' "$here/go.mod")
go_version=$(go env GOVERSION)
sources=$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache_root=${GPUCLASS_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuclass/assets}
dest="$cache_root/gofloor-cr${cr_version}-${go_version}-${sources}"

if [[ -x "$dest/gofloor" ]]; then
  echo "$dest/gofloor"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [[ -x "$dest/gofloor" ]]; then
  echo "$dest/gofloor"
  exit 0
fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/main.go" "$here/go.mod" "$here/go.sum" "$work/"
echo "gofloor: building controller-runtime $cr_version with $go_version (first time only; benchmarks/README.md gives the measured time)" >&2
started=$SECONDS
(cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$work/gofloor" .)
mkdir -p "$dest"
mv "$work/gofloor" "$dest/gofloor"
echo "gofloor: ready in $((SECONDS - started)) s" >&2
echo "$dest/gofloor"
