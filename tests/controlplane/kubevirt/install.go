package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	k8serrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/rbac"
)

// installRBAC writes what virt-operator installs for virt-api and virt-controller: their
// ServiceAccounts, Roles, ClusterRoles and bindings, exactly as KubeVirt generates them.
func installRBAC(ctx context.Context, admin kubernetes.Interface, namespace string) error {
	objects := append(rbac.GetAllApiServer(namespace), rbac.GetAllController(namespace, false)...)
	for _, object := range objects {
		if err := createOrUpdate(ctx, admin, object); err != nil {
			return err
		}
	}
	return nil
}

func createOrUpdate(ctx context.Context, admin kubernetes.Interface, object runtime.Object) error {
	var err error
	switch o := object.(type) {
	case *corev1.ServiceAccount:
		_, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		if k8serrors.IsAlreadyExists(err) {
			err = nil
		}
	case *rbacv1.Role:
		_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		if k8serrors.IsAlreadyExists(err) {
			_, err = admin.RbacV1().Roles(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
		}
	case *rbacv1.RoleBinding:
		_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		if k8serrors.IsAlreadyExists(err) {
			_, err = admin.RbacV1().RoleBindings(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
		}
	case *rbacv1.ClusterRole:
		_, err = admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		if k8serrors.IsAlreadyExists(err) {
			_, err = admin.RbacV1().ClusterRoles().Update(ctx, o, metav1.UpdateOptions{})
		}
	case *rbacv1.ClusterRoleBinding:
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		if k8serrors.IsAlreadyExists(err) {
			_, err = admin.RbacV1().ClusterRoleBindings().Update(ctx, o, metav1.UpdateOptions{})
		}
	default:
		return fmt.Errorf("unexpected RBAC object %T", object)
	}
	return err
}

// installMigrationCRD installs virt-operator's VirtualMachineInstanceMigration CRD (the
// trigger of a target launcher Pod) and waits until it is Established.
func installMigrationCRD(ctx context.Context, config *rest.Config) error {
	crd, err := components.NewVirtualMachineInstanceMigrationCrd()
	if err != nil {
		return err
	}
	client, err := extclient.NewForConfig(config)
	if err != nil {
		return err
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !k8serrors.IsAlreadyExists(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		current, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, condition := range current.Status.Conditions {
			if condition.Type == extv1.Established && condition.Status == extv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
