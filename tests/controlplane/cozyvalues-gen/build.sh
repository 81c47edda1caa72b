#!/usr/bin/env bash
# Build (or reuse) cozyvalues-gen, the generator Cozystack's application charts run in
# `make generate`, from the github.com/cozystack/cozyvalues-gen module go.mod pins (the
# version Cozystack's CI downloads), for the tests that generate the stand-in charts'
# values.schema.json the way Cozystack does (tests/chart/test_cozystack_schema.py).
#
# Cached like the other built programs (../goprogram.sh), in
#   ${GPUCLASS_ASSETS_CACHE:-~/.cache/gpuclass/assets}/cozyvalues-gen-<version>-<Go>-<hash>/
# keyed by a hash of go.mod, go.sum and tools.go. Prints the binary's path on its last line.
# GPUCLASS_COZYVALUES_GEN, when it names an executable, wins.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../goprogram.sh
source "$here/../goprogram.sh"
version=$(awk '$1 == "require" && $2 == "github.com/cozystack/cozyvalues-gen" {print $3; exit}' "$here/go.mod")
go_program cozyvalues-gen GPUCLASS_COZYVALUES_GEN "$version" "$here" github.com/cozystack/cozyvalues-gen \
  go.mod go.sum tools.go
