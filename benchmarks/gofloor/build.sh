#!/usr/bin/env bash
# Build the Go floor of the webhook benchmarks (main.go: a minimal controller-runtime
# webhook) from its Go module, the way the tests build their Go programs
# (tests/controlplane/goprogram.sh): into a cache folder keyed by the controller-runtime and Go
# versions and a hash of main.go, go.mod and go.sum, under a lock, from a copy of this folder
# (the repository's go.mod/go.sum are never rewritten), with CGO_ENABLED=0.
#
# Prints the path of the gofloor binary on its last line (benchmarks/README.md gives the
# measured time of a first build). GPUCLASS_GOFLOOR, when it names an executable, wins.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/controlplane/goprogram.sh
source "$here/../../tests/controlplane/goprogram.sh"
cr_version=$(awk '$1 == "sigs.k8s.io/controller-runtime" {print $2}' "$here/go.mod")
go_program gofloor GPUCLASS_GOFLOOR "cr$cr_version" "$here" . main.go go.mod go.sum
