//go:build tools

// Package tools pins the kwok command (it plays kubelet for fake Nodes and
// Pods in the cluster-shape tests) so that `go mod tidy` keeps every module it
// needs in go.sum. It is never compiled.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
