"""`gpuclass plan` output: text (the default), json (docs/contract.md section 7), markdown (a
pull-request comment) and github (workflow annotations on the manifest lines).

Every format renders the same :class:`Plan` value; none computes anything. Every string in a
plan that our code did not write (class names, spec keys and file names from the pull request,
VM names and device names from tenants, messages quoting them) goes through the escaping
function of its format (:mod:`shared.cli.escape`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from gpuclass.shared.cli.escape import guard_lines, json_text, md_code, md_fence, md_text, text
from gpuclass.shared.cli.lintformat import workflow_command
from gpuclass.shared.cli.plan import ClassPlan, InventoryEntry, Plan, VMPlan

PlanFormat = Literal["text", "json", "markdown", "github"]
PLAN_FORMATS: tuple[PlanFormat, ...] = ("text", "json", "markdown", "github")
SCHEMA_VERSION = 1
SIGN = {"added": "+", "changed": "~", "removed": "-", "unchanged": "="}


def render_plan(plan: Plan, fmt: PlanFormat) -> str:
    """The plan in one of :data:`PLAN_FORMATS`."""
    if fmt == "json":
        return json_text(plan_value(plan)) + "\n"
    if fmt == "markdown":
        return _markdown(plan)
    if fmt == "github":
        return _github(plan)
    return _text(plan)


def plan_value(plan: Plan) -> dict[str, Any]:
    """The stable JSON document (schema version 1, documented in docs/contract.md section 7)."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "summary": plan.summary(),
        "classes": [_class_value(c) for c in plan.classes],
        "vms": [_vm_value(v) for v in plan.vms],
        "inventory": [_inventory_value(e) for e in plan.inventory],
    }


def _class_value(c: ClassPlan) -> dict[str, Any]:
    return {
        "name": c.name,
        "change": c.change,
        "source": c.source,
        "line": c.line,
        "fields": list(c.fields),
        "refused": list(c.refused),
        "advice": c.advice,
        "warnings": list(c.warnings),
        "before": c.before,
        "after": c.after,
        "capacityDelta": c.capacity_delta,
        "runningVMIs": list(c.running),
        "runningEffect": c.running_effect,
    }


def _vm_value(v: VMPlan) -> dict[str, Any]:
    return {
        "namespace": v.namespace,
        "name": v.name,
        "impact": v.impact,
        "classes": list(v.classes),
        "causes": list(v.causes),
        "detail": v.detail,
    }


def _inventory_value(e: InventoryEntry) -> dict[str, Any]:
    return {
        "kind": e.kind,
        "namespace": e.namespace,
        "name": e.name,
        "device": e.device,
        "classes": list(e.classes),
    }


def summary_line(plan: Plan) -> str:
    """One line a reviewer can trust: the figures of :meth:`Plan.summary`."""
    s = plan.summary()
    return (
        f"Plan: {s['classesChanged']} class(es) changed, {s['changesRefused']} refused; "
        f"{s['vmStartsRefused']} VM start(s) refused, {s['vmStartsChanged']} changed; "
        f"{s['runningVMIsAffected']} running VMI(s) on changed classes; "
        f"capacity +{s['unitsGained']} / -{s['unitsLost']} free units."
    )


def _conditions(status: Mapping[str, Any] | None) -> dict[str, str]:
    return {
        text(c.get("type")): text(c.get("reason") or c.get("status"))
        for c in (status or {}).get("conditions") or []
    }


def _status_lines(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[str]:
    """Figures as `name before -> after`, then each condition whose reason differs."""
    figures = [
        f"{k} {text((before or {}).get(k, '-'))} -> {text((after or {}).get(k, '-'))}"
        for k in ("free", "maxFreePerNode", "maxUnitsPerNode")
        if k in (before or {}) or k in (after or {})
    ]
    lines = [", ".join(figures)] if figures else []
    if before is None or after is None:
        return lines  # an added or removed class: its figures say it all
    was, will = _conditions(before), _conditions(after)
    for kind in sorted(set(was) | set(will)):
        if was.get(kind) != will.get(kind):
            lines.append(f"{kind}: {was.get(kind, '-')} -> {will.get(kind, '-')}")
    return lines


def _class_lines(c: ClassPlan) -> list[str]:
    head = f"{SIGN[c.change]} {text(c.name)}: {c.change}"
    if c.fields:
        head += f" ({', '.join('spec.' + text(f) for f in c.fields)})"
    lines = [head]
    for reason in c.refused:
        lines.append(f"    REFUSED {text(reason)}")
    if c.advice:
        lines.append(f"    advice: {text(c.advice)}")
    for warning in c.warnings:
        lines.append(f"    warning: {text(warning)}")
    lines += [f"    {line}" for line in _status_lines(c.before, c.after)]
    if c.running:
        shown = ", ".join(text(r) for r in c.running[:10]) + (
            f" and {len(c.running) - 10} more" if len(c.running) > 10 else ""
        )
        lines.append(f"    VMIs holding it: {shown}")
        if c.running_effect:
            lines.append(f"    they {text(c.running_effect)}")
    return lines


def _vm_line(v: VMPlan) -> list[str]:
    what = "next start REFUSED" if v.impact == "start-refused" else "next start changes"
    classes = ", ".join(text(c) for c in v.classes)
    lines = [f"  {text(v.namespace)}/{text(v.name)} ({classes}): {what}"]
    lines += [f"    {text(cause)}" for cause in v.causes]
    if v.detail:
        lines.append(f"    {text(v.detail)}")
    return lines


def _text(plan: Plan) -> str:
    lines: list[str] = []
    for c in plan.classes:
        if c.change == "unchanged" and c.before == c.after:
            continue
        lines += _class_lines(c)
    if plan.vms:
        lines.append("VirtualMachines, by tenant namespace:")
        for v in plan.vms:
            lines += _vm_line(v)
    if plan.inventory:
        lines.append("Raw device requests (move these tenants to a class):")
        for e in plan.inventory:
            offered = ", ".join(text(c) for c in e.classes) or "no class offers it"
            lines.append(
                f"  {text(e.kind)} {text(e.namespace)}/{text(e.name)}: {text(e.device)} -> {offered}"
            )
    lines.append(summary_line(plan))
    return guard_lines("\n".join(lines) + "\n")


def _markdown(plan: Plan) -> str:
    out = ["## gpuclass plan", "", f"**{summary_line(plan)}**", ""]
    changed = [c for c in plan.classes if c.change != "unchanged" or c.before != c.after]
    if changed:
        out += ["| class | change | refused | free before → after | running VMIs |",
                "|---|---|---|---|---|"]  # fmt: skip
        for c in changed:
            refused = "<br>".join(md_text(r) for r in c.refused) or "no"
            was, will = (c.before or {}).get("free", "-"), (c.after or {}).get("free", "-")
            free = f"{md_text(was)} → {md_text(will)}"
            out.append(
                f"| {md_code(c.name)} | {c.change} | {refused} | {free} | {len(c.running)} |"
            )
        out.append("")
    if plan.vms:
        out += ["### VirtualMachines", ""]
        for v in plan.vms:
            what = "next start **refused**" if v.impact == "start-refused" else "next start changes"
            reasons = "; ".join(v.causes) or v.detail
            out.append(f"- {md_code(f'{v.namespace}/{v.name}')}: {what}: {md_text(reasons)}")
        out.append("")
    if plan.inventory:
        out += ["### Raw device requests", ""]
        for e in plan.inventory:
            out.append(f"- {md_text(e.kind)} {md_code(f'{e.namespace}/{e.name}')}: "
                       f"{md_code(e.device)} → "
                       f"{', '.join(md_code(n) for n in e.classes) or 'no class offers it'}")  # fmt: skip
        out.append("")
    full = _text(plan).rstrip()
    fence = md_fence(full)
    out += ["<details><summary>Full plan</summary>", "", fence, full, fence,
            "", "</details>", ""]  # fmt: skip
    return "\n".join(out)


def _annotation(level: Literal["error", "warning", "notice"], c: ClassPlan, *, message: str) -> str:
    return workflow_command(
        level,
        message,
        file=c.source or None,
        line=c.line or None,
        title=f"gpuclass plan: {c.name}",
    )


def _github(plan: Plan) -> str:
    lines: list[str] = []
    for c in plan.classes:
        for reason in c.refused:
            advice = f" ({c.advice})" if c.advice else ""
            lines.append(_annotation("error", c, message=f"refused: {reason}{advice}"))
        if not c.refused and c.change != "unchanged":
            detail = " ".join(line.strip() for line in _class_lines(c)[1:])
            lines.append(_annotation("notice", c, message=f"{c.change}: {detail}".rstrip(": ")))
    for v in plan.vms:
        what = "next start refused" if v.impact == "start-refused" else "next start changes"
        reasons = "; ".join(v.causes) or v.detail
        lines.append(
            workflow_command(
                "warning", f"{v.namespace}/{v.name}: {what}: {reasons}", title="gpuclass plan"
            )
        )
    lines.append(workflow_command("notice", summary_line(plan), title="gpuclass plan"))
    return "".join(lines)  # each command ends its own line
