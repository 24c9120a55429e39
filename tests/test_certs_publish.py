"""The pure parts of certificate handling: the rotation step, the bundle, the phase, the serving renewal.

No cluster: the Secret's material is built in memory and judged at an explicit ``now``.
"""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from certs import ensure as ens
from certs.issue import (
    Policy,
    Target,
    issue_ca,
    issue_serving,
    key_pem,
    load_cert,
    load_key,
    new_ca,
    pem,
    serving_renewal,
)
from certs.publish import CaHealth, CaState, Phase, Step, ca_state, phase_of, rotation_step, trusted_bundle
from certs.store import (
    ANNOTATION_PUBLISHED,
    ANNOTATION_SWAPPED,
    CA_BUNDLE,
    CA_CRT,
    CA_KEY,
    NEXT_CA_CRT,
    NEXT_CA_KEY,
    TLS_CRT,
    TLS_KEY,
    Material,
    format_time,
)

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DAY, HOUR, TICK = datetime.timedelta(days=1), datetime.timedelta(hours=1), datetime.timedelta(microseconds=1)
POLICY = Policy()  # 365 d serving, 3650 d CA, renew 30 d before, 1 h overlap
TARGET = Target()
M, U, OK, EXP = CaHealth.MISSING, CaHealth.UNUSABLE, CaHealth.USABLE, CaHealth.EXPIRING


@pytest.mark.parametrize(("state", "step"), [
    # ca.crt cannot sign: a usable next CA is promoted, else a fresh CA (created if there was none to replace)
    (CaState(M, M, False, HOUR, None), Step.CREATE_CA),
    (CaState(U, M, True, HOUR, HOUR), Step.REPLACE_CA),
    (CaState(U, U, False, HOUR, None), Step.REPLACE_CA),
    (CaState(M, OK, False, 0 * HOUR, None), Step.PROMOTE_NEXT_EARLY),
    (CaState(U, OK, False, 0 * HOUR, None), Step.PROMOTE_NEXT_EARLY),
    # 1 -> 2: the next CA waits for the overlap since its publication; a broken one is dropped at once
    (CaState(OK, U, False, 2 * HOUR, None), Step.DISCARD_NEXT),
    (CaState(EXP, OK, False, HOUR - TICK, None), Step.NONE),
    (CaState(EXP, OK, False, HOUR, None), Step.SWAP_TO_NEXT),
    (CaState(EXP, OK, True, HOUR, HOUR), Step.SWAP_TO_NEXT),
    # 2 -> 3: old CAs leave the bundle an overlap after the swap; an unknown swap time starts the window now
    (CaState(OK, M, True, 5 * HOUR, None), Step.START_RETIRING),
    (CaState(OK, M, True, 5 * HOUR, 0 * HOUR), Step.NONE),  # swapped just now
    (CaState(OK, M, True, 5 * HOUR, HOUR - TICK), Step.NONE),
    (CaState(OK, M, True, 5 * HOUR, HOUR), Step.RETIRE_OLD),
    (CaState(EXP, M, True, 5 * HOUR, HOUR), Step.RETIRE_OLD),  # a retirement finishes before a new rotation
    # steady: a new CA only when the current one is due
    (CaState(OK, M, False, 5 * HOUR, None), Step.NONE),
    (CaState(EXP, M, False, 0 * HOUR, None), Step.INTRODUCE_NEXT),
])
def test_rotation_step(state: CaState, step: Step) -> None:
    assert rotation_step(state, HOUR) is step


def test_steps_report_what_changed_and_which_forget_the_old_bundle() -> None:
    silent = {s for s in Step if s.action is None}
    assert silent == {Step.NONE, Step.START_RETIRING}
    assert Step.CREATE_CA.action == "CA created"
    assert Step.INTRODUCE_NEXT.action == "new CA added to the bundle (current CA near expiry)"
    assert {s for s in Step if not s.keeps_previous} == {Step.CREATE_CA, Step.REPLACE_CA, Step.RETIRE_OLD}


@pytest.mark.parametrize(("rotating", "trusted", "phase"), [
    (False, 1, Phase.STEADY), (False, 2, Phase.OLD_CA), (False, 3, Phase.OLD_CA), (True, 2, Phase.NEW_CA)])
def test_phase_of(rotating: bool, trusted: int, phase: Phase) -> None:
    assert phase_of(rotating, trusted) is phase


def _ca(name: str, not_before: datetime.datetime, not_after: datetime.datetime) -> x509.Certificate:
    return new_ca(name, not_before, not_after)[0]


def test_trusted_bundle_keeps_ca_first_prefers_the_next_ca_and_drops_expired_or_repeated_ones() -> None:
    ca, nxt = _ca("ca", NOW - DAY, NOW + DAY), _ca("next", NOW - DAY, NOW + DAY)
    old, dead = _ca("old", NOW - DAY, NOW + HOUR), _ca("dead", NOW - DAY, NOW)
    assert trusted_bundle(ca, None, [], NOW) == [ca]
    assert trusted_bundle(ca, nxt, [old, ca], NOW) == [ca, nxt]  # while rotating, only current + next
    assert trusted_bundle(ca, None, [old, ca, dead, old], NOW) == [ca, old]  # expiry is exclusive: dead is out
    assert trusted_bundle(ca, ca, [], NOW) == [ca]


def _expiry(cert_pem: bytes) -> datetime.datetime:
    cert = load_cert(cert_pem)
    assert cert is not None
    return cert.not_valid_after_utc


def _material(**pems: bytes) -> Material:
    return Material(dict(pems), {})


def test_ca_state_reads_the_secret() -> None:
    ca, ca_key = issue_ca(POLICY, NOW - DAY)
    other_key = key_pem(ec.generate_private_key(ec.SECP256R1()))
    assert ca_state(_material(), POLICY, NOW) == CaState(M, M, False, 0 * HOUR, None)
    assert ca_state(_material(**{CA_CRT: b"garbage", CA_KEY: ca_key}), POLICY, NOW).current is M
    assert ca_state(_material(**{CA_CRT: ca, CA_KEY: other_key}), POLICY, NOW).current is U
    assert ca_state(_material(**{CA_CRT: ca, CA_KEY: ca_key}), POLICY, NOW).current is OK
    expiry = _expiry(ca)
    assert ca_state(_material(**{CA_CRT: ca, CA_KEY: ca_key}), POLICY, expiry - POLICY.renew_before).current is EXP
    assert ca_state(_material(**{CA_CRT: ca, CA_KEY: ca_key}), POLICY, expiry).current is U
    # The next CA: absent only when neither file is there; half of one is unusable.
    assert ca_state(_material(**{NEXT_CA_KEY: ca_key}), POLICY, NOW).next is U
    assert ca_state(_material(**{NEXT_CA_CRT: ca, NEXT_CA_KEY: ca_key}), POLICY, NOW).next is OK

    stranger = pem(_ca("old", NOW - DAY, NOW + DAY))
    material = _material(**{CA_CRT: ca, CA_KEY: ca_key, CA_BUNDLE: ca + stranger})
    assert ca_state(material, POLICY, NOW).retiring
    material.data[CA_BUNDLE] = ca
    assert not ca_state(material, POLICY, NOW).retiring
    material.annotations = {ANNOTATION_PUBLISHED: format_time(NOW - HOUR), ANNOTATION_SWAPPED: "yesterday"}
    state = ca_state(material, POLICY, NOW)
    assert (state.published_for, state.swapped_for) == (HOUR, 0 * HOUR)  # unreadable: just now, but recorded


def test_serving_renewal() -> None:
    ca_pem, ca_key_pem = issue_ca(POLICY, NOW - DAY)
    ca, ca_key = load_cert(ca_pem), load_key(ca_key_pem)
    assert ca is not None and ca_key is not None
    crt_pem, serving_key_pem = issue_serving(TARGET, POLICY, ca, ca_key, NOW)
    cert, key = load_cert(crt_pem), load_key(serving_key_pem)
    assert cert is not None and key is not None
    due = cert.not_valid_after_utc - POLICY.renew_before
    assert serving_renewal(cert, key, ca, TARGET, POLICY, due - TICK, rotating=False) is None
    assert serving_renewal(cert, key, ca, TARGET, POLICY, due, rotating=False) == "near expiry"
    assert serving_renewal(cert, key, ca, TARGET, POLICY, due, rotating=True) is None  # the swap re-issues it
    assert serving_renewal(None, None, ca, TARGET, POLICY, NOW, rotating=True) == "missing"
    assert serving_renewal(cert, key, ca, Target(extra_sans=("10.0.0.1",)), POLICY, NOW,
                           rotating=False) == "names do not match the Service"


def test_plan_walks_a_whole_rotation_in_memory() -> None:
    """``plan`` on the Secret's material alone, as successive passes would see it."""
    material = Material({}, {})
    actions, phase = ens.plan(material, TARGET, POLICY, NOW)
    assert (actions, phase) == (["CA created"], Phase.STEADY)
    first_ca = material.data[CA_CRT]
    assert material.data[CA_BUNDLE] == first_ca and material.annotations == {ANNOTATION_PUBLISHED: format_time(NOW)}

    t1 = _expiry(first_ca) - POLICY.renew_before
    assert ens.plan(material, TARGET, POLICY, t1 - TICK) == (["serving certificate re-issued (expired)"], Phase.STEADY)
    assert ens.plan(material, TARGET, POLICY, t1) == (
        ["new CA added to the bundle (current CA near expiry)"], Phase.NEW_CA)
    next_ca = material.data[NEXT_CA_CRT]
    assert material.data[CA_BUNDLE] == first_ca + next_ca
    assert material.annotations[ANNOTATION_PUBLISHED] == format_time(t1)

    t2 = t1 + POLICY.overlap
    assert ens.plan(material, TARGET, POLICY, t2 - TICK) == ([], Phase.NEW_CA)
    assert ens.plan(material, TARGET, POLICY, t2) == (
        ["serving certificate re-issued by the new CA (new CA trusted for the overlap window)"], Phase.OLD_CA)
    assert material.data[CA_CRT] == next_ca and NEXT_CA_CRT not in material.data
    assert material.data[CA_BUNDLE] == first_ca + next_ca  # the same CAs: not rewritten, not republished
    assert material.annotations == {ANNOTATION_PUBLISHED: format_time(t1), ANNOTATION_SWAPPED: format_time(t2)}

    t3 = t2 + POLICY.overlap
    assert ens.plan(material, TARGET, POLICY, t3 - TICK) == ([], Phase.OLD_CA)
    assert ens.plan(material, TARGET, POLICY, t3) == (
        ["old CA removed from the bundle (serving certificate swapped for the overlap window)"], Phase.STEADY)
    assert material.data[CA_BUNDLE] == next_ca
    assert material.annotations == {ANNOTATION_PUBLISHED: format_time(t3)}
    assert set(material.data) == {TLS_CRT, TLS_KEY, CA_CRT, CA_KEY, CA_BUNDLE}
