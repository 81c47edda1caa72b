//go:build tools

// Package tools pins the kube-apiserver command so that `go mod tidy`
// keeps every module it needs in go.sum. It is never compiled.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
