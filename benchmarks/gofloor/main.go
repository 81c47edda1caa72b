// Command gofloor is the Go floor of the webhook benchmarks: the least a
// controller-runtime admission webhook does for a review. It serves TLS from a
// certificate folder and answers every AdmissionReview posted to --path as
// allowed with one fixed JSON patch read at start-up (the patch gpuclass-webhook
// gives the benchmark's review); reviews posted to any other path are allowed
// with no patch. It reads nothing of the object and holds no state, so what it
// costs per request is controller-runtime's own: TLS, HTTP, decoding the review
// and encoding the response. benchmarks/README.md says how it is used.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 9443, "port to listen on")
	certDir := flag.String("cert-dir", "", "folder holding the serving certificate")
	certName := flag.String("cert-name", "tls.crt", "certificate file in --cert-dir")
	keyName := flag.String("key-name", "tls.key", "private key file in --cert-dir")
	path := flag.String("path", "/mutate/virtualmachineinstances", "path answered with the patch")
	patchFile := flag.String("patch-file", "", "JSON file holding the patch (an array of operations)")
	flag.Parse()

	patch, err := os.ReadFile(*patchFile)
	if err != nil {
		fail(err)
	}
	var operations []map[string]any
	if err := json.Unmarshal(patch, &operations); err != nil {
		fail(fmt.Errorf("%s: not a JSON patch: %w", *patchFile, err))
	}
	patchType := admissionv1.PatchTypeJSONPatch

	server := webhook.NewServer(webhook.Options{
		Host:     *host,
		Port:     *port,
		CertDir:  *certDir,
		CertName: *certName,
		KeyName:  *keyName,
	})
	server.Register(*path, &admission.Webhook{Handler: admission.HandlerFunc(
		func(context.Context, admission.Request) admission.Response {
			return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
				Allowed: true, Patch: patch, PatchType: &patchType,
			}}
		})})
	server.Register("/", &admission.Webhook{Handler: admission.HandlerFunc(
		func(context.Context, admission.Request) admission.Response {
			return admission.Allowed("")
		})})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "gofloor: serving %s on %s:%d\n", *path, *host, *port)
	if err := server.Start(ctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gofloor:", err)
	os.Exit(1)
}
