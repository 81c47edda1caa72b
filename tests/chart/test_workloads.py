"""The workloads: templates/webhook-deployment.yaml, reconciler-deployment.yaml, services.yaml,
priorityclass.yaml and poddisruptionbudgets.yaml.

Every container locked down and bounded in every variant, probes, replicas, spreading, budgets and
priority, and the settings reaching both binaries as flags they accept (parsed here by the binaries'
own settings classes).
"""

from __future__ import annotations

import os
from typing import Any

import helm_python as helm
import pytest

from gpuclass.webhook import paths
from tests.chart.common import VARIANTS
from tests.chart_helpers import (
    CHART,
    NAMESPACE,
    containers,
    deployment,
    load_yaml,
    of_kind,
    one,
    pod_spec,
    render_objects,
    selector_matches,
    workloads,
)


@pytest.mark.parametrize("values", VARIANTS)
def test_every_container_is_locked_down_and_bounded(values: dict[str, Any]) -> None:
    objects = render_objects(values)
    assert len(workloads(objects)) >= 2
    for obj in workloads(objects):
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), key
        for container in containers(obj):
            where = f"{obj['metadata']['name']}/{container['name']}"
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert context.get("privileged", False) is False, where
            assert context["runAsUser"] > 0, where
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), where
            # a read-only root still needs a writable /tmp
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, where


@pytest.mark.parametrize(
    ("component", "scheme", "port_name"),
    [("webhook", "HTTPS", "https"), ("reconciler", "HTTP", "metrics")],
)
def test_probes_use_healthz_and_readyz(component: str, scheme: str, port_name: str) -> None:
    [container] = pod_spec(deployment(render_objects(), component))["containers"]
    assert port_name in {p["name"] for p in container["ports"]}
    liveness = container["livenessProbe"]["httpGet"]
    readiness = container["readinessProbe"]["httpGet"]
    assert (liveness["path"], liveness["scheme"], liveness["port"]) == (
        paths.HEALTHZ,
        scheme,
        port_name,
    )
    assert (readiness["path"], readiness["scheme"], readiness["port"]) == (
        paths.READYZ,
        scheme,
        port_name,
    )


def test_webhook_runs_two_spread_replicas_with_a_budget_and_a_priority() -> None:
    objects = render_objects()
    webhook = deployment(objects, "webhook")
    spec = pod_spec(webhook)
    labels = webhook["spec"]["template"]["metadata"]["labels"]
    assert webhook["spec"]["replicas"] == 2
    assert webhook["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selector_matches(term["podAffinityTerm"]["labelSelector"]["matchLabels"], labels)
    keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spec["topologySpreadConstraints"]:
        assert selector_matches(constraint["labelSelector"]["matchLabels"], labels)
    priority = one(objects, "PriorityClass")
    assert spec["priorityClassName"] == priority["metadata"]["name"]
    [budget] = [
        b
        for b in of_kind(objects, "PodDisruptionBudget")
        if selector_matches(b["spec"]["selector"]["matchLabels"], labels)
    ]
    assert budget["spec"]["minAvailable"] == 1


def test_hard_anti_affinity_is_required_scheduling() -> None:
    spec = pod_spec(deployment(render_objects({"webhook": {"podAntiAffinity": "hard"}}), "webhook"))
    anti = spec["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in anti
    [term] = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_an_existing_priority_class_is_used_not_created() -> None:
    objects = render_objects(
        {"priorityClass": {"create": False, "name": "system-cluster-critical"}}
    )
    assert not of_kind(objects, "PriorityClass")
    for component in ("webhook", "reconciler"):
        assert (
            pod_spec(deployment(objects, component))["priorityClassName"]
            == "system-cluster-critical"
        )


def test_reconciler_runs_two_replicas_with_leader_election_in_the_release_namespace() -> None:
    reconciler = deployment(render_objects(), "reconciler")
    assert reconciler["spec"]["replicas"] == 2
    [container] = pod_spec(reconciler)["containers"]
    assert f"--leader-election-namespace={NAMESPACE}" in container["args"]


@pytest.mark.parametrize("entitled", [True, False])
def test_settings_reach_both_binaries_as_flags(entitled: bool) -> None:
    settings = {
        "vgpuEntitled": entitled,
        "licenseNamespace": "licenses",
        "kubevirtNamespace": "kubevirt",
        "kubevirtControllerUser": "system:serviceaccount:kubevirt:kubevirt-controller",
        "logLevel": "debug",
        "logFormat": "text",
    }
    objects = render_objects({"settings": settings})
    [webhook] = pod_spec(deployment(objects, "webhook"))["containers"]
    [reconciler] = pod_spec(deployment(objects, "reconciler"))["containers"]
    for container in (webhook, reconciler):
        assert ("--vgpu-entitled" in container["args"]) is entitled
        assert "--license-namespace=licenses" in container["args"]
        assert "--kubevirt-namespace=kubevirt" in container["args"]
        assert "--log-level=debug" in container["args"]
    assert (
        "--kubevirt-controller-user=system:serviceaccount:kubevirt:kubevirt-controller"
        in webhook["args"]
    )
    assert "--log-format=text" in webhook["args"]
    assert "--port=8443" in webhook["args"]
    assert "--port=8080" in reconciler["args"]
    # KubeVirt CR read rights follow the namespace
    assert {
        r["metadata"]["namespace"]
        for r in of_kind(objects, "Role")
        if "kubevirt" in r["metadata"]["name"]
    } == {"kubevirt"}


@pytest.mark.parametrize("values", VARIANTS)
def test_the_binaries_accept_the_rendered_flags(
    values: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuclass.reconciler.settings import ReconcilerSettings
    from gpuclass.shared.process.settings import parse_settings
    from gpuclass.webhook.settings import WebhookSettings

    for variable in [v for v in os.environ if v.startswith("GPUCLASS_")]:
        monkeypatch.delenv(variable)
    with helm.Chart.load(str(CHART)) as chart:
        merged = chart.merge_values(values)
    objects = render_objects(values)
    [webhook] = pod_spec(deployment(objects, "webhook"))["containers"]
    [reconciler] = pod_spec(deployment(objects, "reconciler"))["containers"]
    hook = parse_settings(WebhookSettings, webhook["args"], prog="gpuclass-webhook")
    loop = parse_settings(ReconcilerSettings, reconciler["args"], prog="gpuclass-reconciler")
    settings = merged["settings"]
    for parsed in (hook, loop):
        assert parsed.vgpu_entitled is settings["vgpuEntitled"]
        assert parsed.license_namespace == settings["licenseNamespace"]
        assert parsed.kubevirt_namespace == settings["kubevirtNamespace"]
        assert (parsed.log_level, parsed.log_format) == (
            settings["logLevel"],
            settings["logFormat"],
        )
        assert parsed.kubeconfig is None and parsed.objects == []  # in-cluster, watching the API
    assert hook.kubevirt_controller_user == settings["kubevirtControllerUser"]
    assert hook.port == merged["webhook"]["port"] == webhook["ports"][0]["containerPort"]
    if merged["tls"]["mode"] == "webhook" and not merged["tls"]["certManager"]["enabled"]:
        assert hook.cert_secret == one(objects, "Secret")["metadata"]["name"]
        assert hook.cert_secret_namespace() == NAMESPACE
        assert (
            hook.cert_mutating_webhook_configuration
            == (one(objects, "MutatingWebhookConfiguration")["metadata"]["name"])
        )
        assert (
            hook.cert_validating_webhook_configuration
            == (one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"])
        )
        assert "gpuclass-webhook.cozy-system.svc" in hook.tls_hosts
        assert hook.cert_policy().problems() == []
        assert hook.tls_cert_file is None and hook.tls_key_file is None
    else:
        assert hook.tls_cert_file is not None and hook.tls_key_file is not None
    assert loop.port == merged["reconciler"]["port"] == reconciler["ports"][0]["containerPort"]
    assert loop.leader_elect is True
    assert loop.lease_namespace() == NAMESPACE
    lease_rule = one(objects, "Role", "gpuclass-reconciler-leader-election")["rules"][1]
    assert lease_rule["resourceNames"] == [loop.leader_election_name]
    pod_name = {e["name"]: e for e in reconciler["env"]}["GPUCLASS_POD_NAME"]
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_images_default_to_the_app_version_and_prefer_a_digest() -> None:
    chart = load_yaml(CHART / "Chart.yaml")
    objects = render_objects()
    [container] = pod_spec(deployment(objects, "webhook"))["containers"]
    assert container["image"] == f"ghcr.io/cozystack/gpuclass-webhook:{chart['appVersion']}"
    digest = "sha256:" + "a" * 64
    objects = render_objects({"reconciler": {"image": {"digest": digest}}})
    [container] = pod_spec(deployment(objects, "reconciler"))["containers"]
    assert container["image"] == f"ghcr.io/cozystack/gpuclass-reconciler@{digest}"


@pytest.mark.parametrize("component", ["webhook", "reconciler"])
def test_services_select_their_pods_and_target_declared_ports(component: str) -> None:
    objects = render_objects()
    workload = deployment(objects, component)
    labels = workload["spec"]["template"]["metadata"]["labels"]
    [service] = [
        s
        for s in of_kind(objects, "Service")
        if s["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    assert selector_matches(service["spec"]["selector"], labels)
    assert selector_matches(workload["spec"]["selector"]["matchLabels"], labels)
    [container] = pod_spec(workload)["containers"]
    declared = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= declared


def test_webhook_limits_and_shutdown_reach_the_binary_and_the_pod() -> None:
    """The limits are the binary's flags; the grace period covers preStop, drain and in-flight."""
    from gpuclass.shared.process.settings import parse_settings
    from gpuclass.webhook.settings import WebhookSettings

    values = {
        "webhook": {
            "limits": {"maxConnections": 300, "headerTimeoutSeconds": 3},
            "shutdown": {"preStopSeconds": 7, "drainSeconds": 4, "graceSeconds": 12},
        }
    }
    spec = pod_spec(deployment(render_objects(values), "webhook"))
    [container] = spec["containers"]
    hook = parse_settings(WebhookSettings, container["args"], prog="gpuclass-webhook")
    assert (hook.max_connections, hook.header_timeout_seconds) == (300, 3)
    assert (hook.drain_seconds, hook.shutdown_grace_seconds) == (4, 12)
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 7}}
    assert spec["terminationGracePeriodSeconds"] == 7 + 4 + 12 + 5
    default = pod_spec(deployment(render_objects({}), "webhook"))
    [plain] = default["containers"]
    settings = parse_settings(WebhookSettings, plain["args"], prog="gpuclass-webhook")
    assert settings.max_body_buffer_bytes == WebhookSettings().max_body_buffer_bytes
    assert default["terminationGracePeriodSeconds"] >= (
        plain["lifecycle"]["preStop"]["sleep"]["seconds"]
        + settings.drain_seconds
        + settings.shutdown_grace_seconds
    )
    no_hook = pod_spec(
        deployment(render_objects({"webhook": {"shutdown": {"preStopSeconds": 0}}}), "webhook")
    )
    assert "lifecycle" not in no_hook["containers"][0]
