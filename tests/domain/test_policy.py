"""Policy loading and evaluation: examples for every rule, then properties."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import policies
from domain.destinations import normalize_phone
from domain.policy import (
    CATEGORIES,
    CHANNELS,
    DEFAULT_EVIDENCE_DAYS,
    Consent,
    Decision,
    InvalidPolicyRequest,
    Outcome,
    Policy,
    PolicyError,
    PolicyRequest,
    RecentContact,
    Suppression,
    evaluate,
    fallback_for,
    load_policy,
    select_policy,
)

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")


def consents_for(*purposes: str, channel: str = "*") -> list[Consent]:
    return [
        Consent(channel=channel, purpose=p, granted_at=LONG_AGO, source="test", id=f"c-{p}")
        for p in purposes
    ]


def decide(
    policy: Policy,
    request: PolicyRequest,
    now: datetime,
    *,
    consents: list[Consent] | None = None,
    suppressions: list[Suppression] | None = None,
    recent: list[RecentContact] | None = None,
) -> Decision:
    return evaluate(
        policy,
        request,
        consents=consents if consents is not None else consents_for("service", "marketing"),
        suppressions=suppressions or [],
        recent=recent or [],
        now=now,
    )


# --------------------------------------------------------------------------- loading


def test_both_packaged_policies_load_with_a_rule_for_every_combination(
    default_policy: Policy, demo_policy: Policy
) -> None:
    assert policies.packaged_names() == ["default", "demo"]
    for policy in (default_policy, demo_policy):
        assert len(policy.rules) == 4 * len(CHANNELS) * len(CATEGORIES)
        assert len(policy.fallbacks) == 4 * len(CATEGORIES)
        assert len(policy.source_sha256) == 64
    assert default_policy.version == "2026-12-07.1"
    assert default_policy.effective_from == datetime(2026, 12, 1, tzinfo=UTC)


def test_the_demo_policy_has_compressed_durations(demo_policy: Policy) -> None:
    rule = fallback_for(demo_policy, "EU", "transactional")
    assert rule.email_after_seconds == 10
    assert rule.sms_poll_horizon_seconds == 60
    assert (rule.poll_initial_seconds, rule.poll_max_seconds) == (1.0, 5.0)


def test_an_unknown_packaged_policy_is_not_found() -> None:
    with pytest.raises(FileNotFoundError):
        policies.load_packaged("../pyproject")


def _mutated(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ('version = "2026-12-07.1"', "version = 3", "version"),
        (
            'consent_purposes = ["marketing"]',
            'consent_purposes = ["service"]',
            "rules.promotional.consent_purposes",
        ),
        ('sender = "herald-sms"', 'sendr = "herald-sms"', "unknown field 'sendr'"),
        ("[rules.operational]", "[rules.operationl]", "rules.operationl"),
        ("[regions.ZA.rules]", "[regions.XX.rules]", "regions.XX"),
        (
            'quiet_hours = { start = "21:00", end = "08:00" }',
            'quiet_hours = { start = "21:00", end = "8am" }',
            "rules.quiet_hours.end",
        ),
        ("poll_max_seconds = 300", "poll_max_seconds = 1", "fallback.poll_max_seconds"),
        ('sender = "herald-sms"', "", "'sender' is not set"),
        (
            "effective_from = 2026-12-01T00:00:00Z",
            "effective_from = 2026-12-01T00:00:00",
            "effective_from",
        ),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(old: str, new: str, named: str) -> None:
    text = _mutated(policies.load_packaged("default"), old, new)
    with pytest.raises(PolicyError, match=named.replace("(", r"\(").replace(".", r"\.")):
        load_policy(text)


def test_evidence_retention_is_a_policy_field_with_a_default(default_policy: Policy) -> None:
    # The packaged versions do not state it: they carry the default (a year).
    assert default_policy.evidence_days == DEFAULT_EVIDENCE_DAYS == 365
    text = policies.load_packaged("default") + "\n[retention]\nevidence_days = 730\n"
    assert load_policy(text).evidence_days == 730
    for bad, named in (("0", "retention.evidence_days"), ('"a year"', "evidence_days")):
        with pytest.raises(PolicyError, match=named):
            load_policy(
                policies.load_packaged("default") + f"\n[retention]\nevidence_days = {bad}\n"
            )
    with pytest.raises(PolicyError, match="retention: unknown field 'pii_days'"):
        load_policy(policies.load_packaged("default") + "\n[retention]\npii_days = 30\n")


def test_invalid_toml_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match="not valid TOML"):
        load_policy("version = ")


def test_the_policy_in_force_is_the_latest_effective_one(
    default_policy: Policy, demo_policy: Policy
) -> None:
    assert select_policy([default_policy, demo_policy], datetime(2026, 6, 1, tzinfo=UTC)) is (
        demo_policy
    )
    assert select_policy([default_policy, demo_policy], datetime(2027, 1, 1, tzinfo=UTC)) is (
        default_policy
    )
    with pytest.raises(PolicyError):
        select_policy([default_policy], datetime(2025, 1, 1, tzinfo=UTC))


# --------------------------------------------------------------------------- scenarios


def test_the_18_00_class_opening_is_allowed_for_a_us_member(default_policy: Policy) -> None:
    phone = normalize_phone("+1 617 555 0123")
    now = datetime(2026, 12, 15, 18, 0, 0, tzinfo=NEW_YORK)
    request = PolicyRequest("sms", "transactional", phone.country, phone.timezone)
    decision = decide(default_policy, request, now, consents=consents_for("service"))
    assert decision.outcome == Outcome.ALLOW
    assert decision.rule == "allow"
    assert decision.sender == "herald-us-10dlc"
    assert decision.footer is None
    assert decision.inputs["local_time"].startswith("2026-12-15T18:00:00")
    assert decision.inputs["consents_used"] == ["c-service"]


def test_quiet_hours_do_not_block_a_transactional_sms(default_policy: Policy) -> None:
    # Decided: a seat that opens at 22:30 is worth a message at 22:30; the default
    # policy exempts transactional messages from quiet hours everywhere.
    now = datetime(2026, 12, 15, 22, 30, tzinfo=NEW_YORK)
    request = PolicyRequest("sms", "transactional", "US", "America/New_York")
    assert decide(default_policy, request, now).outcome == Outcome.ALLOW


def test_the_paris_boston_connection_change_reaches_an_eu_traveller(
    default_policy: Policy,
) -> None:
    phone = normalize_phone("+33 6 12 34 56 78")
    now = datetime(2026, 12, 15, 11, 2, tzinfo=PARIS)
    request = PolicyRequest("sms", "transactional", phone.country, phone.timezone)
    decision = decide(default_policy, request, now, consents=consents_for("service"))
    assert decision.outcome == Outcome.ALLOW
    assert decision.inputs["region"] == "EU"
    assert decision.sender == "Herald"
    fallback = fallback_for(default_policy, "EU", "transactional")
    assert fallback.email_after_seconds == 600
    assert fallback.email_on_permanent_failure is True
    # Authorization runs again for the email fallback, ten minutes later.
    email = PolicyRequest("email", "transactional", "FR", "Europe/Paris")
    later = decide(
        default_policy, email, now + timedelta(seconds=600), consents=consents_for("service")
    )
    assert later.outcome == Outcome.ALLOW
    assert later.sender == "Herald <notifications@herald.example>"


def test_an_opted_out_number_is_denied(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    stop = Suppression(channel="sms", reason="opted_out", at=now - timedelta(days=1), id="s-1")
    request = PolicyRequest("sms", "transactional", "US", "America/New_York")
    decision = decide(default_policy, request, now, suppressions=[stop])
    assert (decision.outcome, decision.rule) == (Outcome.DENY, "suppression.opted_out")
    assert decision.next_eligible_at is None
    assert decision.sender == ""


def test_an_sms_opt_out_does_not_block_email(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    stop = Suppression(channel="sms", reason="opted_out", at=now - timedelta(days=1))
    request = PolicyRequest("email", "transactional", "US", "America/New_York")
    assert decide(default_policy, request, now, suppressions=[stop]).outcome == Outcome.ALLOW


def test_a_lifted_suppression_no_longer_applies(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    lifted = Suppression("sms", "opted_out", now - timedelta(days=2), lifted_at=now - timedelta(1))
    request = PolicyRequest("sms", "transactional", "US", "America/New_York")
    assert decide(default_policy, request, now, suppressions=[lifted]).outcome == Outcome.ALLOW


def test_an_sms_to_an_unlisted_country_is_denied(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    request = PolicyRequest("sms", "transactional", "CN", "Asia/Shanghai")
    decision = decide(default_policy, request, now)
    assert (decision.outcome, decision.rule) == (Outcome.DENY, "country.not_allowed")
    email = PolicyRequest("email", "transactional", "CN", "Asia/Shanghai")
    assert decide(default_policy, email, now).outcome == Outcome.ALLOW


def test_an_email_without_a_country_is_allowed_where_any_country_is(
    default_policy: Policy,
) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    request = PolicyRequest("email", "operational", "", "UTC")
    decision = decide(default_policy, request, now)
    assert decision.outcome == Outcome.ALLOW
    assert decision.inputs["region"] == "default"


def test_missing_consent_is_denied(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    request = PolicyRequest("sms", "operational", "US", "America/New_York")
    decision = decide(default_policy, request, now, consents=[])
    assert (decision.outcome, decision.rule) == (Outcome.DENY, "consent.missing")


def test_revoked_consent_is_denied(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    revoked = Consent("sms", "service", LONG_AGO, revoked_at=now - timedelta(hours=1), id="c-9")
    request = PolicyRequest("sms", "operational", "US", "America/New_York")
    decision = decide(default_policy, request, now, consents=[revoked])
    assert (decision.outcome, decision.rule) == (Outcome.DENY, "consent.revoked")


def test_a_revoked_consent_denial_cites_the_latest_revoke(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    older = Consent("sms", "service", LONG_AGO, revoked_at=now - timedelta(days=3), id="c-1")
    latest = Consent(
        "*",
        "service",
        LONG_AGO,
        revoked_at=now - timedelta(hours=1),
        id="c-2",
        revoked_source="api",
    )
    request = PolicyRequest("sms", "operational", "US", "America/New_York")
    decision = decide(default_policy, request, now, consents=[latest, older])
    assert (decision.outcome, decision.rule) == (Outcome.DENY, "consent.revoked")
    assert "consent c-2" in decision.reason and "by api" in decision.reason
    assert (now - timedelta(hours=1)).isoformat() in decision.reason
    cited = decision.inputs["consent_revoked"]
    assert [c["id"] for c in cited] == ["c-1", "c-2"]  # type: ignore[union-attr,index]
    assert cited[-1]["revoked_source"] == "api"  # type: ignore[index]


def test_consent_on_another_channel_does_not_count(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    request = PolicyRequest("sms", "operational", "US", "America/New_York")
    decision = decide(
        default_policy, request, now, consents=consents_for("service", channel="email")
    )
    assert decision.rule == "consent.missing"


def test_promotional_is_not_satisfied_by_a_service_consent(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 12, 0, tzinfo=NEW_YORK)
    request = PolicyRequest("sms", "promotional", "US", "America/New_York", purpose="service")
    decision = decide(default_policy, request, now, consents=consents_for("service"))
    assert (decision.outcome, decision.rule) == (Outcome.DENY, "consent.missing")
    assert "marketing" in decision.inputs["purposes_required"]


def test_a_promotional_sms_at_night_is_deferred_to_the_morning(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 22, 30, tzinfo=NEW_YORK)
    request = PolicyRequest("sms", "promotional", "US", "America/New_York")
    decision = decide(default_policy, request, now)
    assert (decision.outcome, decision.rule) == (Outcome.DEFER, "quiet_hours")
    assert decision.next_eligible_at == datetime(2026, 12, 16, 8, 0, tzinfo=NEW_YORK)
    assert decision.inputs["quiet_hours"] == {"start": "21:00", "end": "08:00", "exempt": False}


def test_a_promotional_sms_allowed_by_day_carries_the_stop_footer(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 12, 0, tzinfo=NEW_YORK)
    request = PolicyRequest("sms", "promotional", "US", "America/New_York")
    decision = decide(default_policy, request, now)
    assert decision.outcome == Outcome.ALLOW
    assert decision.footer == "Reply STOP to opt out."


def test_south_african_marketing_stops_at_20_00(default_policy: Policy) -> None:
    johannesburg = ZoneInfo("Africa/Johannesburg")
    now = datetime(2026, 12, 15, 20, 15, tzinfo=johannesburg)
    request = PolicyRequest("sms", "promotional", "ZA", "Africa/Johannesburg")
    decision = decide(default_policy, request, now)
    assert decision.rule == "quiet_hours"
    assert decision.next_eligible_at == datetime(2026, 12, 16, 8, 0, tzinfo=johannesburg)


def test_the_quiet_window_end_is_found_across_the_fall_back_hour() -> None:
    text = _mutated(
        policies.load_packaged("default"),
        'quiet_hours = { start = "21:00", end = "08:00" }',
        'quiet_hours = { start = "21:00", end = "01:30" }',
    )
    policy = load_policy(text)
    # 2026-11-01 01:10 EST (second pass through 01:xx): the window ends 20 minutes later.
    now = datetime(2026, 11, 1, 6, 10, tzinfo=UTC)
    request = PolicyRequest("sms", "operational", "US", "America/New_York")
    decision = decide(policy, request, now)
    assert decision.rule == "quiet_hours"
    assert decision.next_eligible_at == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)


def test_a_recent_contact_defers_until_the_gap_passes(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    request = PolicyRequest("sms", "operational", "US", "America/New_York")
    last = RecentContact(at=now - timedelta(seconds=20), channel="sms")
    decision = decide(default_policy, request, now, recent=[last])
    assert (decision.outcome, decision.rule) == (Outcome.DEFER, "cooldown.min_gap")
    assert decision.next_eligible_at == last.at + timedelta(seconds=60)


def test_a_full_window_defers_until_the_oldest_contact_leaves_it(demo_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    request = PolicyRequest("sms", "promotional", "US", "America/New_York")
    recent = [RecentContact(at=now - timedelta(seconds=s), channel="sms") for s in (50, 30, 10)]
    decision = decide(demo_policy, request, now, recent=recent)
    assert (decision.outcome, decision.rule) == (Outcome.DEFER, "cooldown.max_per_window")
    assert decision.next_eligible_at == now + timedelta(seconds=10)
    assert decision.inputs["recent_contacts_in_window"] == 3


def test_contacts_on_the_other_channel_do_not_count(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)
    request = PolicyRequest("sms", "operational", "US", "America/New_York")
    emailed = RecentContact(at=now - timedelta(seconds=5), channel="email")
    assert decide(default_policy, request, now, recent=[emailed]).outcome == Outcome.ALLOW


def test_suppression_is_checked_before_everything_else(default_policy: Policy) -> None:
    now = datetime(2026, 12, 15, 23, 0, tzinfo=NEW_YORK)
    request = PolicyRequest("sms", "promotional", "CN", "Asia/Shanghai")
    stop = Suppression("*", "complaint", LONG_AGO)
    decision = decide(default_policy, request, now, consents=[], suppressions=[stop])
    assert decision.rule == "suppression.complaint"


@pytest.mark.parametrize(
    ("request_", "now"),
    [
        (PolicyRequest("fax", "transactional", "US", "UTC"), datetime(2026, 1, 1, tzinfo=UTC)),
        (PolicyRequest("sms", "gossip", "US", "UTC"), datetime(2026, 1, 1, tzinfo=UTC)),
        (
            PolicyRequest("sms", "transactional", "US", "Mars/Olympus"),
            datetime(2026, 1, 1, tzinfo=UTC),
        ),
        (PolicyRequest("sms", "transactional", "US", "UTC"), datetime(2026, 1, 1)),
    ],
)
def test_a_malformed_request_raises(
    default_policy: Policy, request_: PolicyRequest, now: datetime
) -> None:
    with pytest.raises(InvalidPolicyRequest):
        decide(default_policy, request_, now)


# --------------------------------------------------------------------------- properties

ZONES = [
    "America/New_York",
    "America/Los_Angeles",
    "Europe/Paris",
    "Africa/Johannesburg",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "UTC",
]
COUNTRIES = ["US", "FR", "DE", "ZA", "GB", "CN", "CA", ""]
RULE_NAMES = {
    "allow",
    "quiet_hours",
    "cooldown.min_gap",
    "cooldown.max_per_window",
    "consent.missing",
    "consent.revoked",
    "country.not_allowed",
    "country.unknown",
}

instants = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
)
requests = st.builds(
    PolicyRequest,
    channel=st.sampled_from(CHANNELS),
    category=st.sampled_from(CATEGORIES),
    country=st.sampled_from(COUNTRIES),
    timezone=st.sampled_from(ZONES),
    purpose=st.none() | st.sampled_from(["service", "marketing"]),
)
consent_lists = st.lists(
    st.builds(
        Consent,
        channel=st.sampled_from(["sms", "email", "*"]),
        purpose=st.sampled_from(["service", "marketing", "transactional"]),
        granted_at=instants,
        revoked_at=st.none() | instants,
        id=st.text("abc123", min_size=1, max_size=4),
    ),
    max_size=4,
)
recent_lists = st.lists(
    st.builds(RecentContact, at=instants, channel=st.sampled_from(["sms", "email", ""])),
    max_size=4,
)


@given(
    request=requests,
    now=instants,
    consents=consent_lists,
    recent=recent_lists,
    channel=st.sampled_from(["*", "sms", "email"]),
)
@settings(max_examples=150, deadline=None)
def test_an_opted_out_destination_is_never_allowed(
    default_policy: Policy,
    request: PolicyRequest,
    now: datetime,
    consents: list[Consent],
    recent: list[RecentContact],
    channel: str,
) -> None:
    stop = Suppression(channel=channel, reason="opted_out", at=now - timedelta(seconds=1))
    decision = decide(
        default_policy, request, now, consents=consents, suppressions=[stop], recent=recent
    )
    if channel in ("*", request.channel):
        assert decision.outcome == Outcome.DENY
        assert decision.rule == "suppression.opted_out"


@given(
    request=requests,
    now=instants,
    recent=recent_lists,
    channel=st.sampled_from(["*", "sms", "email"]),
)
@settings(max_examples=150, deadline=None)
def test_promotional_is_never_allowed_by_a_service_consent(
    default_policy: Policy,
    request: PolicyRequest,
    now: datetime,
    recent: list[RecentContact],
    channel: str,
) -> None:
    promotional = PolicyRequest(
        request.channel, "promotional", request.country, request.timezone, purpose=request.purpose
    )
    consents = [Consent(channel, p, LONG_AGO) for p in ("service", "transactional")]
    decision = decide(default_policy, promotional, now, consents=consents, recent=recent)
    assert decision.outcome != Outcome.ALLOW


@st.composite
def quiet_policies(draw: st.DrawFn) -> Policy:
    start = draw(st.integers(min_value=0, max_value=24 * 60 - 1))
    length = draw(st.integers(min_value=1, max_value=16 * 60))
    end = (start + length) % (24 * 60)
    text = _mutated(
        policies.load_packaged("default"),
        'quiet_hours = { start = "21:00", end = "08:00" }',
        f'quiet_hours = {{ start = "{start // 60:02d}:{start % 60:02d}", '
        f'end = "{end // 60:02d}:{end % 60:02d}" }}',
    )
    return load_policy(text)


@given(
    policy=quiet_policies(),
    now=instants,
    zone=st.sampled_from(ZONES),
    country=st.sampled_from(["US", "FR", "GB"]),
)
@settings(max_examples=200, deadline=None)
def test_a_quiet_hours_deferral_lands_outside_the_window_within_24_hours(
    policy: Policy,
    now: datetime,
    zone: str,
    country: str,
) -> None:
    request = PolicyRequest("sms", "operational", country, zone)
    decision = decide(policy, request, now)
    quiet = policy.rule_for(decision.inputs["region"], "sms", "operational").quiet_hours
    assert quiet is not None
    local_time = now.astimezone(ZoneInfo(zone)).time()
    if decision.outcome == Outcome.DEFER:
        assert decision.rule == "quiet_hours"
        assert quiet.contains(local_time)
        eligible = decision.next_eligible_at
        assert eligible is not None
        assert now < eligible <= now + timedelta(hours=24)
        assert not quiet.contains(eligible.astimezone(ZoneInfo(zone)).time())
        assert eligible.astimezone(ZoneInfo(zone)).time().second == 0
    else:
        assert decision.outcome == Outcome.ALLOW
        assert not quiet.contains(local_time)


@given(
    request=requests,
    now=instants,
    consents=consent_lists,
    recent=recent_lists,
    policy_name=st.sampled_from(["default", "demo"]),
)
@settings(max_examples=200, deadline=None)
def test_every_decision_names_its_policy_version_and_rule(
    default_policy: Policy,
    demo_policy: Policy,
    request: PolicyRequest,
    now: datetime,
    consents: list[Consent],
    recent: list[RecentContact],
    policy_name: str,
) -> None:
    policy = default_policy if policy_name == "default" else demo_policy
    decision = decide(policy, request, now, consents=consents, recent=recent)
    assert decision.policy_version == policy.version
    assert decision.rule in RULE_NAMES
    assert decision.reason.endswith(".")
    json.dumps(decision.inputs)  # evidence must be storable as JSON
    if decision.outcome == Outcome.DEFER:
        assert decision.next_eligible_at is not None and decision.next_eligible_at > now
    else:
        assert decision.next_eligible_at is None
    assert (decision.sender != "") == (decision.outcome == Outcome.ALLOW)


def test_quiet_hours_contain_their_start_but_not_their_end(default_policy: Policy) -> None:
    quiet = default_policy.rule_for("US", "sms", "promotional").quiet_hours
    assert quiet is not None
    assert quiet.contains(time(21, 0)) and quiet.contains(time(3, 0))
    assert not quiet.contains(time(8, 0)) and not quiet.contains(time(20, 59))
