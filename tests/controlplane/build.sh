#!/usr/bin/env bash
# Build kube-apiserver and etcd from their Go modules, the envtest way, into a
# cache keyed by the Kubernetes, etcd and Go versions. Idempotent: a finished
# cache folder is reused; a build happens under a lock into a temporary folder
# that is renamed into place only when both binaries exist.
#
# Prints the folder holding `kube-apiserver` and `etcd` on its last line.
# KUBEBUILDER_ASSETS, when it names a folder with both binaries, wins.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kube_version=$(awk '/^require k8s.io\/kubernetes /{print $3}' "$here/kube/go.mod")
etcd_version=$(awk '/^require go.etcd.io\/etcd\/server\/v3 /{print $3}' "$here/etcd/go.mod")

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

command -v go >/dev/null || { echo "controlplane: no Go toolchain on PATH; install Go >= 1.26 or set KUBEBUILDER_ASSETS" >&2; exit 3; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
go_version=$(go env GOVERSION)
cache_root=${GPUCLASS_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuclass/assets}
dest="$cache_root/${kube_version}-etcd${etcd_version}-${go_version}"

if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
  echo "$dest"
  exit 0
fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Build from copies so the repository's go.mod/go.sum are never rewritten.
cp -r "$here/kube" "$here/etcd" "$work/"

minor=${kube_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

echo "controlplane: building kube-apiserver $kube_version and etcd $etcd_version with $go_version (first time only, ~15-25 min on 2 cores)" >&2
(cd "$work/kube" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$work/out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
(cd "$work/etcd" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$work/out/etcd" go.etcd.io/etcd/server/v3)
"$work/out/kube-apiserver" --version >&2
"$work/out/etcd" --version >&2

rm -rf "$dest"
mv "$work/out" "$dest"
echo "$dest"
