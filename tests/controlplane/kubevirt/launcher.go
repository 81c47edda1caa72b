package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	"kubevirt.io/client-go/log"

	"kubevirt.io/kubevirt/pkg/controller"
	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/network/netbinding"
	netannotations "kubevirt.io/kubevirt/pkg/network/pod/annotations"
	netresources "kubevirt.io/kubevirt/pkg/network/resources"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	"kubevirt.io/kubevirt/pkg/util"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/common"
	vmcontroller "kubevirt.io/kubevirt/pkg/virt-controller/watch/vm"
)

// virt-controller's defaults (pkg/virt-controller/watch/application.go).
const (
	launcherQemuTimeout = 240
	virtShareDir        = "/var/run/kubevirt"
	ephemeralDiskDir    = virtShareDir + "-ephemeral-disks"
	launcherSubGid      = 107
	exporterImage       = "virt-exportserver"
)

// launcherController creates launcher Pods the way virt-controller's VMI and migration
// controllers do, with their renderer, and starts a VirtualMachine whose run strategy is
// Always with the VMI the VM controller builds (SetupVMIFromVM); it leaves out everything
// else those controllers do (VMI and VM status, phases, restarts, DataVolumes, backend
// storage, instance types, hotplug, topology hints).
type launcherController struct {
	client     kubecli.KubevirtClient
	config     *virtconfig.ClusterConfig
	templates  *services.TemplateService
	vmis       cache.SharedIndexInformer
	vms        cache.SharedIndexInformer
	pods       cache.SharedIndexInformer
	migrations cache.SharedIndexInformer
	queue      workqueue.TypedRateLimitingInterface[string]
	// done holds the UIDs of the VMIs and migrations whose Pod this process created,
	// virt-controller's "expectations": a Pod the informer has not seen yet is not made twice.
	done sync.Map
}

func newLauncherController(ctx context.Context, client kubecli.KubevirtClient, namespace, image string) (*launcherController, error) {
	factory := controller.NewKubeInformerFactory(client.RestClient(), client, nil, namespace)
	kubeVirt, crds := factory.KubeVirt(), factory.CRD()
	c := &launcherController{
		client:     client,
		vmis:       factory.VMI(),
		vms:        factory.VirtualMachine(),
		pods:       factory.KubeVirtPod(),
		migrations: factory.VirtualMachineInstanceMigration(),
		queue: workqueue.NewTypedRateLimitingQueue[string](
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 5*time.Second)),
	}
	claims, quotas, namespaces := factory.PersistentVolumeClaim(), factory.ResourceQuota(), factory.Namespace()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	clusterConfig, err := virtconfig.NewClusterConfig(crds, kubeVirt, namespace)
	if err != nil {
		return nil, err
	}
	c.config = clusterConfig
	// The options virt-controller passes (application.go, initCommon).
	c.templates = services.NewTemplateService(image,
		launcherQemuTimeout,
		virtShareDir,
		ephemeralDiskDir,
		filepath.Join(util.VirtShareDir, "container-disks"),
		filepath.Join(util.VirtShareDir, "hotplug-disks"),
		"",
		claims.GetStore(),
		client,
		clusterConfig,
		launcherSubGid,
		exporterImage,
		quotas.GetStore(),
		namespaces.GetStore(),
		services.WithSidecarCreator(
			func(vmi *v1.VirtualMachineInstance, _ *v1.KubeVirtConfiguration) (hooks.HookSidecarList, error) {
				return hooks.UnmarshalHookSidecarList(vmi)
			}),
		services.WithSidecarCreator(netbinding.NetBindingPluginSidecarList),
		services.WithNetMemoryCalculator(netresources.MemoryCalculator{}),
		services.WithAnnotationsGenerators(netannotations.NewGenerator(clusterConfig), storageannotations.Generator{}),
		services.WithNetTargetAnnotationsGenerator(netannotations.NewGenerator(clusterConfig)),
	)
	enqueue := func(prefix string) func(any) {
		return func(obj any) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				c.queue.Add(prefix + key)
			}
		}
	}
	handlers := func(prefix string) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue(prefix),
			UpdateFunc: func(_, obj any) { enqueue(prefix)(obj) },
		}
	}
	if _, err := c.vmis.AddEventHandler(handlers("vmi/")); err != nil {
		return nil, err
	}
	if _, err := c.migrations.AddEventHandler(handlers("migration/")); err != nil {
		return nil, err
	}
	if _, err := c.vms.AddEventHandler(handlers("vm/")); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *launcherController) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		item, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		var err error
		switch kind, key := split(item); kind {
		case "vmi":
			err = c.syncVMI(ctx, key)
		case "migration":
			err = c.syncMigration(ctx, key)
		case "vm":
			err = c.syncVM(ctx, key)
		}
		if err != nil {
			log.Log.Reason(err).Errorf("syncing %s", item)
			c.queue.AddRateLimited(item)
		} else {
			c.queue.Forget(item)
		}
		c.queue.Done(item)
	}
}

func split(item string) (string, string) {
	for i := range item {
		if item[i] == '/' {
			return item[:i], item[i+1:]
		}
	}
	return item, ""
}

// syncVMI renders and creates the launcher Pod of a new VMI, as the VMI controller's
// sync does once a VMI is unprocessed and has no Pod (pkg/virt-controller/watch/vmi/lifecycle.go).
func (c *launcherController) syncVMI(ctx context.Context, key string) error {
	obj, exists, err := c.vmis.GetStore().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	vmi := obj.(*v1.VirtualMachineInstance)
	if vmi.DeletionTimestamp != nil || vmi.IsFinal() || !vmi.IsUnprocessed() {
		return nil
	}
	if _, created := c.done.Load(vmi.UID); created {
		return nil
	}
	if pod, err := controller.CurrentVMIPod(vmi, c.pods.GetIndexer()); err != nil || pod != nil {
		return err
	}
	pod, err := c.templates.RenderLaunchManifest(vmi)
	if err != nil {
		c.event(ctx, vmi, k8sv1.EventTypeWarning, controller.FailedCreatePodReason,
			fmt.Sprintf(services.FailedToRenderLaunchManifestErrFormat, err))
		c.done.Store(vmi.UID, "")
		return nil
	}
	return c.create(ctx, vmi, vmi.UID, pod)
}

// syncMigration renders and creates a migration's target Pod with RenderMigrationManifest
// and the label and annotation the migration controller adds (createTargetPod in
// pkg/virt-controller/watch/migration/migration.go).
func (c *launcherController) syncMigration(ctx context.Context, key string) error {
	obj, exists, err := c.migrations.GetStore().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	migration := obj.(*v1.VirtualMachineInstanceMigration)
	if _, created := c.done.Load(migration.UID); created {
		return nil
	}
	vmiObj, exists, err := c.vmis.GetStore().GetByKey(migration.Namespace + "/" + migration.Spec.VMIName)
	if err != nil || !exists {
		return err
	}
	vmi := vmiObj.(*v1.VirtualMachineInstance)
	source, err := controller.CurrentVMIPod(vmi, c.pods.GetIndexer())
	if err != nil {
		return err
	}
	if source == nil {
		return fmt.Errorf("migration %s: VMI %s has no launcher Pod yet", key, vmi.Name)
	}
	pod, err := c.templates.RenderMigrationManifest(vmi, migration, source)
	if err != nil {
		c.event(ctx, vmi, k8sv1.EventTypeWarning, controller.FailedCreatePodReason,
			fmt.Sprintf(services.FailedToRenderLaunchManifestErrFormat, err))
		c.done.Store(migration.UID, "")
		return nil
	}
	pod.Labels[v1.MigrationJobLabel] = string(migration.UID)
	pod.Annotations[v1.MigrationJobNameAnnotation] = migration.Name
	return c.create(ctx, vmi, migration.UID, pod)
}

// syncVM starts a VM whose run strategy is Always and that has no VMI yet: it creates the
// VMI virt-controller's VM controller builds from the VM (its template's metadata and spec,
// the VM as controller owner), as virt-controller's identity.
func (c *launcherController) syncVM(ctx context.Context, key string) error {
	obj, exists, err := c.vms.GetStore().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	vm := obj.(*v1.VirtualMachine)
	strategy, err := vm.RunStrategy()
	if err != nil || strategy != v1.RunStrategyAlways || vm.DeletionTimestamp != nil {
		return err
	}
	if _, created := c.done.Load(vm.UID); created {
		return nil
	}
	if _, exists, err := c.vmis.GetStore().GetByKey(key); err != nil || exists {
		return err
	}
	vmi := vmcontroller.SetupVMIFromVM(vm)
	created, err := c.client.VirtualMachineInstance(vm.Namespace).Create(ctx, vmi, metav1.CreateOptions{})
	if err != nil {
		c.vmEvent(ctx, vm, k8sv1.EventTypeWarning, common.FailedCreateVirtualMachineReason, fmt.Sprintf("Error creating virtual machine instance: %v", err))
		c.done.Store(vm.UID, "")
		return nil
	}
	c.done.Store(vm.UID, created.Name)
	c.vmEvent(ctx, vm, k8sv1.EventTypeNormal, common.SuccessfulCreateVirtualMachineReason, "Started the virtual machine by creating the new virtual machine instance "+created.Name)
	return nil
}

func (c *launcherController) create(ctx context.Context, vmi *v1.VirtualMachineInstance, uid types.UID, pod *k8sv1.Pod) error {
	created, err := c.client.CoreV1().Pods(vmi.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		c.event(ctx, vmi, k8sv1.EventTypeWarning, controller.FailedCreatePodReason, fmt.Sprintf("Error creating pod: %v", err))
		return err
	}
	c.done.Store(uid, created.Name)
	c.event(ctx, vmi, k8sv1.EventTypeNormal, controller.SuccessfulCreatePodReason, "Created virtual machine pod "+created.Name)
	return nil
}

func (c *launcherController) event(ctx context.Context, vmi *v1.VirtualMachineInstance, kind, reason, message string) {
	c.record(ctx, k8sv1.ObjectReference{
		APIVersion: v1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance",
		Namespace: vmi.Namespace, Name: vmi.Name, UID: vmi.UID, ResourceVersion: vmi.ResourceVersion,
	}, kind, reason, message)
}

func (c *launcherController) vmEvent(ctx context.Context, vm *v1.VirtualMachine, kind, reason, message string) {
	c.record(ctx, k8sv1.ObjectReference{
		APIVersion: v1.SchemeGroupVersion.String(), Kind: "VirtualMachine",
		Namespace: vm.Namespace, Name: vm.Name, UID: vm.UID, ResourceVersion: vm.ResourceVersion,
	}, kind, reason, message)
}

// record writes what virt-controller's recorder would, with the same reasons and messages.
func (c *launcherController) record(ctx context.Context, object k8sv1.ObjectReference, kind, reason, message string) {
	now := metav1.NewTime(time.Now())
	event := &k8sv1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: object.Name + ".", Namespace: object.Namespace},
		InvolvedObject: object,
		Reason:         reason, Message: message, Type: kind, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: k8sv1.EventSource{Component: "virtualmachine-controller"},
	}
	if _, err := c.client.CoreV1().Events(object.Namespace).Create(ctx, event, metav1.CreateOptions{}); err != nil {
		log.Log.Reason(err).Errorf("recording event %s on %s/%s", reason, object.Namespace, object.Name)
	}
}
