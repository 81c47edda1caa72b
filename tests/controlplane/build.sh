#!/usr/bin/env bash
# Build the control-plane binaries the tests run from their Go modules, the envtest
# way, into a cache folder:
#   kube-apiserver, kube-scheduler, kube-controller-manager, kubectl,
#   kwok                                      (kube/go.mod: k8s.io/kubernetes, sigs.k8s.io/kwok)
#   etcd                                      (etcd/go.mod: go.etcd.io/etcd/server/v3)
# and then runs kubevirt/build.sh, which builds kubevirt-parts (KubeVirt's admission
# webhooks and launcher renderer, kubevirt.io/kubevirt) into its own cache folder; a
# failure there is reported and the tests that need it skip (or fail in CI).
#
# kwok shares kube's module, so it links against the same versions of every package the
# Kubernetes binaries use: Go's build cache (GOCACHE) compiles those once, and kwok adds
# only its own packages. The cache folder is keyed by the Kubernetes, etcd, kwok and Go
# versions and a hash of kube's and etcd's go.mod and go.sum, so a change of any pinned
# dependency builds a new folder instead of reusing binaries built from other pins.
#
# Idempotent and incremental: each binary that is already in the cache folder is
# reused; the missing ones are built under a lock into a temporary folder and moved
# into place one by one, so an interrupted build keeps what it finished.
#
# Prints the folder holding the binaries on its last line (not kubevirt-parts, which
# kubevirt/build.sh locates).
# KUBEBUILDER_ASSETS, when it names a folder with every binary, wins.
# GPUCLASS_CONTROLPLANE_BINARIES (space-separated) narrows what is required; kubevirt-parts
# is built when it is unset or names it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# The version a go.mod requires of a module, on a `require` line or in a `require (` block.
required() { awk -v m="$1" '($1 == "require" && $2 == m) {print $3; exit} ($1 == m && $2 ~ /^v/) {print $2; exit}' "$2"; }
kube_version=$(required k8s.io/kubernetes "$here/kube/go.mod")
kwok_version=$(required sigs.k8s.io/kwok "$here/kube/go.mod")
etcd_version=$(required go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
kube_bins=(kube-apiserver kube-scheduler kube-controller-manager kubectl)
read -r -a wanted <<<"${GPUCLASS_CONTROLPLANE_BINARIES:-${kube_bins[*]} etcd kwok kubevirt-parts}"
with_kubevirt=false
for i in "${!wanted[@]}"; do
  [[ "${wanted[$i]}" == kubevirt-parts ]] && { with_kubevirt=true; unset 'wanted[i]'; }
done
wanted=("${wanted[@]}")

# Print the folder and stop, once kubevirt-parts is built (or reported as not buildable).
finish() {
  if $with_kubevirt; then
    bash "$here/kubevirt/build.sh" >/dev/null ||
      echo "controlplane: kubevirt-parts was not built; the tests that run KubeVirt's code skip (fail under GPUCLASS_REQUIRE_CONTROL_PLANE=1)" >&2
  fi
  echo "$1"
  exit 0
}

have_all() {
  local dir=$1 bin
  for bin in "${wanted[@]}"; do [[ -x "$dir/$bin" ]] || return 1; done
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] && have_all "$KUBEBUILDER_ASSETS"; then
  finish "$KUBEBUILDER_ASSETS"
fi

command -v go >/dev/null || { echo "controlplane: no Go toolchain on PATH; install Go >= 1.26 or set KUBEBUILDER_ASSETS" >&2; exit 3; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
go_version=$(go env GOVERSION)
cache_root=${GPUCLASS_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuclass/assets}
pins=$(cd "$here" && cat kube/go.mod kube/go.sum etcd/go.mod etcd/go.sum | sha256sum | cut -c1-12)
dest="$cache_root/${kube_version}-etcd${etcd_version}-kwok${kwok_version}-${go_version}-${pins}"

if have_all "$dest"; then
  finish "$dest"
fi

mkdir -p "$cache_root" "$dest"
exec 9>"$cache_root/.lock"
flock 9
if have_all "$dest"; then
  finish "$dest"
fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Build from copies so the repository's go.mod/go.sum are never rewritten.
cp -r "$here/kube" "$here/etcd" "$work/"
mkdir -p "$work/out"

minor=${kube_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

missing() { [[ ! -x "$dest/$1" ]] && [[ " ${wanted[*]} " == *" $1 "* ]]; }
install_bin() { mv "$work/out/$1" "$dest/$1"; echo "controlplane: $1 ready" >&2; }

pkgs=()
for bin in "${kube_bins[@]}"; do missing "$bin" && pkgs+=("k8s.io/kubernetes/cmd/$bin"); done
if ((${#pkgs[@]})); then
  echo "controlplane: building ${pkgs[*]##*/} $kube_version with $go_version (first time only; docs/testing.md gives the measured time)" >&2
  # One `go build` for all of them: the packages they share are compiled once.
  (cd "$work/kube" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$work/out/" "${pkgs[@]}")
  for pkg in "${pkgs[@]}"; do install_bin "${pkg##*/}"; done
fi
if missing etcd; then
  echo "controlplane: building etcd $etcd_version" >&2
  (cd "$work/etcd" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$work/out/etcd" go.etcd.io/etcd/server/v3)
  install_bin etcd
fi
if missing kwok; then
  echo "controlplane: building kwok $kwok_version" >&2
  # Its own `go build` (kwok is linked without the Kubernetes version stamps); the
  # packages it shares with the Kubernetes binaries come from the Go build cache.
  (cd "$work/kube" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$work/out/kwok" sigs.k8s.io/kwok/cmd/kwok)
  install_bin kwok
fi
finish "$dest"
