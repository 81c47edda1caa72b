// Command kubevirt-parts runs two parts of KubeVirt against the test control plane,
// from KubeVirt's own packages (the version pinned in go.mod):
//
//   - virt-api's admission webhooks for VirtualMachineInstances, VirtualMachines and
//     launcher Pods (pkg/virt-api/webhooks/...), served over HTTPS with the handlers
//     virt-api registers on the same paths, configured from the KubeVirt CR in the
//     cluster (pkg/virt-config), and registered with the configurations virt-operator
//     writes (pkg/virt-operator/resource/generate/components), only their clientConfig
//     pointed at this process;
//   - virt-controller's launcher Pods: each new VMI gets the Pod that virt-controller's
//     TemplateService renders (pkg/virt-controller/services), created with virt-controller's
//     identity; each new VirtualMachineInstanceMigration gets its target Pod, rendered by
//     RenderMigrationManifest; a VirtualMachine whose run strategy is Always gets the VMI
//     the VM controller builds (SetupVMIFromVM, pkg/virt-controller/watch/vm).
//
// Before serving it installs, as the admin, what virt-operator would: virt-api's and
// virt-controller's RBAC (pkg/virt-operator/resource/generate/rbac) and the
// VirtualMachineInstanceMigration CRD. It acts as virt-api with -api-kubeconfig and as
// virt-controller with -controller-kubeconfig, each a client certificate whose user is
// that component's ServiceAccount.
//
// What this program adds of its own is wiring only: which webhooks to serve, and a small
// loop that calls the renderer when virt-controller would (docs/testing.md lists what its
// loop leaves out).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"kubevirt.io/client-go/kubecli"
	"kubevirt.io/client-go/log"
)

type options struct {
	adminKubeconfig      string
	apiKubeconfig        string
	controllerKubeconfig string
	namespace            string
	listen               string
	certFile             string
	keyFile              string
	caFile               string
	launcherImage        string
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.adminKubeconfig, "admin-kubeconfig", "", "kubeconfig allowed to install RBAC, CRDs and webhook configurations")
	flag.StringVar(&o.apiKubeconfig, "api-kubeconfig", "", "kubeconfig of virt-api's ServiceAccount")
	flag.StringVar(&o.controllerKubeconfig, "controller-kubeconfig", "", "kubeconfig of virt-controller's ServiceAccount")
	flag.StringVar(&o.namespace, "namespace", "kubevirt", "KubeVirt's install namespace (where its KubeVirt CR lives)")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:0", "HTTPS address of the webhooks")
	flag.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate")
	flag.StringVar(&o.keyFile, "tls-key-file", "", "serving key")
	flag.StringVar(&o.caFile, "ca-file", "", "CA of the serving certificate (the webhooks' caBundle)")
	flag.StringVar(&o.launcherImage, "launcher-image", "quay.io/kubevirt/virt-launcher:test", "virt-launcher image the Pods name")
	flag.Parse()
	for name, value := range map[string]string{
		"admin-kubeconfig": o.adminKubeconfig, "api-kubeconfig": o.apiKubeconfig,
		"controller-kubeconfig": o.controllerKubeconfig, "tls-cert-file": o.certFile,
		"tls-key-file": o.keyFile, "ca-file": o.caFile,
	} {
		if value == "" {
			fmt.Fprintf(os.Stderr, "kubevirt-parts: -%s is required\n", name)
			os.Exit(2)
		}
	}
	return o
}

func main() {
	o := parseFlags()
	log.InitializeLogging("kubevirt-parts")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "kubevirt-parts: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	caBundle, err := os.ReadFile(o.caFile)
	if err != nil {
		return err
	}
	adminConfig, err := clientcmd.BuildConfigFromFlags("", o.adminKubeconfig)
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(adminConfig)
	if err != nil {
		return err
	}
	if err := installRBAC(ctx, admin, o.namespace); err != nil {
		return fmt.Errorf("installing KubeVirt's RBAC: %w", err)
	}
	if err := installMigrationCRD(ctx, adminConfig); err != nil {
		return fmt.Errorf("installing the VirtualMachineInstanceMigration CRD: %w", err)
	}

	apiClient, err := kubecli.GetKubevirtClientFromFlags("", o.apiKubeconfig)
	if err != nil {
		return err
	}
	controllerClient, err := kubecli.GetKubevirtClientFromFlags("", o.controllerKubeconfig)
	if err != nil {
		return err
	}

	listener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	var launchers atomic.Pointer[launcherController]
	mux := http.NewServeMux()
	apiConfig, err := serveAdmission(ctx, mux, apiClient, o.namespace)
	if err != nil {
		return err
	}
	// Ready once the webhooks are registered, the launcher loop runs, and both virt-api's
	// and virt-controller's configuration come from a KubeVirt CR (until then KubeVirt
	// uses its defaults, which permit every host device).
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		c := launchers.Load()
		switch {
		case c == nil:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case apiConfig.GetConfigFromKubeVirtCR() == nil || c.config.GetConfigFromKubeVirtCR() == nil:
			http.Error(w, "no deployed KubeVirt CR in "+o.namespace, http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	})
	server := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12},
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.ServeTLS(listener, o.certFile, o.keyFile) }()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()

	base := "https://" + listener.Addr().String()
	if err := registerWebhooks(ctx, admin, o.namespace, base, caBundle); err != nil {
		return fmt.Errorf("registering KubeVirt's webhooks: %w", err)
	}
	controller, err := newLauncherController(ctx, controllerClient, o.namespace, o.launcherImage)
	if err != nil {
		return err
	}
	go controller.run(ctx)
	launchers.Store(controller)
	fmt.Printf("{\"msg\":\"serving\",\"url\":%q}\n", base)

	select {
	case err := <-serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			return ctx.Err()
		}
		return err
	case <-ctx.Done():
		<-serveErr
		return ctx.Err()
	}
}
