//go:build tools

// Package tools pins the commands the tests run from Kubernetes (kube-apiserver,
// kube-scheduler, kube-controller-manager, kubectl) and kwok (it plays kubelet for
// fake Nodes and Pods in the cluster-shape tests) so that `go mod tidy` keeps every
// module they need in go.sum. One module for all of them means one version of each
// shared dependency, so Go's build cache compiles the packages they share once.
// It is never compiled.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
