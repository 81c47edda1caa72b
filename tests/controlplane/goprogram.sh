# Sourced (not run) by the build scripts of the single Go programs the tests and benchmarks
# build from their own go.mod: tests/controlplane/kubevirt/build.sh (kubevirt-parts),
# tests/controlplane/cozyvalues-gen/build.sh and benchmarks/gofloor/build.sh.
#
#   go_program NAME ENV KEY DIR TARGET FILE...
#
# prints the path of the binary NAME on its last line: the executable ENV names, if any; else
# the one cached in ${GPUCLASS_ASSETS_CACHE:-~/.cache/gpuclass/assets}/NAME-KEY-<Go>-<hash>/,
# where KEY names the pinned versions and <hash> covers FILE... (relative to DIR, in the order
# given); else it builds `go build TARGET` there, under a lock, from a copy of FILE... (the
# repository's go.mod and go.sum are never rewritten), with CGO_ENABLED=0 and at nice 10, and
# removes older folders of the same NAME, KEY and Go. Exit 3 without a Go toolchain.
go_program() {
  local name=$1 env=$2 key=$3 dir=$4 target=$5
  shift 5
  local configured=${!env:-}
  if [[ -n "$configured" && -x "$configured" ]]; then
    echo "$configured"
    return 0
  fi
  command -v go >/dev/null || { echo "$name: no Go toolchain on PATH; install Go >= 1.26 or set $env" >&2; return 3; }
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
  local go_version sources cache_root prefix dest bin work started old
  go_version=$(go env GOVERSION)
  sources=$(cd "$dir" && cat "$@" | sha256sum | cut -c1-12)
  cache_root=${GPUCLASS_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuclass/assets}
  prefix="$name-$key-$go_version"
  dest="$cache_root/$prefix-$sources"
  bin="$dest/$name"
  if [[ -x "$bin" ]]; then
    echo "$bin"
    return 0
  fi
  mkdir -p "$cache_root"
  exec 8>"$cache_root/.lock-$name"
  flock 8
  if [[ -x "$bin" ]]; then
    echo "$bin"
    return 0
  fi
  work=$(mktemp -d "$cache_root/.build-$name.XXXXXX")
  # shellcheck disable=SC2064 # the folder is known now
  trap "rm -rf '$work'" EXIT
  (cd "$dir" && cp "$@" "$work/")
  echo "$name: building $key with $go_version (first time only)" >&2
  started=$SECONDS
  (cd "$work" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$work/$name" "$target")
  mkdir -p "$dest"
  mv "$work/$name" "$bin"
  for old in "$cache_root/$prefix"-*; do
    [[ "$old" == "$dest" ]] || rm -rf "$old"
  done
  echo "$name: ready in $((SECONDS - started)) s" >&2
  echo "$bin"
}
