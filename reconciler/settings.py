"""Settings of `gpuclass-reconciler`: flags and `GPUCLASS_*` environment variables (docs/reconciler.md)."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from gpuclass.shared.runtime.settings import CommonSettings


class ReconcilerSettings(CommonSettings):
    port: int = Field(
        8080,
        ge=0,
        le=65535,
        description="HTTP port of /metrics, /healthz and /readyz (0: any free port)",
    )
    bind_address: str = Field("0.0.0.0", description="address to listen on")
    once: bool = Field(
        False, description="reconcile once, print the statuses and licence copies as JSON, and exit"
    )
    dry_run: bool = Field(
        False, description="compute and log what would be written, write nothing to the cluster"
    )
    leader_elect: bool = Field(
        True, description="hold a Lease so that one replica writes at a time"
    )
    leader_election_namespace: str | None = Field(
        None, description="namespace of the Lease (default: the licence namespace)"
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
    watch_timeout_seconds: int = Field(
        290, gt=0, description="server-side timeout of one watch request"
    )
    list_page_size: int = Field(500, gt=0, description="objects per list page (limit/continue)")
    objects_poll_seconds: float = Field(
        1.0, gt=0, description="how often --objects files are checked for changes"
    )

    def lease_namespace(self) -> str:
        return self.leader_election_namespace or self.licence_namespace

    def identity(self) -> str:
        return self.pod_name or f"{socket.gethostname()}_{os.getpid()}"
