"""The rotation plan as data (docs/operations.md, Certificates; docs/decisions.md, Certificates).

Each row: what the Secret holds (as facts), what each webhook's caBundle carries, and the exact
next step. The rules the rows follow: a CA signs only once every bundle carries it; a CA that
replaces another signs only after one overlap in every bundle; a replaced CA (and any CA in a
bundle that is not ours) stays one overlap more, and leaves only once the Secret's certificate is
the current CA's. A walk through many months then checks the same rules over every rotation.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpuclass.webhook.certs.rotation import (
    BundleEntry,
    Bundles,
    CAFacts,
    CertPolicy,
    CertRef,
    SecretState,
    ServingFacts,
    Step,
    UpdateSecret,
    Wait,
    WriteBundles,
    plan,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
DAY, HOUR = timedelta(days=1), timedelta(hours=1)
HOSTS = frozenset({"gpuclass-webhook.cozy-system.svc"})
POLICY = CertPolicy(
    ca_validity=1825 * DAY,
    ca_renew_before=365 * DAY,
    cert_validity=90 * DAY,
    cert_renew_before=30 * DAY,
    overlap=HOUR,
    hosts=HOSTS,
)


def ref(name: str, *, ends: timedelta = 1000 * DAY) -> CertRef:
    return CertRef(name, f"-----PEM {name}-----\n", NOW + ends)


CA1, CA2, HELM = ref("ca1"), ref("ca2", ends=1825 * DAY), ref("helm-made")
SHORT = ref("ca1", ends=20 * DAY)  # CA1 in its last days


def ca(cert: CertRef) -> CAFacts:
    return CAFacts(cert, NOW - 10 * DAY)


def serving(
    issuer: CertRef,
    *,
    ends: timedelta = 60 * DAY,
    hosts: frozenset[str] = HOSTS,
    key_matches: bool = True,
) -> ServingFacts:
    return ServingFacts(NOW - DAY, NOW + ends, issuer.fingerprint, hosts, key_matches)


# The chart gives both configurations one name: only the kind tells them apart.
M, V = ("mutating", "gpuclass-webhook"), ("validating", "gpuclass-webhook")


def bundles(*certs: CertRef, validating: tuple[CertRef, ...] | None = None) -> Bundles:
    """Both chart configurations (two hooks in the mutating one) carrying `certs`."""
    entry = BundleEntry(tuple(certs))
    other = entry if validating is None else BundleEntry(validating)
    return {M: [entry, entry], V: [other]}


STEADY = SecretState(current=ca(CA1), current_cert=CA1, serving=serving(CA1))
STAGED = replace(STEADY, current=ca(replace(CA1, not_after=NOW + 300 * DAY)), next=ca(CA2))


def bare(step: Step) -> Step:
    """The step without its log reason, which rows do not pin."""
    return replace(step, reason="") if isinstance(step, (UpdateSecret, WriteBundles)) else step


ROWS = [
    pytest.param(
        SecretState(),
        {M: [BundleEntry(), BundleEntry()], V: [BundleEntry()]},
        UpdateSecret("", new_ca="current", drop_next=True),
        id="empty-secret-first-install-makes-a-ca",
    ),
    pytest.param(
        SecretState(),
        bundles(HELM),
        UpdateSecret(
            "", new_ca="current", drop_next=True, retired=(HELM,), retire_after=NOW + HOUR
        ),
        id="empty-secret-keeps-the-previous-modes-ca-one-overlap",
    ),
    pytest.param(
        SecretState(current=ca(CA1), current_cert=CA1),
        bundles(),
        WriteBundles((M, V), (CA1,), ""),
        id="new-ca-goes-into-every-bundle-before-it-signs",
    ),
    pytest.param(
        SecretState(current=ca(CA1), current_cert=CA1),
        bundles(CA1),
        UpdateSecret("", issue_certificate=True),
        id="ca-in-every-bundle-signs-the-certificate",
    ),
    pytest.param(
        STEADY,
        bundles(CA1),
        Wait(NOW + 30 * DAY),  # the certificate's window opens first (60 - 30 days)
        id="valid-waits-for-the-first-deadline",
    ),
    pytest.param(
        replace(STEADY, serving=serving(CA1, ends=20 * DAY)),
        bundles(CA1),
        UpdateSecret("", issue_certificate=True),
        id="certificate-near-expiry-is-renewed-by-the-same-ca",
    ),
    pytest.param(
        replace(STEADY, serving=serving(HELM)),
        bundles(CA1),
        UpdateSecret("", issue_certificate=True),
        id="certificate-of-another-ca-is-replaced",
    ),
    pytest.param(
        replace(STEADY, serving=serving(CA1, hosts=frozenset({"old.svc"}))),
        bundles(CA1),
        UpdateSecret("", issue_certificate=True),
        id="certificate-missing-a-host-is-replaced",
    ),
    pytest.param(
        replace(STEADY, serving=serving(CA1, key_matches=False)),
        bundles(CA1),
        UpdateSecret("", issue_certificate=True),
        id="certificate-whose-key-does-not-match-is-replaced",
    ),
    pytest.param(
        replace(STEADY, current=ca(replace(CA1, not_after=NOW + 300 * DAY))),
        bundles(replace(CA1, not_after=NOW + 300 * DAY)),
        UpdateSecret("", new_ca="next"),
        id="ca-near-expiry-stages-a-next-ca",
    ),
    pytest.param(
        STAGED,
        bundles(CA1),
        WriteBundles((M, V), (replace(CA1, not_after=NOW + 300 * DAY), CA2), ""),
        id="next-ca-goes-into-every-bundle-beside-the-current",
    ),
    pytest.param(
        STAGED,
        bundles(CA1, CA2),
        UpdateSecret("", next_trusted_at=NOW),
        id="bundles-carry-the-next-ca-overlap-starts",
    ),
    pytest.param(
        replace(STAGED, next_trusted_at=NOW - 10 * timedelta(minutes=1)),
        bundles(CA1, CA2),
        Wait(NOW + 50 * timedelta(minutes=1)),
        id="next-ca-waits-out-its-overlap",
    ),
    pytest.param(
        replace(STAGED, next_trusted_at=NOW - 61 * timedelta(minutes=1)),
        bundles(CA1, CA2, validating=(CA1,)),
        UpdateSecret(""),
        id="next-ca-lost-from-a-bundle-restarts-its-overlap",
    ),
    pytest.param(
        replace(STAGED, next_trusted_at=NOW - 61 * timedelta(minutes=1)),
        bundles(CA1, CA2),
        UpdateSecret(
            "",
            promote=True,
            issue_certificate=True,
            retired=(replace(CA1, not_after=NOW + 300 * DAY),),
            retire_after=NOW + HOUR,
        ),
        id="after-the-overlap-the-next-ca-signs-and-the-old-one-retires",
    ),
    pytest.param(
        SecretState(
            current=ca(CA2),
            current_cert=CA2,
            serving=serving(CA2),
            retired=(CA1,),
            retire_after=NOW + HOUR,
        ),
        bundles(CA2, CA1),
        Wait(NOW + HOUR),
        id="retired-ca-stays-in-the-bundles-for-its-overlap",
    ),
    pytest.param(
        SecretState(
            current=ca(CA2),
            current_cert=CA2,
            serving=serving(CA2),
            retired=(CA1,),
            retire_after=NOW - timedelta(seconds=1),
        ),
        bundles(CA2, CA1),
        WriteBundles((M, V), (CA2,), ""),
        id="overlap-finished-drops-the-old-ca-from-the-bundles",
    ),
    pytest.param(
        SecretState(
            current=ca(CA2),
            current_cert=CA2,
            serving=serving(CA2),
            retired=(CA1,),
            retire_after=NOW - timedelta(seconds=1),
        ),
        bundles(CA2),
        UpdateSecret(""),
        id="overlap-finished-and-bundles-clean-forgets-the-old-ca",
    ),
    pytest.param(
        SecretState(
            current=ca(CA2),
            current_cert=CA2,
            serving=serving(CA1),
            retired=(CA1,),
            retire_after=NOW - timedelta(seconds=1),
        ),
        bundles(CA2, CA1),
        # CA2 has not signed what is served and CA1 may still sign something served: CA2's
        # first signature waits PROPAGATION, counted from now (the bundles carry it)
        UpdateSecret(
            "", current_trusted_at=NOW, retired=(CA1,), retire_after=NOW - timedelta(seconds=1)
        ),
        id="old-ca-stays-while-the-certificate-is-still-the-old-cas",
    ),
    pytest.param(
        SecretState(),  # nothing in the Secret parsed: corrupt data counts as none
        bundles(CA1),
        UpdateSecret("", new_ca="current", drop_next=True, retired=(CA1,), retire_after=NOW + HOUR),
        id="corrupt-secret-starts-over-keeping-the-bundles-ca-one-overlap",
    ),
    pytest.param(
        SecretState(current_cert=CA1, serving=serving(CA1)),
        bundles(CA1),
        UpdateSecret("", new_ca="next"),
        id="lost-ca-key-with-a-served-certificate-rotates-with-overlap",
    ),
    pytest.param(
        STEADY,
        bundles(CA1, validating=()),
        WriteBundles((V,), (CA1,), ""),
        id="bundle-missing-our-ca-is-rewritten",
    ),
    pytest.param(
        STEADY,
        {
            M: [BundleEntry((CA1,)), BundleEntry((CA1,), clean=False)],
            V: [BundleEntry((CA1,))],
        },
        WriteBundles((M,), (CA1,), ""),
        id="bundle-with-unparseable-data-is-rewritten",
    ),
    pytest.param(
        STEADY,
        bundles(CA1, HELM),
        UpdateSecret("", retired=(HELM,), retire_after=NOW + HOUR),
        id="foreign-ca-in-a-bundle-is-kept-one-overlap",
    ),
    pytest.param(
        STEADY,
        bundles(CA1, ref("expired", ends=-DAY)),
        WriteBundles((M, V), (CA1,), ""),
        id="foreign-expired-ca-is-dropped-at-once",
    ),
    pytest.param(
        replace(STEADY, rotate="ca"),
        bundles(CA1),
        UpdateSecret("", new_ca="next", clear_rotate=True),
        id="requested-ca-rotation-stages-a-next-ca",
    ),
    pytest.param(
        replace(STEADY, rotate="certificate"),
        bundles(CA1),
        UpdateSecret("", issue_certificate=True, clear_rotate=True),
        id="requested-certificate-rotation-signs-a-new-one",
    ),
    pytest.param(
        replace(
            STEADY,
            current=ca(replace(CA1, not_after=NOW - DAY)),
            serving=serving(CA1, ends=-DAY),
        ),
        bundles(replace(CA1, not_after=NOW - DAY)),
        UpdateSecret("", new_ca="current", drop_next=True),
        id="ended-ca-and-certificate-start-over",
    ),
    pytest.param(
        SecretState(
            current=ca(SHORT),
            current_cert=SHORT,
            next=ca(CA2),
            next_trusted_at=NOW - 10 * timedelta(minutes=1),
            serving=serving(SHORT, ends=20 * DAY),
        ),
        bundles(SHORT, CA2),
        Wait(NOW + 50 * timedelta(minutes=1)),
        id="certificate-ending-with-its-ca-is-not-re-signed-by-it",
    ),
]


# After a start over with a CA still in the bundles (the move from another certificate mode): the
# new CA is in every bundle; its first signature waits 30 s (the overlap, when that is shorter).
MOVED = SecretState(current=ca(CA2), current_cert=CA2, retired=(HELM,), retire_after=NOW + HOUR)
ROWS += [
    pytest.param(
        MOVED,
        bundles(CA2, HELM),
        UpdateSecret("", current_trusted_at=NOW, retired=(HELM,), retire_after=NOW + HOUR),
        id="new-ca-beside-a-served-one-starts-its-propagation-wait",
    ),
    pytest.param(
        replace(MOVED, current_trusted_at=NOW - timedelta(seconds=29)),
        bundles(CA2, HELM),
        Wait(NOW + timedelta(seconds=1)),
        id="new-ca-waits-for-the-api-servers-to-see-the-bundles",
    ),
    pytest.param(
        replace(MOVED, current_trusted_at=NOW - timedelta(seconds=30)),
        bundles(CA2, HELM),
        UpdateSecret("", issue_certificate=True, retired=(HELM,), retire_after=NOW + HOUR),
        id="new-ca-signs-once-the-api-servers-have-the-bundles",
    ),
    pytest.param(
        replace(MOVED, current_trusted_at=NOW - timedelta(seconds=30)),
        bundles(CA2),
        WriteBundles((M, V), (CA2, HELM), ""),
        id="no-signature-by-a-new-ca-while-a-bundle-lacks-the-ca-still-served",
    ),
    pytest.param(
        SecretState(current=ca(CA1), current_cert=CA1),
        bundles(CA1),
        UpdateSecret("", issue_certificate=True),
        id="first-install-signs-at-once",
    ),
]


@pytest.mark.parametrize(("state", "seen", "expected"), ROWS)
def test_plan(state: SecretState, seen: Bundles, expected: Step) -> None:
    assert bare(plan(state, seen, now=NOW, policy=POLICY)) == expected


def test_the_propagation_wait_is_capped_at_the_overlap() -> None:
    short = replace(POLICY, overlap=timedelta(seconds=4))
    state = replace(MOVED, current_trusted_at=NOW - timedelta(seconds=4))
    assert bare(plan(state, bundles(CA2, HELM), now=NOW, policy=short)) == UpdateSecret(
        "", issue_certificate=True, retired=(HELM,), retire_after=NOW + HOUR
    )


def test_a_policy_that_cannot_rotate_safely_says_why() -> None:
    bad = replace(POLICY, cert_renew_before=90 * DAY, overlap=200 * DAY, hosts=frozenset())
    assert len(bad.problems()) == 3
    assert POLICY.problems() == []


@pytest.mark.parametrize(
    ("poll", "safe"),
    [
        pytest.param(timedelta(seconds=10), True, id="default-poll"),
        pytest.param(timedelta(minutes=20), True, id="exactly-three-polls-in-an-overlap"),
        pytest.param(timedelta(minutes=21), False, id="fewer-than-three-polls-in-an-overlap"),
        pytest.param(HOUR * 60, False, id="poll-longer-than-the-overlap"),
    ],
)
def test_the_overlap_must_hold_three_polls(poll: timedelta, safe: bool) -> None:
    """A replica that polls less often than the overlap can still serve a certificate whose CA
    has already left the bundles (docs/decisions.md, Certificates)."""
    problems = replace(POLICY, poll=poll).problems()
    assert (problems == []) is safe
    assert safe or any("poll" in p for p in problems)
