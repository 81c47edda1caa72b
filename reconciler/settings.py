"""Settings of `gpuclass-reconciler`: flags and `GPUCLASS_*` environment variables (docs/reconciler.md)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Annotated, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from gpuclass.reconciler.state.resources import Scope
from gpuclass.shared.process.settings import CommonSettings


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """The worker's settings: whether tenants' namespaces need the vGPU label for a copy, where
    the copy record lives, the coalescing window, the re-list interval of a store that does not
    catch up, how long a deletion waits for a busy watch to bring the version it needs before
    re-listing, and a dry run (`api` records instead of sending: nothing is logged or counted as
    written, nothing waited for)."""

    vgpu_entitled: bool
    record_namespace: str
    coalesce_seconds: float = 0.2
    relist_interval: float = 10.0
    catch_up_seconds: float = 5.0
    dry_run: bool = False


class ReconcilerSettings(CommonSettings):
    """Keep every GPUClass status, license copy and in-use finalizer current."""

    port: int = Field(
        8080,
        ge=0,
        le=65535,
        description="HTTP port of /metrics, /healthz and /readyz (0: any free port)",
    )
    bind_address: str = Field("0.0.0.0", description="address to listen on")
    once: bool = Field(
        False, description="reconcile once, print the statuses and license copies as JSON, and exit"
    )
    dry_run: bool = Field(
        False, description="compute and log what would be written, write nothing to the cluster"
    )
    leader_elect: bool = Field(
        True, description="hold a Lease so that one replica writes at a time"
    )
    leader_election_namespace: str | None = Field(
        None, description="namespace of the Lease (default: the license namespace)"
    )
    leader_election_name: str = Field("gpuclass-reconciler", description="name of the Lease")
    lease_duration_seconds: float = Field(
        15.0, gt=0, description="how long a Lease is valid without renewal"
    )
    renew_deadline_seconds: float = Field(
        10.0, gt=0, description="a leader that cannot renew within this stops writing"
    )
    retry_period_seconds: float = Field(
        2.0, gt=0, description="how often the Lease is renewed or tried"
    )
    pod_name: str | None = Field(
        None, description="identity in the Lease and Events (default: hostname_pid)"
    )
    coalesce_seconds: float = Field(
        0.2, ge=0, description="events within this window are reconciled together"
    )
    catch_up_seconds: float = Field(
        5.0,
        ge=0,
        description="a deletion waits this long for a busy watch to bring the version it needs "
        "before that resource is re-listed (0: re-list at once)",
    )
    watch_timeout_seconds: int = Field(
        290, gt=0, description="server-side timeout of one watch request"
    )
    list_page_size: int = Field(500, gt=0, description="objects per list page (limit/continue)")
    relist_deadline_seconds: float = Field(
        120.0,
        gt=0,
        description="/readyz fails once a watched resource has gone this long without a complete list",
    )
    objects_poll_seconds: float = Field(
        1.0, gt=0, description="how often --objects files are checked for changes"
    )

    kube_api_qps: float = Field(
        20.0, ge=0, description="client-side limit on API requests per second (0: none)"
    )
    kube_api_burst: int = Field(30, gt=0, description="API requests allowed at once above the QPS")
    resync_seconds: float = Field(
        600.0, gt=0, description="every class is looked at again this often, changed or not"
    )
    license_secret_names: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="the license source Secrets to read, by name (comma-separated); unset: every "
        "Secret of the license namespace. The chart sets it, and grants reads of these names only",
        json_schema_extra={"metavar": "NAME,..."},
    )

    @field_validator("license_secret_names", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _lease_timings(self) -> Self:
        """client-go's rule (leaderelection.NewLeaderElector): a leader must stop writing
        before anyone may take over, and must get more than one renewal try in."""
        if not self.leader_elect:
            return self
        lease, renew, retry = (
            self.lease_duration_seconds,
            self.renew_deadline_seconds,
            self.retry_period_seconds,
        )
        if lease <= renew:
            raise ValueError(
                f"--lease-duration-seconds ({lease:g}) must be greater than "
                f"--renew-deadline-seconds ({renew:g})"
            )
        if renew <= 1.2 * retry:
            raise ValueError(
                f"--renew-deadline-seconds ({renew:g}) must be greater than 1.2 x "
                f"--retry-period-seconds ({retry:g}), i.e. more than {1.2 * retry:g}"
            )
        return self

    def lease_namespace(self) -> str:
        """The reconciler's own namespace: its Lease and its license-copy record live there."""
        return self.leader_election_namespace or self.license_namespace

    def scope(self) -> Scope:
        """What the scoped resources read (:class:`reconciler.state.resources.Scope`)."""
        names = self.license_secret_names
        return Scope(
            license_namespace=self.license_namespace,
            kubevirt_namespace=self.kubevirt_namespace,
            record_namespace=self.lease_namespace(),
            license_secret_names=None if names is None else frozenset(names),
        )

    def identity(self) -> str:
        """This replica's name as the Lease holder and the Events' reportingInstance: the Pod name,
        else host and PID, so two local runs never share one."""
        return self.pod_name or f"{socket.gethostname()}_{os.getpid()}"

    def worker_settings(self) -> WorkerSettings:
        """What the worker takes of these settings."""
        return WorkerSettings(
            vgpu_entitled=self.vgpu_entitled,
            record_namespace=self.lease_namespace(),
            coalesce_seconds=self.coalesce_seconds,
            catch_up_seconds=self.catch_up_seconds,
            dry_run=self.dry_run,
        )
