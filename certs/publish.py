"""Publishing: which CAs the webhook configurations trust, and the overlapping CA rotation.

CA rotation, so that no request in flight ever meets a certificate its client does not trust
(``overlap`` = ``certs.overlapHours``):

1. the CA is within ``renewBefore`` of expiry: a new CA is generated into ``next-ca.*`` and the bundle
   becomes current + new; both configurations are patched. ``ANNOTATION_PUBLISHED`` records when;
2. ``overlap`` after the bundle was published (and both configurations confirmed to carry it), the
   serving certificate is re-issued by the new CA, which becomes ``ca.crt``; the old CA stays in the
   bundle. ``ANNOTATION_SWAPPED`` records when;
3. ``overlap`` after the swap (every replica has reloaded the new certificate by then), the old CA
   leaves the bundle.

Which step is due is a pure function of the Secret's state (``rotation_step``); ``rotate`` carries it
out on the Secret's material. Any configuration whose caBundle differs from the Secret's bundle is
rewritten (``publish``), and since its clients did not trust the bundle until then, the caller
restarts the published time.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import Enum, StrEnum, auto

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from certs.issue import (
    Policy,
    Target,
    issue_ca,
    issue_serving,
    load_bundle,
    load_cert,
    load_key,
    pem,
    renewal_due,
    usable_ca,
)
from certs.store import (
    ANNOTATION_PUBLISHED,
    ANNOTATION_SWAPPED,
    CA_BUNDLE,
    CA_CRT,
    CA_KEY,
    MAX_ATTEMPTS,
    NEXT_CA_CRT,
    NEXT_CA_KEY,
    TLS_CRT,
    TLS_KEY,
    Api,
    Conflict,
    EnsureError,
    Material,
    SecretStore,
)


class Phase(StrEnum):
    STEADY = "steady"  # the bundle is ca.crt alone
    NEW_CA = "new CA published"  # bundle = ca.crt + next-ca.crt; tls.crt still from ca.crt
    OLD_CA = "old CA retiring"  # bundle = ca.crt (new) + the previous CA; tls.crt from the new CA


class WebhookKind(StrEnum):
    """The two webhook configurations that carry the bundle, both named ``Target.webhook_configuration``."""

    MUTATING = "mutating"
    VALIDATING = "validating"

    @property
    def collection(self) -> str:
        return f"/apis/admissionregistration.k8s.io/v1/{self.value}webhookconfigurations"


class CaHealth(Enum):
    MISSING = auto()  # ca.crt: no certificate that parses; next CA: neither file present
    UNUSABLE = auto()  # present, but no valid signing CA with its key at now
    USABLE = auto()
    EXPIRING = auto()  # usable, within renewBefore of its expiry (only said of ca.crt)


@dataclass(frozen=True)
class CaState:
    """What the rotation step depends on, read from the Secret at ``now``."""

    current: CaHealth
    next: CaHealth
    retiring: bool  # the bundle still trusts CAs other than ca.crt
    published_for: datetime.timedelta  # since the bundle was published (zero if unknown)
    swapped_for: datetime.timedelta | None  # since the serving certificate was swapped; None: never recorded


class Step(Enum):
    """One rotation step; ``action`` is how ``certs ensure`` reports it (None: nothing worth reporting)."""

    NONE = auto()  # steady, or inside an overlap window
    CREATE_CA = auto()
    REPLACE_CA = auto()
    PROMOTE_NEXT_EARLY = auto()
    DISCARD_NEXT = auto()
    SWAP_TO_NEXT = auto()
    START_RETIRING = auto()  # old CAs trusted, swap time unknown: the window starts now
    RETIRE_OLD = auto()
    INTRODUCE_NEXT = auto()

    @property
    def action(self) -> str | None:
        return _ACTIONS.get(self)

    @property
    def keeps_previous(self) -> bool:
        """Whether CAs trusted before this step may stay in the bundle (a fresh CA or a retirement: none do)."""
        return self not in (Step.CREATE_CA, Step.REPLACE_CA, Step.RETIRE_OLD)


_ACTIONS = {
    Step.CREATE_CA: "CA created",
    Step.REPLACE_CA: "CA replaced (the current one was unusable)",
    Step.PROMOTE_NEXT_EARLY: "serving certificate re-issued by the new CA early: the current CA is unusable",
    Step.DISCARD_NEXT: "unusable next CA discarded",
    Step.SWAP_TO_NEXT: "serving certificate re-issued by the new CA (new CA trusted for the overlap window)",
    Step.RETIRE_OLD: "old CA removed from the bundle (serving certificate swapped for the overlap window)",
    Step.INTRODUCE_NEXT: "new CA added to the bundle (current CA near expiry)",
}


def rotation_step(state: CaState, overlap: datetime.timedelta) -> Step:
    """The step due in ``state``: a broken CA first, then the rotation in progress, then a new one if due."""
    if state.current in (CaHealth.MISSING, CaHealth.UNUSABLE):
        if state.next is CaHealth.USABLE:  # the new CA is already (being) trusted: better than a fresh one
            return Step.PROMOTE_NEXT_EARLY
        return Step.CREATE_CA if state.current is CaHealth.MISSING else Step.REPLACE_CA
    if state.next is not CaHealth.MISSING:
        if state.next is not CaHealth.USABLE:
            return Step.DISCARD_NEXT
        return Step.SWAP_TO_NEXT if state.published_for >= overlap else Step.NONE
    if state.retiring:
        if state.swapped_for is None:
            return Step.START_RETIRING
        return Step.RETIRE_OLD if state.swapped_for >= overlap else Step.NONE
    return Step.INTRODUCE_NEXT if state.current is CaHealth.EXPIRING else Step.NONE


def ca_state(material: Material, policy: Policy, now: datetime.datetime) -> CaState:
    ca, ca_key = material.cert(CA_CRT), material.key(CA_KEY)
    if ca is None:
        current = CaHealth.MISSING
    elif not usable_ca(ca, ca_key, now):
        current = CaHealth.UNUSABLE
    else:
        current = CaHealth.EXPIRING if renewal_due(ca, policy, now) else CaHealth.USABLE
    if NEXT_CA_CRT not in material.data and NEXT_CA_KEY not in material.data:
        nxt = CaHealth.MISSING
    else:
        usable = usable_ca(material.cert(NEXT_CA_CRT), material.key(NEXT_CA_KEY), now)
        nxt = CaHealth.USABLE if usable else CaHealth.UNUSABLE
    swapped = material.since(ANNOTATION_SWAPPED, now) if ANNOTATION_SWAPPED in material.annotations else None
    return CaState(current, nxt, any(c != ca for c in load_bundle(material.data.get(CA_BUNDLE))),
                   material.since(ANNOTATION_PUBLISHED, now), swapped)


def rotate(material: Material, target: Target, policy: Policy, now: datetime.datetime) -> Step:
    """Carry out the rotation step due at ``now`` on ``material`` (in place); ``ca.crt`` is usable afterwards."""
    step = rotation_step(ca_state(material, policy, now), policy.overlap)
    data = material.data
    if step in (Step.PROMOTE_NEXT_EARLY, Step.SWAP_TO_NEXT):
        nxt, nxt_key = material.cert(NEXT_CA_CRT), material.key(NEXT_CA_KEY)
        assert nxt is not None and nxt_key is not None
        data[CA_CRT], data[CA_KEY] = data.pop(NEXT_CA_CRT), data.pop(NEXT_CA_KEY)
        data[TLS_CRT], data[TLS_KEY] = issue_serving(target, policy, nxt, nxt_key, now)
        material.stamp(ANNOTATION_SWAPPED, now)
    elif step in (Step.CREATE_CA, Step.REPLACE_CA):
        for name in (NEXT_CA_CRT, NEXT_CA_KEY):
            data.pop(name, None)
        data[CA_CRT], data[CA_KEY] = issue_ca(policy, now)
        ca, ca_key = load_cert(data[CA_CRT]), load_key(data[CA_KEY])
        assert ca is not None and ca_key is not None
        data[TLS_CRT], data[TLS_KEY] = issue_serving(target, policy, ca, ca_key, now)
        material.annotations.pop(ANNOTATION_SWAPPED, None)
    elif step is Step.DISCARD_NEXT:
        data.pop(NEXT_CA_CRT, None)
        data.pop(NEXT_CA_KEY, None)
    elif step is Step.START_RETIRING:
        material.stamp(ANNOTATION_SWAPPED, now)
    elif step is Step.RETIRE_OLD:
        material.annotations.pop(ANNOTATION_SWAPPED, None)
    elif step is Step.INTRODUCE_NEXT:
        data[NEXT_CA_CRT], data[NEXT_CA_KEY] = issue_ca(policy, now)
    return step


def trusted_bundle(ca: x509.Certificate, nxt: x509.Certificate | None, previous: list[x509.Certificate],
                   now: datetime.datetime) -> list[x509.Certificate]:
    """ca.crt, then the next CA or else the previous ones still valid (their overlap window); no duplicates."""
    wanted = {c.fingerprint(hashes.SHA256()): c
              for c in [ca, *([nxt] if nxt else [c for c in previous if now < c.not_valid_after_utc])]}
    return list(wanted.values())


def phase_of(rotating: bool, trusted: int) -> Phase:
    return Phase.NEW_CA if rotating else (Phase.OLD_CA if trusted > 1 else Phase.STEADY)


def update_bundle(material: Material, step: Step, now: datetime.datetime) -> Phase:
    """Make ``ca-bundle.crt`` what clients must trust after ``step`` (in place), stamping its publication."""
    data = material.data
    ca = material.cert(CA_CRT)
    assert ca is not None
    previous = load_bundle(data.get(CA_BUNDLE))
    wanted = trusted_bundle(ca, material.cert(NEXT_CA_CRT), previous if step.keeps_previous else [], now)
    fingerprints = {c.fingerprint(hashes.SHA256()) for c in wanted}
    if fingerprints != {c.fingerprint(hashes.SHA256()) for c in previous}:
        # The same CAs in another order are the same bundle: no needless rewrite.
        data[CA_BUNDLE] = b"".join(pem(c) for c in wanted)
        material.stamp(ANNOTATION_PUBLISHED, now)
    if ANNOTATION_PUBLISHED not in material.annotations:
        material.stamp(ANNOTATION_PUBLISHED, now)
    if len(wanted) == 1:
        material.annotations.pop(ANNOTATION_SWAPPED, None)
    return phase_of(NEXT_CA_CRT in data, len(wanted))


@dataclass
class Published:
    patched: list[WebhookKind] = field(default_factory=list)  # caBundle rewritten
    missing: list[WebhookKind] = field(default_factory=list)  # configuration does not exist (never created)


def publish(api: Api, store: SecretStore, name: str, bundle_b64: str, secret_rv: str) -> Published:
    """Every webhook entry of both configurations called ``name`` carries ``bundle_b64``.

    Before each write the Secret is read again: if it moved on from ``secret_rv``, Conflict (the pass
    restarts), so a replica with a stale view never overwrites a newer bundle for longer than the next
    write takes. A configuration written by someone else meanwhile is read again.
    """
    published = Published()
    for kind in WebhookKind:
        path = f"{kind.collection}/{name}"
        for _ in range(MAX_ATTEMPTS):
            config = api.call("GET", path)
            if config is None:
                published.missing.append(kind)
                break
            hooks = config.get("webhooks") or []
            if all((h.get("clientConfig") or {}).get("caBundle") == bundle_b64 for h in hooks):
                break
            if store.resource_version() != secret_rv:
                raise Conflict("secret changed")
            for hook in hooks:
                hook.setdefault("clientConfig", {})["caBundle"] = bundle_b64
            try:
                api.call("PUT", path, config)  # metadata.resourceVersion from the GET: conditional
            except Conflict:
                continue
            published.patched.append(kind)
            break
        else:
            raise EnsureError(f"{kind} webhook configuration {name}: too many conflicts")
    return published
