"""The GPUClass resource as strict pydantic models: our CRD, so our types.

Wire names are camelCase aliases; unknown spec fields are refused (`extra=forbid`);
types are strict (`"2"`, `2.0` and `true` are not integers). Format rules that need
a good message (DNS names, quantities, tolerations) live in :mod:`shared.core.model.validation`,
which reports every cause with its path; these models describe the shape, and the
CRD schema in the chart is tested against them (tests/chart/test_crd.py).

Foreign objects (VMIs, Pods, Nodes) are never modelled here: they stay raw dicts.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

Mode = Literal["passthrough", "vgpu"]
Operator = Literal["Exists", "Equal"]
Effect = Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"]
FeatureType = Literal[1, 4]
ConditionStatus = Literal["True", "False", "Unknown"]


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
    )


class Toleration(_Strict):
    """A Pod-shaped toleration, copied verbatim onto class-based launcher pods."""

    key: str | None = None
    operator: Operator | None = None
    value: str | None = None
    effect: Effect | None = None
    toleration_seconds: int | None = None


NonEmpty = Annotated[str, Field(min_length=1)]


def _whole_number(value: object) -> object:
    # Literal[1, 4] alone accepts True and 1.0 (they compare equal); the CRD says integer.
    if type(value) is not int:
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


class DevicePlugin(_Strict):
    """`source.devicePlugin`: the extended resource (e.g. nvidia.com/GA102GL_A10) whose allocatable
    count on a node is this class's units there."""

    resource_name: NonEmpty


class Source(_Strict):
    """Where units come from. devicePlugin is the only supported source."""

    device_plugin: DevicePlugin


class License(_Strict):
    """`spec.license`: the platform license. `secretName` names the source Secret in the license
    namespace; `featureType` (1 or 4) becomes the copy's gridd.conf line (contract 5.4)."""

    secret_name: NonEmpty
    feature_type: Annotated[FeatureType, BeforeValidator(_whole_number)] = 1


class GPUClassSpec(_Strict):
    """`spec` of a GPUClass (contract section 5); cross-field rules (vgpu needs a profile,
    passthrough no license) are checked in :mod:`shared.core.model.validation`, not here."""

    display_name: str | None = None
    vendor: NonEmpty
    model: NonEmpty
    mode: Mode
    profile: NonEmpty | None = None
    memory: str | None = None
    max_count: int | None = Field(default=None, ge=1)
    source: Source
    license: License | None = None
    tolerations: list[Toleration] | None = None

    @property
    def resource_name(self) -> str:
        """The one resource this class counts, so callers need not walk `source.devicePlugin`."""
        return self.source.device_plugin.resource_name


class Condition(_Strict):
    """metav1.Condition."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int | None = None


class _Lenient(BaseModel):
    """Our own output read back: lenient, since it is never user input."""

    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, frozen=True)


class TaintNodes(_Lenient):
    """One untolerated taint key and how many of the `untolerated` nodes carry it."""

    key: str
    nodes: int


class Excluded(_Lenient):
    """Advertising nodes a VM of the class cannot use now, each under its first reason."""

    not_ready: int = 0
    cordoned: int = 0
    untolerated: int = 0
    no_free_units: int = 0
    no_virt_handler: int = 0
    virt_handler_not_ready: int = 0
    no_kubevirt_devices: int = Field(0, alias="noKubeVirtDevices")
    taints: list[TaintNodes] = Field(default_factory=list)
    other_taint_nodes: int = 0


class CapacityStatus(_Lenient):
    """Node counts that explain the figures (docs/contract.md 6.8)."""

    advertising: int = 0
    hosts: int = 0
    eligible: int = 0
    with_free: int = 0
    excluded: Excluded = Field(default_factory=Excluded)


class GPUClassStatus(_Lenient):
    """What the reconciler writes. Read leniently: it is our output, not user input."""

    free: int = 0
    max_free_per_node: int = 0
    max_units_per_node: int = 0
    capacity: CapacityStatus | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


IDENTITY_FIELDS: tuple[str, ...] = ("vendor", "model", "mode", "profile", "memory")
"""Spec fields that identify an offer and are immutable (contract section 5)."""
