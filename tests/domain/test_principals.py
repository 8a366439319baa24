"""The roles as a table: what each grants, the role a refusal names, names and masking."""

from __future__ import annotations

import pytest

from domain.destinations import masked
from domain.principals import (
    BREAK_GLASS_NAME,
    Access,
    Principal,
    Role,
    check_name,
    least_role_for,
    local_principal_name,
    roles_for,
)


def test_viewer_operator_admin_each_add_to_the_one_before_and_app_stands_apart():
    assert Role.VIEWER.grants < Role.OPERATOR.grants < Role.ADMIN.grants
    assert Role.APP.may(Access.CREATE_INTENTS) and Role.APP.may(Access.READ_INTENTS)
    assert not Role.APP.may(Access.READ_EVIDENCE) and not Role.APP.may(Access.OPERATE)
    assert not Role.VIEWER.may(Access.CREATE_INTENTS) and not Role.VIEWER.may(Access.OPERATE)
    assert not Role.OPERATOR.may(Access.ADMINISTER)
    assert all(Role.ADMIN.may(access) for access in Access)


@pytest.mark.parametrize(
    ("access", "needed", "allowed"),
    [
        (Access.CREATE_INTENTS, "app", ["app", "admin"]),
        (Access.READ_INTENTS, "app", ["app", "viewer", "operator", "admin"]),
        (Access.READ_EVIDENCE, "viewer", ["viewer", "operator", "admin"]),
        (Access.RECORD_CONSENT, "app", ["app", "operator", "admin"]),
        (Access.CANCEL_INTENTS, "app", ["app", "operator", "admin"]),
        (Access.UPLOAD_ATTACHMENTS, "app", ["app", "operator", "admin"]),
        (Access.READ_CONTENT, "app", ["app", "viewer", "operator", "admin"]),
        (Access.OPERATE, "operator", ["operator", "admin"]),
        (Access.REVIEW_CONTENT, "operator", ["operator", "admin"]),
        (Access.ADMINISTER, "admin", ["admin"]),
    ],
)
def test_a_refusal_names_the_least_role_that_may(access, needed, allowed):
    assert least_role_for(access).value == needed
    assert [r.value for r in roles_for(access)] == allowed


@pytest.mark.parametrize("name", ["", "ann@example.com", "-x", "a b", "x" * 81, BREAK_GLASS_NAME])
def test_a_name_that_is_not_a_plain_word_is_refused(name):
    with pytest.raises(ValueError):
        check_name(name)


def test_a_local_user_name_becomes_a_principal_name():
    assert local_principal_name("ana") == "ana"
    assert check_name(local_principal_name("DOMAIN\\ann lee")) == "DOMAIN-ann-lee"
    assert local_principal_name("@@") == "local-admin"


def test_destinations_are_masked_to_confirm_not_to_contact():
    assert masked("+447400000142") == "+44********42"
    assert masked("ann.lee@example.com") == "a***@example.com"


def test_an_app_reads_only_the_intents_it_created_and_people_read_all():
    shop = Principal("shop", Role.APP)
    assert shop.reads_only_own_intents
    assert shop.reads_intent_of("shop")
    assert not shop.reads_intent_of("gym") and not shop.reads_intent_of(None)
    for role in (Role.VIEWER, Role.OPERATOR, Role.ADMIN):
        person = Principal("ana", role)
        assert not person.reads_only_own_intents
        assert person.reads_intent_of("gym") and person.reads_intent_of(None)
        assert person.may(Access.FIND_BY_RECIPIENT)
    assert not shop.may(Access.FIND_BY_RECIPIENT)
