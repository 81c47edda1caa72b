package main

import (
	"context"
	"fmt"
	"net/http"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	k8serrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"kubevirt.io/kubevirt/pkg/controller"
	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks"
	mutating_webhook "kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook"
	validating_webhook "kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

// servedPaths are the webhooks of virt-api this program serves: those for VMIs, VMs and
// launcher Pods. Every other webhook of virt-operator's configurations is left out.
var servedPaths = map[string]bool{
	components.VMICreateValidatePath:     true,
	components.VMIUpdateValidatePath:     true,
	components.VMValidatePath:            true,
	components.VMIMutatePath:             true,
	components.VMMutatePath:              true,
	components.VirtLauncherPodMutatePath: true,
}

// newClusterConfig builds virt-api's view of the KubeVirt CR the way virt-api does
// (pkg/virt-api/api.go): informers of KubeVirt's own factory, then NewClusterConfig.
func newClusterConfig(ctx context.Context, client kubecli.KubevirtClient, namespace string) (*virtconfig.ClusterConfig, controller.KubeInformerFactory, error) {
	factory := controller.NewKubeInformerFactory(client.RestClient(), client, nil, namespace)
	kubeVirt := factory.KubeVirt()
	crds := factory.CRD()
	factory.Namespace()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	config, err := virtconfig.NewClusterConfig(crds, kubeVirt, namespace)
	return config, factory, err
}

// noPresets is an informer that is never started: an empty VirtualMachineInstancePreset
// cache. Presets are deprecated and their CRD is not installed; the VMI mutator lists
// presets from this informer's index on every CREATE.
func noPresets() cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.VirtualMachineInstancePreset{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// serveAdmission registers virt-api's handlers on its own paths, with the arguments
// virt-api's registerValidatingWebhooks and registerMutatingWebhook pass.
func serveAdmission(ctx context.Context, mux *http.ServeMux, client kubecli.KubevirtClient, namespace string) (*virtconfig.ClusterConfig, error) {
	clusterConfig, factory, err := newClusterConfig(ctx, client, namespace)
	if err != nil {
		return nil, err
	}
	informers := &webhooks.Informers{
		VMIPresetInformer:  noPresets(),
		DataSourceInformer: factory.DummyDataSource(),
		NamespaceInformer:  factory.Namespace(),
	}
	serviceAccounts := webhooks.KubeVirtServiceAccounts(namespace)

	mux.HandleFunc(components.VMICreateValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMICreate(w, r, clusterConfig, serviceAccounts,
			func(path *field.Path, spec *v1.VirtualMachineInstanceSpec, config *virtconfig.ClusterConfig) []metav1.StatusCause {
				return netadmitter.Validate(path, spec, config)
			},
		)
	})
	mux.HandleFunc(components.VMIUpdateValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMIUpdate(w, r, clusterConfig, serviceAccounts)
	})
	mux.HandleFunc(components.VMValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMs(w, r, clusterConfig, client, informers, serviceAccounts)
	})
	mux.HandleFunc(components.VMMutatePath, func(w http.ResponseWriter, r *http.Request) {
		mutating_webhook.ServeVMs(w, r, clusterConfig, client)
	})
	mux.HandleFunc(components.VMIMutatePath, func(w http.ResponseWriter, r *http.Request) {
		mutating_webhook.ServeVMIs(w, r, clusterConfig, informers, serviceAccounts)
	})
	mux.HandleFunc(components.VirtLauncherPodMutatePath, func(w http.ResponseWriter, r *http.Request) {
		mutating_webhook.ServeVirtLauncherPods(w, r, clusterConfig, client)
	})
	return clusterConfig, nil
}

// pointAt keeps a webhook only when this program serves its path, and sends it here.
func pointAt(config *admissionregistrationv1.WebhookClientConfig, base string, caBundle []byte) bool {
	if config.Service == nil || config.Service.Path == nil || !servedPaths[*config.Service.Path] {
		return false
	}
	url := base + *config.Service.Path
	*config = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	return true
}

// registerWebhooks writes virt-operator's own configurations (names, rules, selectors,
// failurePolicy, timeouts as virt-operator generates them), each reduced to the
// webhooks served here, pointed at this process.
func registerWebhooks(ctx context.Context, admin kubernetes.Interface, namespace, base string, caBundle []byte) error {
	mutating := []*admissionregistrationv1.MutatingWebhookConfiguration{
		components.NewVirtAPIMutatingWebhookConfiguration(namespace),
		components.NewVirtLauncherPodMutatingWebhookConfiguration(namespace),
	}
	for _, configuration := range mutating {
		kept := configuration.Webhooks[:0]
		for _, hook := range configuration.Webhooks {
			if pointAt(&hook.ClientConfig, base, caBundle) {
				kept = append(kept, hook)
			}
		}
		configuration.Webhooks = kept
		if err := applyMutating(ctx, admin, configuration); err != nil {
			return err
		}
	}
	validating := components.NewVirtAPIValidatingWebhookConfiguration(namespace)
	kept := validating.Webhooks[:0]
	for _, hook := range validating.Webhooks {
		if pointAt(&hook.ClientConfig, base, caBundle) {
			kept = append(kept, hook)
		}
	}
	validating.Webhooks = kept
	return applyValidating(ctx, admin, validating)
}

func applyMutating(ctx context.Context, admin kubernetes.Interface, wanted *admissionregistrationv1.MutatingWebhookConfiguration) error {
	client := admin.AdmissionregistrationV1().MutatingWebhookConfigurations()
	current, err := client.Get(ctx, wanted.Name, metav1.GetOptions{})
	if k8serrors.IsNotFound(err) {
		_, err = client.Create(ctx, wanted, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	wanted.ResourceVersion = current.ResourceVersion
	_, err = client.Update(ctx, wanted, metav1.UpdateOptions{})
	return err
}

func applyValidating(ctx context.Context, admin kubernetes.Interface, wanted *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	client := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	current, err := client.Get(ctx, wanted.Name, metav1.GetOptions{})
	if k8serrors.IsNotFound(err) {
		_, err = client.Create(ctx, wanted, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	wanted.ResourceVersion = current.ResourceVersion
	_, err = client.Update(ctx, wanted, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating %s: %w", wanted.Name, err)
	}
	return nil
}
