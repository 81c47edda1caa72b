"""Chart conventions hosters expect from a platform chart (cert-manager, Kyverno, Kueue charts):
a global image registry, affinity and topology-spread pass-through, PodMonitors, drain-safe
PodDisruptionBudgets, a CRD managed outside the chart, and a read-only catalog role.

Everything is asserted on objects rendered by the real Helm engine (tests/chart_helpers.py), and
the schema is shown to refuse bad values. Expected results come from the values' documented
meaning (docs/chart-values.md), not from the templates.
"""

from __future__ import annotations

import math
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from gpuclass.webhook import paths
from tests.chart_helpers import (
    CHART,
    RawObject,
    containers,
    deployment,
    load_yaml,
    of_kind,
    one,
    pod_spec,
    render,
    render_objects,
    selector_matches,
    workloads,
)
from tests.controlplane import ControlPlane, eventually, unique_name

GPUCLASSES = "/apis/cozystack.io/v1alpha1/gpuclasses"

APP_VERSION = load_yaml(CHART / "Chart.yaml")["appVersion"]
KUBECTL_TAG = load_yaml(CHART / "values.yaml")["cleanupHook"]["image"]["tag"]
DIGEST = "sha256:" + "a" * 64
SELECTOR = {
    component: {
        "app.kubernetes.io/name": "gpuclass",
        "app.kubernetes.io/instance": "gpuclass",
        "app.kubernetes.io/component": component,
    }
    for component in ("webhook", "reconciler")
}


def _images(objects: list[RawObject]) -> dict[str, str]:
    """Container name -> image, over every workload (the cleanup hook Job included)."""
    return {c["name"]: c["image"] for w in workloads(objects) for c in containers(w)}


def _refused(values: dict[str, Any]) -> None:
    """values.schema.json refuses `values`, at the value given: the error names its path down to
    the second level (`/webhook/pdb`), or the first where the values set two keys side by side
    (deeper paths differ by keyword: a missing property is reported on its parent)."""
    path, level = "", values
    for _ in range(2):
        if not isinstance(level, dict) or len(level) != 1:
            break
        [(key, level)] = level.items()
        path += f"/{key}"
    assert path, "give the refused value under one top-level key"
    with pytest.raises(helm.HelmValuesError) as info:
        render(values)
    message = str(info.value)
    assert "don't meet the specifications of the schema" in message, message
    assert f"at '{path}" in message, message


# ---------------------------------------------------------------------------------------------
# global.imageRegistry


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {},
            {
                "webhook": f"ghcr.io/cozystack/gpuclass-webhook:{APP_VERSION}",
                "reconciler": f"ghcr.io/cozystack/gpuclass-reconciler:{APP_VERSION}",
                "delete-webhook-configurations": f"registry.k8s.io/kubectl:{KUBECTL_TAG}",
            },
            id="no-registry-keeps-each-image",
        ),
        pytest.param(
            {"global": {"imageRegistry": "mirror.example.com"}},
            {
                "webhook": f"mirror.example.com/cozystack/gpuclass-webhook:{APP_VERSION}",
                "reconciler": f"mirror.example.com/cozystack/gpuclass-reconciler:{APP_VERSION}",
                "delete-webhook-configurations": f"mirror.example.com/kubectl:{KUBECTL_TAG}",
            },
            id="host-replaces-every-registry",
        ),
        pytest.param(
            {"global": {"imageRegistry": "harbor.example.com:8443/proxy/"}},
            {
                "webhook": f"harbor.example.com:8443/proxy/cozystack/gpuclass-webhook:{APP_VERSION}",
                "reconciler": (
                    f"harbor.example.com:8443/proxy/cozystack/gpuclass-reconciler:{APP_VERSION}"
                ),
                "delete-webhook-configurations": f"harbor.example.com:8443/proxy/kubectl:{KUBECTL_TAG}",
            },
            id="host-port-and-path",
        ),
        pytest.param(
            {
                "global": {"imageRegistry": "mirror.example.com"},
                "webhook": {"image": {"digest": DIGEST}},
                "reconciler": {"image": {"repository": "team/reconciler", "tag": "v2"}},
                "cleanupHook": {"image": {"repository": "localhost/kubectl"}},
            },
            {
                "webhook": f"mirror.example.com/cozystack/gpuclass-webhook@{DIGEST}",
                "reconciler": "mirror.example.com/team/reconciler:v2",
                "delete-webhook-configurations": f"mirror.example.com/kubectl:{KUBECTL_TAG}",
            },
            id="digest-no-host-and-localhost",
        ),
    ],
)
def test_global_image_registry_applies_to_every_image(
    values: dict[str, Any], expected: dict[str, str]
) -> None:
    assert _images(render_objects(values)) == expected


@pytest.mark.parametrize(
    "registry",
    [
        pytest.param("https://mirror.example.com", id="scheme"),
        pytest.param("Mirror.Example.com", id="upper-case"),
        pytest.param("mirror example", id="space"),
        pytest.param(5000, id="not-a-string"),
    ],
)
def test_schema_refuses_a_bad_registry(registry: Any) -> None:
    _refused({"global": {"imageRegistry": registry}})


def test_global_keeps_keys_of_a_parent_chart() -> None:
    """A parent chart's global keys we do not use are accepted by the schema and change nothing
    we render."""
    parent = render_objects({"global": {"storageClass": "fast", "imagePullSecrets": ["x"]}})
    assert parent == render_objects({})


# ---------------------------------------------------------------------------------------------
# affinity and topologySpreadConstraints

ZONE_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "node-role/infra", "operator": "Exists"}]}
            ]
        }
    },
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "topologyKey": "topology.kubernetes.io/zone",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "webhook"}},
            }
        ]
    },
}
NODE_AFFINITY = ZONE_AFFINITY["nodeAffinity"]


def _default_anti_affinity(component: str) -> dict[str, Any]:
    term = {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": SELECTOR[component]},
    }
    return {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}
        ]
    }


@pytest.mark.parametrize("component", ["webhook", "reconciler"])
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({}, lambda c: {"podAntiAffinity": _default_anti_affinity(c)}, id="default"),
        pytest.param(
            {"nodeAffinity": NODE_AFFINITY},
            lambda c: {"nodeAffinity": NODE_AFFINITY, "podAntiAffinity": _default_anti_affinity(c)},
            id="node-affinity-beside-the-default",
        ),
        pytest.param(
            {"affinity": ZONE_AFFINITY}, lambda c: ZONE_AFFINITY, id="full-affinity-as-is"
        ),
        pytest.param(
            {"affinity": ZONE_AFFINITY, "podAntiAffinity": "hard"},
            lambda c: ZONE_AFFINITY,
            id="full-affinity-wins-over-hard",
        ),
    ],
)
def test_affinity(component: str, values: dict[str, Any], expected: Any) -> None:
    objects = render_objects({component: values})
    assert pod_spec(deployment(objects, component))["affinity"] == expected(component)


CUSTOM_SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
    },
    {
        "maxSkew": 2,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"team": "gpu"}},
    },
]


@pytest.mark.parametrize("component", ["webhook", "reconciler"])
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {},
            lambda c: [
                {
                    "maxSkew": 1,
                    "topologyKey": key,
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "matchLabelKeys": ["pod-template-hash"],
                    "labelSelector": {"matchLabels": SELECTOR[c]},
                }
                for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
            ],
            id="default-zone-and-node",
        ),
        pytest.param({"topologySpread": False}, lambda c: None, id="off"),
        pytest.param(
            {"topologySpreadConstraints": CUSTOM_SPREAD, "topologySpread": True},
            lambda c: [
                {**CUSTOM_SPREAD[0], "labelSelector": {"matchLabels": SELECTOR[c]}},
                CUSTOM_SPREAD[1],  # its own selector is kept
            ],
            id="given-as-is-selector-filled-in",
        ),
    ],
)
def test_topology_spread_constraints(component: str, values: dict[str, Any], expected: Any) -> None:
    spec = pod_spec(deployment(render_objects({component: values}), component))
    assert spec.get("topologySpreadConstraints") == expected(component)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(
            {"webhook": {"affinity": ZONE_AFFINITY, "nodeAffinity": NODE_AFFINITY}}, id="both"
        ),
        pytest.param({"reconciler": {"affinity": {"nodeSelector": {"a": "b"}}}}, id="not-affinity"),
        pytest.param({"webhook": {"affinity": []}}, id="affinity-list"),
        pytest.param(
            {
                "webhook": {
                    "topologySpreadConstraints": [
                        {"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}
                    ]
                }
            },
            id="spread-without-key",
        ),
        pytest.param(
            {
                "reconciler": {
                    "topologySpreadConstraints": [
                        {**CUSTOM_SPREAD[0], "whenUnsatisfiable": "Never"}
                    ]
                }
            },
            id="spread-bad-policy",
        ),
        pytest.param(
            {"webhook": {"topologySpreadConstraints": [{**CUSTOM_SPREAD[0], "maxSkew": 0}]}},
            id="spread-zero-skew",
        ),
    ],
)
def test_schema_refuses_bad_scheduling(values: dict[str, Any]) -> None:
    _refused(values)


# ---------------------------------------------------------------------------------------------
# PodDisruptionBudgets never block a drain


def _disruptions_allowed(spec: dict[str, Any], replicas: int) -> int:
    """What the disruption controller allows with every replica healthy (policy/v1 rounding:
    a percentage of minAvailable rounds up, of maxUnavailable rounds up too)."""

    def count(value: int | str) -> int:
        if isinstance(value, str):
            return math.ceil(replicas * int(value.rstrip("%")) / 100)
        return value

    if "maxUnavailable" in spec:
        return min(replicas, count(spec["maxUnavailable"]))
    return max(0, replicas - count(spec["minAvailable"]))


PDB_CASES = [
    # component, replicas, pdb values, expected budget fields
    ("webhook", 2, {}, {"minAvailable": 1}),
    ("reconciler", 2, {}, {"minAvailable": 1}),
    ("reconciler", 1, {}, {"maxUnavailable": 1}),
    ("reconciler", 3, {"minAvailable": 2}, {"minAvailable": 2}),
    ("webhook", 2, {"minAvailable": 2}, {"maxUnavailable": 1}),
    ("webhook", 3, {"minAvailable": 5}, {"maxUnavailable": 1}),
    ("webhook", 3, {"minAvailable": "100%"}, {"maxUnavailable": 1}),
    ("webhook", 4, {"minAvailable": "50%"}, {"minAvailable": "50%"}),
    ("reconciler", 1, {"maxUnavailable": 1}, {"maxUnavailable": 1}),
    ("webhook", 3, {"maxUnavailable": "34%"}, {"maxUnavailable": "34%"}),
    ("reconciler", 2, {"minAvailable": 2, "maxUnavailable": 1}, {"maxUnavailable": 1}),
]


@pytest.mark.parametrize(
    ("component", "replicas", "pdb", "expected"),
    [pytest.param(*case, id=f"{case[0]}-{case[1]}-{case[2] or 'default'}") for case in PDB_CASES],
)
def test_pdb_is_drain_safe(
    component: str, replicas: int, pdb: dict[str, Any], expected: dict[str, Any]
) -> None:
    objects = render_objects({component: {"replicas": replicas, "pdb": pdb}})
    [budget] = [
        b
        for b in of_kind(objects, "PodDisruptionBudget")
        if b["spec"]["selector"]["matchLabels"] == SELECTOR[component]
    ]
    fields = {k: v for k, v in budget["spec"].items() if k in {"minAvailable", "maxUnavailable"}}
    assert fields == expected
    assert _disruptions_allowed(budget["spec"], replicas) >= 1  # a drain can always proceed


@pytest.mark.parametrize(
    "pdb",
    [
        pytest.param({"maxUnavailable": 0}, id="max-zero"),
        pytest.param({"maxUnavailable": "0%"}, id="max-zero-percent"),
        pytest.param({"maxUnavailable": "150%"}, id="max-over-100"),
        pytest.param({"minAvailable": "101%"}, id="min-over-100"),
        pytest.param({"maxUnavailable": "one"}, id="max-word"),
        pytest.param({"minAvailable": -1}, id="min-negative"),
    ],
)
def test_schema_refuses_bad_budgets(pdb: dict[str, Any]) -> None:
    _refused({"reconciler": {"pdb": pdb}})


# ---------------------------------------------------------------------------------------------
# PodMonitor


def test_pod_monitors_scrape_the_pods_under_the_alerts_job_names() -> None:
    objects = render_objects(
        {"monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    )
    assert not of_kind(objects, "ServiceMonitor")
    alerts = (CHART / "files" / "alerts.yaml").read_text()
    monitors = of_kind(objects, "PodMonitor")
    assert len(monitors) == 2
    for component, scheme in (("webhook", "https"), ("reconciler", "http")):
        workload = deployment(objects, component)
        labels = workload["spec"]["template"]["metadata"]["labels"]
        [monitor] = [
            m for m in monitors if selector_matches(m["spec"]["selector"]["matchLabels"], labels)
        ]
        assert monitor["metadata"]["labels"]["release"] == "prom"
        assert monitor["spec"]["namespaceSelector"] == {
            "matchNames": [workload["metadata"]["namespace"]]
        }
        [endpoint] = monitor["spec"]["podMetricsEndpoints"]
        [container] = pod_spec(workload)["containers"]
        assert endpoint["port"] in {p["name"] for p in container["ports"]}
        assert (endpoint["scheme"], endpoint["path"]) == (scheme, paths.METRICS)
        [relabel] = endpoint["relabelings"]
        job = f"gpuclass-{component}"
        assert relabel == {"action": "replace", "targetLabel": "job", "replacement": job}
        assert f'job="{job}"' in alerts
        if component == "webhook":
            # mode "webhook": the Secret the webhook keeps, whose ca.crt is its trust bundle
            assert endpoint["tlsConfig"]["ca"]["secret"] == {
                "name": one(objects, "Secret")["metadata"]["name"],
                "key": "ca.crt",
            }
            assert endpoint["tlsConfig"]["serverName"] == "gpuclass-webhook.cozy-system.svc"
        else:
            assert "tlsConfig" not in endpoint


def test_pod_and_service_monitors_are_exclusive() -> None:
    both = {"monitoring": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}}}
    with pytest.raises(helm.HelmError, match="enable one of them"):
        render(both)


def test_schema_refuses_a_bad_pod_monitor_interval() -> None:
    _refused({"monitoring": {"podMonitor": {"enabled": True, "interval": "30 seconds"}}})


# ---------------------------------------------------------------------------------------------
# the CRD outside the chart


def test_crd_install_false_renders_everything_but_the_crd() -> None:
    def keys(objects: list[RawObject]) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in objects}

    with_crd, without = render_objects(), render_objects({"crd": {"install": False}})
    assert keys(with_crd) - keys(without) == {
        ("CustomResourceDefinition", "gpuclasses.cozystack.io")
    }
    assert keys(without) <= keys(with_crd)


def test_the_crd_file_is_plain_yaml_for_those_who_apply_it_themselves() -> None:
    text = (CHART / "templates" / "crd-gpuclass.yaml").read_text()
    templated = [line for line in text.splitlines() if "{{" in line]
    assert templated and all(line.startswith("# {{") for line in templated)
    [crd] = [doc for doc in yaml.safe_load_all(text) if doc]
    assert crd["kind"] == "CustomResourceDefinition"
    assert one(render_objects(), "CustomResourceDefinition") == crd


def test_schema_refuses_a_non_boolean_crd_toggle() -> None:
    _refused({"crd": {"install": "no"}})


# ---------------------------------------------------------------------------------------------
# read-only catalog role

AGGREGATION = {
    "rbac.authorization.k8s.io/aggregate-to-view": "true",
    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
}
TENANTS = [{"kind": "Group", "name": "tenants", "apiGroup": "rbac.authorization.k8s.io"}]


def test_reader_role_is_aggregated_read_only_access_to_gpuclasses() -> None:
    objects = render_objects()
    role = one(objects, "ClusterRole", "gpuclass-reader")
    assert AGGREGATION.items() <= role["metadata"]["labels"].items()
    assert role["rules"] == [
        {
            "apiGroups": ["cozystack.io"],
            "resources": ["gpuclasses"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    bindings = [
        b
        for b in of_kind(objects, "ClusterRoleBinding")
        if b["roleRef"]["name"] == "gpuclass-reader"
    ]
    assert not bindings  # nobody is bound until the hoster names subjects


def test_reader_role_subjects_get_a_cluster_role_binding() -> None:
    objects = render_objects({"rbac": {"gpuclassReader": {"subjects": TENANTS}}})
    binding = one(objects, "ClusterRoleBinding", "gpuclass-reader")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpuclass-reader",
    }
    assert binding["subjects"] == TENANTS


def test_reader_role_can_be_left_out() -> None:
    objects = render_objects({"rbac": {"gpuclassReader": {"create": False, "subjects": TENANTS}}})
    assert not [o for o in objects if o["metadata"]["name"] == "gpuclass-reader"]


@pytest.mark.parametrize(
    "subjects",
    [
        pytest.param([{"kind": "Role", "name": "x"}], id="kind-role"),
        pytest.param([{"kind": "Group"}], id="nameless"),
        pytest.param([{"kind": "User", "name": "a", "verbs": ["*"]}], id="unknown-key"),
    ],
)
def test_schema_refuses_bad_reader_subjects(subjects: list[dict[str, Any]]) -> None:
    _refused({"rbac": {"gpuclassReader": {"subjects": subjects}}})


# ---------------------------------------------------------------------------------------------
# everything at once still validates against the Kubernetes schemas

ALL_ON = {
    "global": {"imageRegistry": "mirror.example.com"},
    "crd": {"install": False},
    "webhook": {
        "affinity": ZONE_AFFINITY,
        "topologySpreadConstraints": CUSTOM_SPREAD,
        "pdb": {"maxUnavailable": "50%"},
    },
    "reconciler": {
        "replicas": 1,
        "nodeAffinity": NODE_AFFINITY,
        "topologySpreadConstraints": CUSTOM_SPREAD,
    },
    "rbac": {"gpuclassReader": {"subjects": TENANTS}},
    "monitoring": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
}


@pytest.mark.parametrize("version", ["1.30.0", "1.36.0"])
def test_every_option_at_once_renders_valid_objects(version: str) -> None:
    checked = 0
    for obj in render_objects(ALL_ON):
        if obj["apiVersion"].startswith(("monitoring.coreos.com/", "cilium.io/")):
            continue  # CRD-typed: no schema in kubernetes-validate
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {error.message}")
        checked += 1
    assert checked >= 20


def test_helm_lint_is_clean_with_every_option() -> None:
    report = helm.lint(str(CHART), ALL_ON, strict=True, namespace="cozy-system")
    assert not [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"]


@pytest.mark.controlplane
def test_reader_role_lets_bound_tenants_list_but_not_change_gpuclasses(
    control_plane: ControlPlane,
) -> None:
    group = unique_name("tenants")
    subjects = [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}]
    release = unique_name("rel")  # its own role and binding names on the shared API server
    objects = render_objects({"rbac": {"gpuclassReader": {"subjects": subjects}}}, release=release)
    reader = [o for o in objects if o["metadata"]["name"] == f"{release}-gpuclass-reader"]
    assert [o["kind"] for o in reader] == ["ClusterRole", "ClusterRoleBinding"]
    control_plane.admin.apply(reader)
    body = {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": unique_name("reader")},
        "spec": {
            "vendor": "example",
            "model": "m",
            "mode": "passthrough",
            "source": {"devicePlugin": {"resourceName": "example.com/reader"}},
        },
    }
    with control_plane.user(unique_name("alice"), [group]).api() as tenant:
        eventually(
            lambda: tenant.request("GET", GPUCLASSES).status_code == 200,
            timeout=10,
            what="the reader binding to take effect",
        )
        assert tenant.request("POST", GPUCLASSES, body=body).status_code == 403
    with control_plane.user(unique_name("mallory"), ["other"]).api() as stranger:
        assert stranger.request("GET", GPUCLASSES).status_code == 403
    for obj in reader:
        control_plane.admin.delete(obj)


def test_every_values_example_in_the_docs_renders() -> None:
    import re

    text = (CHART.parent.parent / "docs" / "chart-values.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(examples) >= 3
    for example in examples:
        assert render_objects(yaml.safe_load(example)), example
