#!/usr/bin/env bash
# Build (or reuse) kubevirt-parts: KubeVirt's own admission webhooks and launcher-Pod
# renderer for the test control plane (main.go says what it runs), from the
# kubevirt.io/kubevirt module pinned in go.mod.
#
# Cached like the other built programs (../goprogram.sh), in its own folder keyed by the
# KubeVirt version, the Go version and a hash of this folder's go.mod, go.sum and *.go:
#   ${GPUCLASS_ASSETS_CACHE:-~/.cache/gpuclass/assets}/kubevirt-parts-<kubevirt>-<go>-<hash>/
# Built under a lock, from a copy of this folder (the repository's go.mod and go.sum
# are never rewritten); older folders of this program are removed once a new one is in.
#
# Prints the binary's path on its last line. GPUCLASS_KUBEVIRT_PARTS, when it names an
# executable, wins. tests/controlplane/build.sh runs this too, so `make test` builds it;
# docs/testing.md gives the measured time of a first build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../goprogram.sh
source "$here/../goprogram.sh"
version=$(awk '$1 == "kubevirt.io/kubevirt" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
mapfile -t programs < <(cd "$here" && ls ./*.go | sort)
go_program kubevirt-parts GPUCLASS_KUBEVIRT_PARTS "$version" "$here" . go.mod go.sum "${programs[@]}"
