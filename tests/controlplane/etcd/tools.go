//go:build tools

// Package tools pins the etcd server command so that `go mod tidy`
// keeps every module it needs in go.sum. It is never compiled.
package tools

import _ "go.etcd.io/etcd/server/v3"
