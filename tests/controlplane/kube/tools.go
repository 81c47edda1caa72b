//go:build tools

// Package tools pins the Kubernetes commands the tests run (kube-apiserver,
// kube-scheduler, kube-controller-manager, kubectl) so that `go mod tidy`
// keeps every module they need in go.sum. It is never compiled.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
