"""The chart's registration of the check after every mutation (docs/contract.md section 3 and 4.11).

Rendered by the real Helm engine. Expected values come from the contract's section 3 row and
docs/operations.md (scope, failurePolicy, its place for Break glass), not from the template.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from gpuclass.webhook import paths
from tests.chart.common import CERT_MANAGER, HELM_TLS
from tests.chart_helpers import of_kind, render_objects, webhook_for, webhooks

FINAL = "final-virtualmachineinstances.gpuclass.cozystack.io"
OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _validating(values: dict[str, Any] | None = None) -> dict[str, Any]:
    (configuration,) = of_kind(render_objects(values), "ValidatingWebhookConfiguration")
    return configuration


@pytest.mark.parametrize(
    "values", [{}, HELM_TLS, CERT_MANAGER], ids=["webhook-managed", "helm", "cert-manager"]
)
def test_the_check_sees_every_vmi_create_outside_kube_system_and_fails_closed(
    values: dict[str, Any],
) -> None:
    hook = webhook_for(render_objects(values), "virtualmachineinstances", paths.VALIDATE_VMIS)
    assert hook["name"] == FINAL
    assert hook["_kind"] == "ValidatingWebhookConfiguration"
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"] == [
        {
            "apiGroups": ["kubevirt.io"],
            "apiVersions": ["*"],
            "resources": ["virtualmachineinstances"],
            "operations": ["CREATE"],
            "scope": "Namespaced",
        }
    ]
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    # Every CREATE: no filter on the object (docs/operations.md says why).
    assert "matchConditions" not in hook and "objectSelector" not in hook


def test_the_check_and_the_mutating_vmi_webhook_see_the_same_vmis() -> None:
    """Same namespaces, same group and resource: whatever our mutation touches, the check sees."""
    objects = render_objects()
    final = webhook_for(objects, "virtualmachineinstances", paths.VALIDATE_VMIS)
    mutating = webhook_for(objects, "virtualmachineinstances", paths.MUTATE_VMIS)
    assert final["namespaceSelector"] == mutating["namespaceSelector"]
    assert final["rules"][0]["resources"] == mutating["rules"][0]["resources"]
    assert "CREATE" in mutating["rules"][0]["operations"]
    assert final["matchPolicy"] == mutating["matchPolicy"] == "Equivalent"


def _break_glass_patch() -> list[dict[str, Any]]:
    text = OPERATIONS_DOC.read_text()
    section = text[text.index("### Break glass") :]
    found = re.search(r"--type=json -p '(\[.*?\])'", section, flags=re.DOTALL)
    assert found, "docs/operations.md, Break glass, shows the JSON patch"
    patch: list[dict[str, Any]] = json.loads(found.group(1))
    return patch


def test_break_glass_removes_exactly_the_check_from_the_rendered_configuration() -> None:
    configuration = _validating()
    before = [h["name"] for h in configuration["webhooks"]]
    after = jsonpatch.apply_patch(configuration, _break_glass_patch())
    assert [h["name"] for h in after["webhooks"]] == [n for n in before if n != FINAL]


def test_break_glass_changes_nothing_when_the_place_holds_another_webhook() -> None:
    configuration = _validating()
    configuration["webhooks"].insert(0, configuration["webhooks"].pop())  # the check moved
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(configuration, _break_glass_patch())


def test_every_webhook_name_is_unique() -> None:
    names = [n for n in webhooks(render_objects())]
    assert FINAL in names and len(names) == len(set(names))
