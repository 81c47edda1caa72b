"""What the webhook's own certificate authority should do next: a pure plan, tested as data.

In the chart's default certificate mode the webhook keeps a CA and its serving certificate in one
Secret and keeps the `caBundle` of the chart's two webhook configurations current
(docs/operations.md, Certificates). This module decides, from facts only — the time, what the
Secret holds (already parsed into :class:`SecretState`) and which CAs each webhook's `caBundle`
carries — the one next step: write the bundles, change the Secret, or wait. The caller parses,
generates keys, writes and calls again until the answer is :class:`Wait`: level-based, so a crash
or a lost write race (another replica wrote first) is followed by a fresh read and a new plan.

The order of steps is what makes rotation safe for connections in flight:

1. A CA signs a serving certificate only once every `caBundle` carries it, and a CA that replaces
   another (next -> current) only after every bundle has carried it for `overlap`, so each
   kube-apiserver has seen it before any replica serves a certificate it signed.
   A current CA that has not signed what is served, while CAs on their way out are still in
   the bundles (a start over beside another certificate), waits `PROPAGATION` in every bundle
   before its first signature.
2. A replaced CA stays in the bundles ("retired") for another `overlap`, so replicas still serving
   the previous certificate stay trusted until they have loaded the new one.
3. CAs found in a bundle that are not ours (another certificate mode before this one, a hand edit)
   are adopted as retired: kept for one `overlap`, then dropped. The bundles are ours.

No clock, no randomness, no I/O here (docs/conventions.md rule 2): `now` comes in, decisions come
out as values. Parsing and key generation are in `webhook/certs/issue.py`.

Why one module of about 400 lines: the facts, the policy and the steps are one plan read top to
bottom; the helpers below `plan` are its clauses, and apart they would only be read together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

RotateRequest = Literal["", "ca", "certificate"]


@dataclass(frozen=True, slots=True)
class CertRef:
    """A CA certificate seen somewhere: its SHA-256 fingerprint, PEM text and validity end."""

    fingerprint: str
    pem: str
    not_after: datetime


@dataclass(frozen=True, slots=True)
class CAFacts:
    """A CA in the Secret whose certificate and key load and belong together."""

    cert: CertRef
    not_before: datetime


@dataclass(frozen=True, slots=True)
class ServingFacts:
    """The serving certificate in the Secret: whom it names, who signed it, when it ends.

    `issuer` is the fingerprint of the CA of the Secret whose signature verifies ("" when none
    does); `key_matches` says whether `tls.key` is this certificate's key.
    """

    not_before: datetime
    not_after: datetime
    issuer: str
    hosts: frozenset[str]
    key_matches: bool


@dataclass(frozen=True, slots=True)
class SecretState:
    """What the Secret holds, as facts. A slot whose data is missing or does not load is None."""

    current: CAFacts | None = None
    current_cert: CertRef | None = None
    """The current CA's certificate even when its key is lost (it may still sign what is served)."""
    next: CAFacts | None = None
    retired: tuple[CertRef, ...] = ()
    serving: ServingFacts | None = None
    next_trusted_at: datetime | None = None
    retire_after: datetime | None = None
    rotate: RotateRequest = ""
    current_trusted_at: datetime | None = None
    """Since when every bundle carries a current CA that has not signed yet (see PROPAGATION)."""


@dataclass(frozen=True, slots=True)
class BundleEntry:
    """One webhook's `caBundle`: the CAs it carries; `clean` is False when some of it did not
    parse (it is then rewritten)."""

    certs: tuple[CertRef, ...] = ()
    clean: bool = True


ConfigurationKey = tuple[str, str]
"""A webhook configuration as (kind, name): the chart gives the mutating and the validating
configuration the same name, so a name alone does not tell them apart."""

Bundles = Mapping[ConfigurationKey, Sequence[BundleEntry]]
"""Webhook configuration (kind, name) -> the `caBundle` of each of its webhooks, in order."""

PROPAGATION = timedelta(seconds=30)
"""How long a current CA that has never signed waits in the bundles before its first signature,
when something else may still be served (capped at the overlap; docs/decisions.md)."""

POLL_FACTOR = 3
"""The overlap must be at least this many polls (docs/decisions.md, Certificates)."""


@dataclass(frozen=True, slots=True)
class CertPolicy:
    """Lifetimes and margins (defaults and their reasons: docs/decisions.md, Certificates)."""

    ca_validity: timedelta
    ca_renew_before: timedelta
    cert_validity: timedelta
    cert_renew_before: timedelta
    overlap: timedelta
    hosts: frozenset[str]
    poll: timedelta = timedelta(0)
    """How often each replica reads the Secret and the bundles (0: not checked)."""

    def problems(self) -> list[str]:
        """Why these numbers cannot rotate safely (empty: they can)."""
        found = []
        if not self.cert_renew_before < self.cert_validity:
            found.append("the certificate must be renewed before it ends: renew-before < validity")
        if not self.ca_renew_before < self.ca_validity:
            found.append("the CA must be renewed before it ends: CA renew-before < CA validity")
        if not self.overlap * 2 < self.ca_renew_before:
            found.append("a CA rotation takes two overlaps: 2 x overlap < CA renew-before")
        if self.overlap < self.poll * POLL_FACTOR:
            found.append(
                f"a replica must see a new CA well within one overlap: "
                f"overlap >= {POLL_FACTOR} x poll interval"
            )
        if not self.hosts:
            found.append("the serving certificate needs at least one host name")
        return found


@dataclass(frozen=True, slots=True)
class WriteBundles:
    """Set every webhook's `caBundle` in these configurations to exactly `certs`, in order."""

    configurations: tuple[ConfigurationKey, ...]
    certs: tuple[CertRef, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class UpdateSecret:
    """Change the Secret; the caller makes keys where asked and writes it in one update.

    Applied in this order: `promote` (next becomes current, the old current's certificate is
    retired), `new_ca` (a fresh CA into that slot), `issue_certificate` (a serving certificate
    signed by the resulting current CA, ending at `not_after` or the CA's end, whichever is
    first). `retired`, `next_trusted_at` and `retire_after` are the values to store; a rotation
    request annotation is cleared when `clear_rotate` says this step answers it.
    """

    reason: str
    new_ca: Literal["", "current", "next"] = ""
    promote: bool = False
    issue_certificate: bool = False
    retired: tuple[CertRef, ...] = ()
    next_trusted_at: datetime | None = None
    retire_after: datetime | None = None
    drop_next: bool = False
    clear_rotate: bool = False
    current_trusted_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do until `until` (None: until something changes)."""

    until: datetime | None


Step = WriteBundles | UpdateSecret | Wait


def trusted_set(state: SecretState, now: datetime) -> tuple[CertRef, ...]:
    """The CAs every bundle should carry now: current, next, and retired ones whose time is not
    over (a retired CA is kept while the serving certificate is not yet signed by current)."""
    certs: list[CertRef] = []
    if state.current is not None:
        certs.append(state.current.cert)
    elif state.current_cert is not None and state.current_cert.not_after > now:
        certs.append(state.current_cert)
    if state.next is not None:
        certs.append(state.next.cert)
    if _keeps_retired(state, now):
        certs.extend(c for c in state.retired if c.not_after > now)
    return _unique(certs)


def plan(state: SecretState, bundles: Bundles, *, now: datetime, policy: CertPolicy) -> Step:
    """The next step toward a Secret and bundles that need nothing before the next deadline."""
    if state.current is not None and state.current.cert.not_after <= now:
        state = replace(state, current=None, current_cert=None)  # an ended CA signs nothing
    ours = {c.fingerprint for c in _all_ours(state)}
    foreign = _unique(
        c
        for entries in bundles.values()
        for entry in entries
        for c in entry.certs
        if c.fingerprint not in ours and c.not_after > now
    )
    serving_valid = state.serving is not None and state.serving.not_after > now
    if state.current is None and not serving_valid:
        # Nothing is being served from this Secret: start over at once (first install, data lost).
        retired = _unique([*_parseable_current(state), *state.retired, *foreign])
        return UpdateSecret(
            "no usable CA and no valid serving certificate: a new CA",
            new_ca="current",
            drop_next=True,
            retired=retired,
            retire_after=max(_after(state.retire_after, now), now + policy.overlap)
            if retired
            else None,
        )
    if foreign:
        return UpdateSecret(
            "CAs in the bundles that are not ours are kept for one overlap, then dropped",
            retired=_unique([*state.retired, *foreign]),
            retire_after=max(_after(state.retire_after, now), now + policy.overlap),
            next_trusted_at=state.next_trusted_at,
        )
    if state.next is not None and state.next_trusted_at is not None:
        upcoming = state.next.cert.fingerprint
        if not all(
            upcoming in {c.fingerprint for c in entry.certs}
            for entries in bundles.values()
            for entry in entries
        ):
            # A bundle lost the next CA (a hand edit): its overlap starts again once it is back.
            return UpdateSecret(
                "a bundle no longer carries the next CA: its overlap starts again",
                retired=state.retired,
                retire_after=state.retire_after,
            )
    wanted = trusted_set(state, now)
    stale = tuple(key for key, entries in bundles.items() if not _carries(entries, wanted))
    if stale:
        return WriteBundles(stale, wanted, "the bundles must carry exactly the trusted CAs")
    return _secret_step(state, now=now, policy=policy)


def _secret_step(state: SecretState, *, now: datetime, policy: CertPolicy) -> Step:
    if state.current is not None and _certificate_due(state, state.current, now=now, policy=policy):
        if _must_propagate(state):
            # A fresh CA while another's certificate may still be served (the move from another
            # certificate mode, an emptied Secret): the API servers get a moment to see the
            # bundles before a certificate only the new bundles trust is served.
            if state.current_trusted_at is None:
                return UpdateSecret(
                    "every bundle carries the new CA: it signs once the API servers have them",
                    current_trusted_at=now,
                    next_trusted_at=state.next_trusted_at,
                    retired=state.retired,
                    retire_after=state.retire_after,
                )
            signs_at = state.current_trusted_at + _propagation(policy)
            if now < signs_at:
                return Wait(signs_at)
        return UpdateSecret(
            _certificate_reason(state, state.current, policy=policy),
            issue_certificate=True,
            next_trusted_at=state.next_trusted_at,
            clear_rotate=state.rotate == "certificate",
            retired=state.retired,
            retire_after=state.retire_after,
        )
    if state.next is not None and state.next_trusted_at is None:
        return UpdateSecret(
            "every bundle carries the next CA: its overlap starts now",
            next_trusted_at=now,
            retired=state.retired,
            retire_after=state.retire_after,
        )
    if state.next is not None and state.next_trusted_at is not None:
        if now >= state.next_trusted_at + policy.overlap:
            return UpdateSecret(
                "the next CA has been trusted for one overlap: it signs from now on",
                promote=True,
                issue_certificate=True,
                clear_rotate=state.rotate == "ca",
                retired=_unique([*state.retired, *_parseable_current(state)]),
                retire_after=now + policy.overlap,
            )
    elif _ca_due(state, now, policy=policy):
        return UpdateSecret(
            "rotation requested"
            if state.rotate == "ca"
            else "the CA is within its renewal window: a next CA",
            new_ca="next",
            clear_rotate=state.rotate == "ca",
            retired=state.retired,
            retire_after=state.retire_after,
        )
    if state.retired and not _keeps_retired(state, now):
        return UpdateSecret(
            "the retired CAs' overlap is over and the bundles no longer carry them",
            next_trusted_at=state.next_trusted_at,
        )
    return Wait(_next_deadline(state, policy))


def _propagation(policy: CertPolicy) -> timedelta:
    return min(policy.overlap, PROPAGATION)


def _must_propagate(state: SecretState) -> bool:
    """The current CA has not signed what is served, and CAs on their way out may still sign
    something that is served (none on a first install: nothing to wait for)."""
    current = state.current
    if current is None or not state.retired:
        return False
    return state.serving is None or state.serving.issuer != current.cert.fingerprint


def _certificate_due(state: SecretState, ca: CAFacts, *, now: datetime, policy: CertPolicy) -> bool:
    serving = state.serving
    if serving is None or state.rotate == "certificate":
        return True
    if not serving.key_matches or serving.issuer != ca.cert.fingerprint:
        return True
    if not policy.hosts <= serving.hosts:
        return True
    if serving.not_after - now > policy.cert_renew_before:
        return False
    # A certificate already ending with its CA cannot be improved by signing another one.
    return serving.not_after < ca.cert.not_after


def _certificate_reason(state: SecretState, ca: CAFacts, *, policy: CertPolicy) -> str:
    serving = state.serving
    if serving is None:
        return "no usable serving certificate"
    if state.rotate == "certificate":
        return "rotation requested"
    if serving.issuer != ca.cert.fingerprint or not serving.key_matches:
        return "the serving certificate is not the current CA's, or not its key's"
    if not policy.hosts <= serving.hosts:
        return "the serving certificate does not name every host"
    return "the serving certificate is within its renewal window"


def _ca_due(state: SecretState, now: datetime, *, policy: CertPolicy) -> bool:
    if state.current is None or state.rotate == "ca":
        return True  # the key is lost but a certificate is still served: replace with overlap
    return state.current.cert.not_after - now <= policy.ca_renew_before


def _keeps_retired(state: SecretState, now: datetime) -> bool:
    """Retired CAs stay until their time is over and the served certificate is current's."""
    if state.retire_after is None or now < state.retire_after:
        return True
    current = state.current
    return (
        current is None or state.serving is None or state.serving.issuer != current.cert.fingerprint
    )


def _next_deadline(state: SecretState, policy: CertPolicy) -> datetime | None:
    """When a step will be due: the deadlines of steps that are not waiting on something else."""
    times: list[datetime] = []
    current, serving = state.current, state.serving
    if current is not None and state.next is None:
        times.append(current.cert.not_after - policy.ca_renew_before)
    if current is not None and serving is not None and serving.not_after < current.cert.not_after:
        times.append(serving.not_after - policy.cert_renew_before)
    if state.next is not None and state.next_trusted_at is not None:
        times.append(state.next_trusted_at + policy.overlap)
    if state.retired and state.retire_after is not None:
        times.append(state.retire_after)
    return min(times) if times else None


def _carries(entries: Sequence[BundleEntry], wanted: tuple[CertRef, ...]) -> bool:
    want = [c.fingerprint for c in wanted]
    return all(entry.clean and [c.fingerprint for c in entry.certs] == want for entry in entries)


def _all_ours(state: SecretState) -> list[CertRef]:
    found = list(_parseable_current(state))
    if state.next is not None:
        found.append(state.next.cert)
    return [*found, *state.retired]


def _parseable_current(state: SecretState) -> tuple[CertRef, ...]:
    if state.current is not None:
        return (state.current.cert,)
    return (state.current_cert,) if state.current_cert is not None else ()


def _after(value: datetime | None, now: datetime) -> datetime:
    return value if value is not None else now


def _unique(certs: Iterable[CertRef]) -> tuple[CertRef, ...]:
    seen: dict[str, CertRef] = {}
    for cert in certs:
        seen.setdefault(cert.fingerprint, cert)
    return tuple(seen.values())
