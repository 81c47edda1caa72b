"""templates/cleanup-hook.yaml: before uninstall, delete exactly the two webhook configurations."""

from __future__ import annotations

from tests.chart_helpers import of_kind, one, pod_spec, render_objects


def test_cleanup_hook_deletes_exactly_the_webhook_configurations_before_uninstall() -> None:
    objects = render_objects()
    job = one(objects, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-delete"
    [container] = pod_spec(job)["containers"]
    mutating = one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    validating = one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert container["command"] == ["kubectl"]
    assert container["args"][0] == "delete"
    targets = [a for a in container["args"] if not a.startswith("-")][1:]
    assert targets == [
        f"mutatingwebhookconfiguration/{mutating}",
        f"validatingwebhookconfiguration/{validating}",
    ]
    role = one(objects, "ClusterRole", "gpuclass-cleanup")
    assert {(r["resources"][0], tuple(r["resourceNames"])) for r in role["rules"]} == {
        ("mutatingwebhookconfigurations", (mutating,)),
        ("validatingwebhookconfigurations", (validating,)),
    }
    assert all(set(r["verbs"]) <= {"get", "delete"} for r in role["rules"])
    # its account and rights exist before the Job runs (lower hook weight) and are hooks too
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        hook = one(objects, kind, "gpuclass-cleanup")["metadata"]["annotations"]
        assert hook["helm.sh/hook"] == "pre-delete"
        assert int(hook["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
    assert not of_kind(render_objects({"cleanupHook": {"enabled": False}}), "Job")
