"""Rendering the charts with the real Helm engine (helm-python-sdk, import name `helm_python`).

Tests get plain data back: the rendered objects as dicts, with small accessors for the few paths
they check. Nothing here asserts; the test modules do.

`lookup` returns nothing offline, so the self-managed certificate branch that reuses existing
Secrets cannot be reached by a plain render. `chart_with_existing_tls_secret` copies the chart and
swaps the single line of `gpuclass.webhook.existingSecret` that calls `lookup` for a read of a
file holding the Secret of that name, leaving every other line of the chart as it is.
"""

from __future__ import annotations

import base64
import functools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "gpuclass"
SELECTION_LIBRARY = ROOT / "charts" / "gpuclass-selection"
SELECTION_FIXTURE = ROOT / "tests" / "fixtures" / "selection-chart"
NAMESPACE = "cozy-system"
RELEASE = "gpuclass"

RawObject = dict[str, Any]

_LOOKUP_LINE = '{{- lookup "v1" "Secret" .root.Release.Namespace .name | toYaml -}}'


def render(
    values: dict[str, Any] | None = None,
    *,
    chart: Path = CHART,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would produce it.

    Renders are memoised per (values, chart, release, namespace): tests read them, never change
    them, and the chart renders dozens of times with the same values otherwise.
    """
    return dict(_render(json.dumps(values or {}, sort_keys=True), str(chart), release, namespace))


@functools.cache
def _render(values: str, chart: str, release: str, namespace: str) -> tuple[tuple[str, str], ...]:
    with helm.Chart.load(chart) as loaded:
        return tuple(loaded.render(json.loads(values), name=release, namespace=namespace).items())


def documents(manifests: dict[str, str], *, template: str | None = None) -> list[RawObject]:
    """The Kubernetes objects of a render (NOTES.txt and empty documents dropped)."""
    found: list[RawObject] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        if template is not None and not path.endswith(f"/templates/{template}"):
            continue
        found.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return found


def render_objects(values: dict[str, Any] | None = None, **kwargs: Any) -> list[RawObject]:
    return documents(render(values, **kwargs))


def of_kind(objects: list[RawObject], kind: str) -> list[RawObject]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[RawObject], kind: str, name: str | None = None) -> RawObject:
    """The single object of `kind` (and `name`); raises when there are none or several."""
    matches = [o for o in of_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    if len(matches) != 1:
        raise LookupError(f"expected one {kind} {name or ''}, found {len(matches)}")
    return matches[0]


def pod_spec(obj: RawObject) -> RawObject:
    spec: RawObject = obj["spec"]["template"]["spec"]
    return spec


def containers(obj: RawObject) -> Iterator[RawObject]:
    """Every container (init containers included) of a Pod-template-bearing object."""
    spec = pod_spec(obj)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def workloads(objects: list[RawObject]) -> list[RawObject]:
    return [o for o in objects if o["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}]


def deployment(objects: list[RawObject], component: str) -> RawObject:
    matches = [
        o
        for o in of_kind(objects, "Deployment")
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    if len(matches) != 1:
        raise LookupError(f"expected one {component} Deployment, found {len(matches)}")
    return matches[0]


def webhooks(objects: list[RawObject]) -> dict[str, RawObject]:
    """Webhook name -> webhook entry, over both webhook configurations."""
    found: dict[str, RawObject] = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for configuration in of_kind(objects, kind):
            for hook in configuration["webhooks"]:
                found[hook["name"]] = {**hook, "_kind": kind}
    return found


def webhook_for(objects: list[RawObject], resource: str, path: str | None = None) -> RawObject:
    """The webhook whose rules name `resource` (e.g. "pods"), and whose service path is `path`
    when given (Pods have two: /mutate/pods and /validate/pods)."""
    matches = [
        hook
        for hook in webhooks(objects).values()
        if any(resource in rule["resources"] for rule in hook["rules"])
        and (path is None or hook["clientConfig"].get("service", {}).get("path") == path)
    ]
    if len(matches) != 1:
        raise LookupError(f"expected one webhook for {resource}, found {len(matches)}")
    return matches[0]


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def copy_chart(destination: Path) -> Path:
    target = destination / "gpuclass"
    shutil.copytree(CHART, target)
    return target


def chart_with_existing_tls_secret(destination: Path, *secrets: RawObject | None) -> Path:
    """A copy of the chart whose `lookup` of a Secret returns the one of that name in `secrets`.

    A name not among them (or None) is looked up as absent.
    """
    chart = copy_chart(destination)
    helpers = chart / "templates" / "_tls.tpl"
    text = helpers.read_text()
    if text.count(_LOOKUP_LINE) != 1:
        raise AssertionError("templates/_tls.tpl no longer has the single lookup line to swap")
    read = '{{- .root.Files.Get (printf "existing-secrets/%s.yaml" .name) -}}'
    helpers.write_text(text.replace(_LOOKUP_LINE, read))
    folder = chart / "existing-secrets"
    folder.mkdir()
    for secret in secrets:
        if secret:
            (folder / f"{secret['metadata']['name']}.yaml").write_text(yaml.safe_dump(secret))
    return chart


def selection_chart(destination: Path, *, with_schema: bool = True) -> Path:
    """The selection test chart with the library vendored into charts/, as `helm dep build` would."""
    chart = destination / "selection-chart"
    shutil.copytree(SELECTION_FIXTURE, chart)
    shutil.copytree(SELECTION_LIBRARY, chart / "charts" / "gpuclass-selection")
    if not with_schema:
        (chart / "values.schema.json").unlink()
    return chart


def flatten_keys(values: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every leaf (and empty map) in a values tree."""
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from flatten_keys(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def chart_webhook_configurations(url: str, ca_pem: bytes) -> list[RawObject]:
    """The chart's two webhook configurations, rendered by Helm, with only each hook's
    `clientConfig` pointed at `url` + the path it already names."""
    objects = documents(render(), template="webhook-configurations.yaml")
    for configuration in objects:
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": url + path,
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
    return objects


def webhook_identity() -> tuple[str, list[str]]:
    """The user name and groups the chart's webhook ServiceAccount authenticates as, read from
    the chart's ClusterRoleBinding, so a test acts as exactly the account the chart binds."""
    binding = next(
        o
        for o in documents(render(), template="rbac-webhook.yaml")
        if o["kind"] == "ClusterRoleBinding"
    )
    subject = binding["subjects"][0]
    ns = subject["namespace"]
    return (
        f"system:serviceaccount:{ns}:{subject['name']}",
        ["system:serviceaccounts", f"system:serviceaccounts:{ns}"],
    )
