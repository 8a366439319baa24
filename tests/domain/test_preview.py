"""Preview (a version rendered with sample variables, as an attempt would be, with the
links Herald adds shown as placeholders) and diffs of template and policy versions."""

from __future__ import annotations

import pytest

from domain.keys import content_sha256
from domain.preview import (
    UNSUBSCRIBE_PLACEHOLDER,
    diff_policies,
    diff_template,
    diff_template_versions,
    preview,
)
from domain.template_variables import schema_of
from domain.templates import TemplateError, TemplateVersion, missing_variables, render

SMS = TemplateVersion("order", 2, "sms", "en", "Order {{ order_id }} is confirmed.")
EMAIL = TemplateVersion(
    "order", 2, "email", "en", "Hello {{ name }},\nyour order.", "Order {{ order_id }}"
)


def test_an_sms_preview_is_the_text_an_attempt_would_send_with_its_segments_and_hash() -> None:
    shown = preview(
        SMS, {"order_id": "o-7"}, category="promotional", footer="Reply STOP to opt out."
    )
    assert shown.text == "Order o-7 is confirmed.\nReply STOP to opt out."
    assert (shown.encoding, shown.segments, shown.subject) == ("GSM-7", 1, None)
    sent = render(SMS, {"order_id": "o-7"}, footer="Reply STOP to opt out.")
    assert shown.sha256 == sent.sha256 == content_sha256(shown.text)
    assert shown.links == ()
    ucs2 = preview(SMS, {"order_id": "o-7 ✓"}, category="transactional")
    assert (ucs2.encoding, ucs2.segments) == ("UCS-2", 1)


def test_the_unsubscribe_link_herald_adds_shows_as_a_placeholder_and_is_no_variable() -> None:
    variables = {"order_id": "o-7", "name": "Ada"}
    shown = preview(EMAIL, variables, category="promotional")
    assert shown.subject == "Order o-7"
    assert [(link.name, link.value) for link in shown.links] == [
        ("unsubscribe", UNSUBSCRIBE_PLACEHOLDER)
    ]
    assert "List-Unsubscribe" in shown.links[0].where
    assert missing_variables(EMAIL, variables) == []  # the link is never asked of an app
    assert preview(EMAIL, variables, category="transactional").links == ()


def test_a_preview_names_every_sample_variable_missing() -> None:
    with pytest.raises(TemplateError, match="needs name, order_id, missing from the sample"):
        preview(EMAIL, {}, category="transactional")


def test_a_preview_refuses_a_wrong_shaped_sample_naming_the_variable_as_intake_does() -> None:
    declared = TemplateVersion(
        "order", 3, "sms", "en", "{{ lines | length }} lines for {{ order_id }}", None,
        schema_of({"order_id": "text", "lines": {"type": "list", "of": "text"}}),
    )  # fmt: skip
    with pytest.raises(TemplateError) as refused:
        preview(declared, {"order_id": "o-7", "lines": [{"n": "Poster"}]}, category="transactional")
    assert str(refused.value) == (
        "template 'order': variable 'lines' must be a list of text; item 0 is an object"
    )
    assert "Poster" not in str(refused.value)
    shown = preview(declared, {"order_id": "o-7", "lines": ["Poster"]}, category="transactional")
    assert shown.text == "1 lines for o-7"


def test_a_template_diff_shows_subject_and_body_lines_changed_between_versions() -> None:
    old = TemplateVersion("order", 1, "email", "en", "Hello {{ name }},\nyour order.", "Order")
    text = diff_template(old, EMAIL)
    assert text.splitlines()[:2] == [
        "--- order v1 (email/en)",
        "+++ order v2 (email/en)",
    ]
    assert "-subject: Order" in text and "+subject: Order {{ order_id }}" in text
    assert " Hello {{ name }}," in text  # unchanged lines are context
    assert diff_template(EMAIL, EMAIL) == ""
    with pytest.raises(TemplateError, match="one template, channel and locale"):
        diff_template(SMS, EMAIL)


def test_a_version_diff_covers_every_channel_and_locale_and_leaves_out_the_unchanged() -> None:
    versions = [
        TemplateVersion("order", 1, "sms", "en", "Order {{ order_id }}."),
        SMS,
        TemplateVersion("order", 1, "email", "en", EMAIL.body, EMAIL.subject),
        EMAIL,
        TemplateVersion("order", 2, "sms", "fr", "Commande {{ order_id }}."),
    ]
    diffs = diff_template_versions(versions, "order", 1, 2)
    assert sorted(diffs) == [("sms", "en"), ("sms", "fr")]
    assert diffs[("sms", "fr")].splitlines()[0] == "--- /dev/null"
    assert "+Commande {{ order_id }}." in diffs[("sms", "fr")]
    with pytest.raises(TemplateError, match="neither version 3 nor 4"):
        diff_template_versions(versions, "order", 3, 4)


def test_a_policy_diff_is_a_unified_diff_of_the_two_documents() -> None:
    text = diff_policies("p-1", 'version = "p-1"\n[rules]\n', "p-2", 'version = "p-2"\n[rules]\n')
    assert text.splitlines() == [
        "--- policy p-1",
        "+++ policy p-2",
        "@@ -1,2 +1,2 @@",
        '-version = "p-1"',
        '+version = "p-2"',
        " [rules]",
    ]
