"""An intent's timeline as the console tells it: one sentence per entry, written for a
support person to read out, with the tokens, hashes and raw fields kept one click away.

The entries come from `ledger.timeline.timeline` (decisions, attempts, observations,
operator actions). They are told in the order things happened: by time, then, within one
instant, by cause (an operator's approval before the decision and attempt it led to, a
decision before its attempt, an attempt before what was observed of it); an approval the
workflow recorded a few milliseconds after what it caused is placed before it
(`ledger.timeline.approval_time`). Times that share a second are shown with milliseconds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from domain import channels
from domain.provider_errors import PROVIDER_REFUSED_RULE, meaning
from ledger.timeline import CLAIM_KEYS, acting_operator, approval_time

KIND_ORDER = ("operator", "decision", "attempt", "observation")
"""Within one instant, causes first."""


@dataclass
class Entry:
    at: str | None
    """ISO 8601, UTC."""
    kind: str
    """decision, attempt, observation, operator (one of KIND_ORDER)."""
    sentence: str
    """What happened, in words a person can read out."""
    detail: list[tuple[str, str]] = field(default_factory=list)
    """The raw fields (tokens, hashes, statuses), shown on request."""
    flag: str | None = None
    """applied, stale or conflict, for an observation."""
    time_text: str = ""
    """`at` as the page shows it: milliseconds where another entry shares its second."""
    order: tuple[datetime, int, int] = (datetime.min.replace(tzinfo=UTC), 0, 0)


def moment(value: str | None) -> datetime:
    return datetime.fromisoformat(value) if value else datetime.min.replace(tzinfo=UTC)


def time_text(value: datetime, *, millis: bool = False) -> str:
    """The console's one time format: `2026-12-07 20:04:50 UTC`, or with milliseconds
    `2026-12-07 20:04:50.127 UTC`."""
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if millis:
        text += f".{value.microsecond // 1000:03d}"
    return text + " UTC"


def channel_word(channel: str | None) -> str:
    """The channel as people read it (domain.channels: `SMS`, `email`); an unknown channel
    raises channels.UnknownChannel. No channel (an orphan observation): "message"."""
    return channels.get(channel).title if channel else "message"


def _carrier(channel: str | None) -> str:
    """Who takes the message from Herald on that channel (`the carrier`, `the mail relay`);
    an unknown channel raises channels.UnknownChannel."""
    return f"the {channels.get(channel).handed_to}" if channel else "the provider"


STATE_WORDS = {
    "prepared": "prepared but not sent",
    "submitted": "accepted by {carrier}",
    "sent": "sent on by {carrier}, with no delivery receipt yet",
    "delivered": "delivered",
    "failed": "failed",
    "undelivered": "not delivered",
    "unknown": "of unknown outcome",
    "cancelled": "cancelled before it was sent",
}


def state_words(state: str | None, channel: str | None) -> str:
    return STATE_WORDS.get(state or "", state or "unknown").format(carrier=_carrier(channel))


def _decision(d: dict[str, Any]) -> Entry:
    what = channel_word(d["channel"])
    reason = (d["reason"] or "").rstrip(".")
    if d["outcome"] == "allow":
        sentence = f"The policy allowed sending by {what} ({reason})."
    elif d["outcome"] == "deny":
        sentence = f"The policy refused to send by {what}: {reason}."
    elif d["outcome"] == "defer":
        until = (
            f" until {time_text(moment(d['next_eligible_at']))}" if d["next_eligible_at"] else ""
        )
        if d["rule"] == PROVIDER_REFUSED_RULE:
            # Not the policy's word: the provider refused for its own reasons (its account).
            sentence = (
                f"The provider refused the {what} for its own reasons; it waits{until}: {reason}."
            )
        else:
            sentence = f"The policy held the {what} back{until}: {reason}."
    else:
        sentence = f"The policy decided {d['outcome']} for {what}: {reason}."
    detail = [("rule", d["rule"]), ("policy version", d["policy_version"])]
    if d["next_eligible_at"]:
        detail.append(("next eligible", time_text(moment(d["next_eligible_at"]))))
    return Entry(d["decided_at"], "decision", sentence, detail)


def _attempt(a: dict[str, Any]) -> list[Entry]:
    name = f"{channel_word(a['channel'])} attempt #{a['number']}"
    to = f" to {a['destination_masked']}" if a.get("destination_masked") else ""
    detail = [
        ("token", a["token"]),
        ("provider", a.get("provider") or ""),
        ("template", f"{a['template_key']} v{a['template_version']}"),
        ("content sha256", a["content_sha256"]),
        ("state now", a["state"]),
    ]
    for key, label in (("remote_id", "provider message id"), ("message_id", "Message-ID")):
        if a.get(key):
            detail.append((label, a[key]))
    if a.get("error_code"):
        detail.append(("error code", meaning(a["error_code"])))
    entries = [
        Entry(
            a["prepared_at"],
            "attempt",
            f"Herald prepared {name}{to} from template {a['template_key']} "
            f"v{a['template_version']}; nothing was sent yet.",
            detail,
        )
    ]
    if a["submitted_at"]:
        entries.append(
            Entry(
                a["submitted_at"],
                "attempt",
                f"{name[0].upper()}{name[1:]} was handed to {_carrier(a['channel'])}"
                + (f" (message id {a['remote_id']})." if a.get("remote_id") else "."),
            )
        )
    return entries


SOURCE_WORDS = {
    "send": "The answer to our send request",
    "poll": "A status check with {carrier}",
    "webhook": "A delivery receipt from {carrier}",
    "reconcile": "A reconciliation check with {carrier}",
    "operator": "An operator's settlement",
}


def _known_before(observations: list[dict[str, Any]]) -> dict[int, str]:
    """For each observation (by its place in the list), the state its attempt had by then:
    that of the last observation applied to it earlier. A timeline entry says what was
    true at its time, not what the attempt came to later."""
    order = sorted(range(len(observations)), key=lambda i: moment(observations[i]["observed_at"]))
    state: dict[str, str] = {}
    known: dict[int, str] = {}
    for i in order:
        o = observations[i]
        token = o["attempt"] or ""
        if token in state:
            known[i] = state[token]
        if o["applied"] and o["normalized_status"]:
            state[token] = o["normalized_status"]
    return known


def _observation(
    o: dict[str, Any], attempts: dict[str, dict[str, Any]], known_then: str | None = None
) -> Entry:
    attempt = attempts.get(o["attempt"] or "")
    channel = attempt["channel"] if attempt else None
    name = (
        f"{channel_word(channel)} attempt #{attempt['number']}" if attempt else "an unknown attempt"
    )
    carrier = _carrier(channel)
    status = o["normalized_status"]
    raw = o["raw_status"]
    if o["source"] == "send" and raw == "timeout":
        said = (
            f"Our send request for {name} timed out: it does not tell whether {carrier} "
            "took the message."
        )
    elif o["source"] == "send" and status == "failed":
        said = f"{carrier.capitalize()} refused our send request for {name}."
    elif o["source"] == "reconcile" and raw == "not_found":
        said = f"A reconciliation check found no trace of {name} at {carrier}."
    elif o["source"] == "reconcile" and raw == "not_seen":
        said = (
            f"A reconciliation check did not see {name} at {carrier}, whose list leaves out "
            "a message still queued or scheduled: it may still be sent."
        )
    else:
        source = SOURCE_WORDS.get(o["source"], f"An observation ({o['source']})").format(
            carrier=carrier
        )
        said = f"{source} said {name} was {state_words(status or raw, channel)}."
    if o["provider_code"]:
        said += f" Error {meaning(o['provider_code'])}."
    if o["conflict"]:
        flag = "conflict: flagged for review"
        said += (
            " It contradicts the outcome already recorded, so it was kept and flagged "
            "for review (see Reconciliation)."
        )
    elif o["applied"]:
        flag = "applied"
        if o.get("verdict") == "settles_unknown":
            said += " It settled the earlier unknown outcome."
    else:
        flag = "kept as evidence, not applied (stale)"
        known = (
            f"the attempt was then {state_words(known_then, channel)}"
            if known_then
            else "a later state was on record"
        )
        said += (
            f" It changed nothing: by then Herald already knew more ({known}); it is kept "
            "as evidence."
        )
    detail = [
        ("source", o["source"]),
        ("raw status", raw),
        ("provider time", time_text(moment(o["provider_at"])) if o["provider_at"] else "not given"),
        ("observed at", time_text(moment(o["observed_at"]), millis=True)),
        ("attempt token", o["attempt"] or "none"),
    ]
    if o["provider_code"]:
        detail.append(("provider code", o["provider_code"]))
    if o.get("verdict"):
        detail.append(("verdict", o["verdict"]))
    return Entry(o["observed_at"], "observation", said, detail, flag)


def _quoted(reason: str) -> str:
    return f": “{reason}”" if reason else ""


def _operator(a: dict[str, Any]) -> Entry:
    who = acting_operator(a)
    detail_of = a["detail"] or {}
    refused = a["outcome"] == "refused"
    why = ""
    if refused and "why" in detail_of:
        why = f" Refused: {str(detail_of['why']).rstrip('.')}."
    action = a["action"]
    reason = _quoted(a["reason"])
    if action == "cancel":
        sentence = (
            f"{who} asked to cancel the intent{reason}.{why}"
            if refused
            else f"{who} cancelled the intent{reason}."
        )
    elif action == "approve-resend":
        channel = channel_word(detail_of.get("channel"))
        sentence = (
            f"{who} asked for a resend by {channel}{reason}.{why}"
            if refused
            else f"{who} approved a resend by {channel}{reason}."
        )
    elif action == "reveal":
        sentence = f"{who} revealed the destinations{reason}."
    elif action == "legal-hold":
        held = "put the intent under legal hold" if detail_of.get("on") else "lifted its legal hold"
        sentence = f"{who} {held}{reason}."
    elif action == "settle":
        rule = detail_of.get("rule", "a rule")
        if refused:
            sentence = f"{who} asked to settle the unknown outcome under {rule}{reason}.{why}"
        else:
            outcome = detail_of.get("outcome", "settled")
            resend = (
                " A resend may follow."
                if detail_of.get("resend_allowed") == "true"
                else " No resend follows from it."
            )
            sentence = (
                f"{who} settled the unknown outcome as {outcome} under the rule {rule}"
                f"{reason}.{resend}"
            )
    elif action == "open-review":
        what = f"the {channel_word(detail_of.get('channel'))} attempt"
        kind = detail_of.get("kind", "review")
        if refused:
            sentence = f"{who} asked to open a review item for {what}{reason}.{why}"
        else:
            again = "reopened" if detail_of.get("reopened") == "true" else "opened"
            sentence = f"{who} {again} a review item ({kind}) for {what}{reason}."
    elif action == "settlement-expired":
        sentence = (
            "The settlement window closed with no decision: the attempt stays unknown and "
            "nothing is sent again."
        )
    elif action == "workflow-closed":
        sentence = (
            f"The reconciler found the workflow {detail_of.get('workflow_status', 'closed')} "
            f"while the intent was {detail_of.get('intent_state', 'open')}: review it."
        )
    else:
        sentence = f"{who}: {action} ({a['outcome']}){reason}.{why}"
    detail = [("who", who), ("why", a["reason"] or "—"), ("outcome", a["outcome"])]
    for key, value in detail_of.items():
        if key in CLAIM_KEYS:
            continue  # said once, in `who`
        # The refusal's own `why` is the system's, beside the operator's reason.
        detail.append(("refused because" if key == "why" else key, str(value)))
    return Entry(a["at"], "operator", sentence, detail)


def entries_of(doc: dict[str, Any]) -> list[Entry]:
    """The timeline of `ledger.timeline.timeline`, one sentence per entry, in order."""
    attempts = {a["token"]: a for a in doc["attempts"]}
    prepared = {a["token"]: a["prepared_at"] for a in doc["attempts"]}
    entries: list[Entry] = [_decision(d) for d in doc["decisions"]]
    for a in doc["attempts"]:
        entries.extend(_attempt(a))
    known = _known_before(doc["observations"])
    entries.extend(
        _observation(o, attempts, known.get(i)) for i, o in enumerate(doc["observations"])
    )
    placed: dict[int, datetime] = {}
    for a in doc["operator_actions"]:
        entry = _operator(a)
        placed[id(entry)] = approval_time(a, doc, prepared)
        entries.append(entry)
    for index, entry in enumerate(entries):
        at = placed.get(id(entry), moment(entry.at))
        entry.order = (at, KIND_ORDER.index(entry.kind), index)
    entries.sort(key=lambda e: e.order)
    seconds = Counter(moment(e.at).replace(microsecond=0) for e in entries if e.at)
    for entry in entries:
        if entry.at:
            at = moment(entry.at)
            entry.time_text = time_text(at, millis=seconds[at.replace(microsecond=0)] > 1)
    return entries
