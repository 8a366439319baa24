"""Field encryption: keys rotate without re-indexing lookups, ciphertexts are bound to
their context, a bad key ring names its problem, production refuses to run without a key."""

from __future__ import annotations

import base64
import os
import stat

import pytest
from cryptography.exceptions import InvalidTag

from ledger.crypto import FieldCipher, KeyRingError
from settings import MissingDataKey, Settings

OLD = "k1:" + base64.b64encode(b"o" * 32).decode()
NEW = "k2:" + base64.b64encode(b"n" * 32).decode()
PHONE = "+447400000100"


def test_a_new_key_prepended_to_the_ring_still_decrypts_old_ciphertexts():
    old = FieldCipher(OLD)
    sealed = old.encrypt(PHONE, context="order-created:o-77")
    rotated = FieldCipher(f"{NEW},{OLD}")
    assert rotated.decrypt(sealed, context="order-created:o-77") == PHONE
    fresh = rotated.encrypt(PHONE, context="order-created:o-77")
    assert fresh.startswith("k2:") and sealed.startswith("k1:")
    assert rotated.decrypt(fresh, context="order-created:o-77") == PHONE


def test_rotating_the_encryption_key_leaves_lookup_hmacs_unchanged():
    assert FieldCipher(f"{NEW},{OLD}").lookup_hmac(PHONE) == FieldCipher(OLD).lookup_hmac(PHONE)


def test_a_ciphertext_does_not_decrypt_under_another_context():
    cipher = FieldCipher(OLD)
    sealed = cipher.encrypt(PHONE, context="order-created:o-77:sms:1")
    with pytest.raises(InvalidTag):
        cipher.decrypt(sealed, context="order-created:o-78:sms:1")


def test_the_same_plaintext_encrypts_differently_each_time():
    cipher = FieldCipher(OLD)
    assert cipher.encrypt(PHONE, context="c") != cipher.encrypt(PHONE, context="c")


def test_a_ciphertext_under_a_key_that_left_the_ring_names_the_missing_key():
    sealed = FieldCipher(OLD).encrypt(PHONE, context="c")
    with pytest.raises(KeyRingError, match="no data key 'k1'"):
        FieldCipher(NEW).decrypt(sealed, context="c")


@pytest.mark.parametrize(
    ("ring", "problem"),
    [
        ("", "empty"),
        (" , ", "empty"),
        (base64.b64encode(b"x" * 32).decode(), "kid:base64key"),
        (":" + base64.b64encode(b"x" * 32).decode(), "kid:base64key"),
        ("k1:" + base64.b64encode(b"short").decode(), "'k1' must be 32 bytes"),
        # What an engineer met as `binascii.Error: Incorrect padding` in every entry point.
        ("k1:" + base64.b64encode(b"x" * 32).decode()[:-2], "'k1' is not valid base64"),
        ("k1:not base64 at all!", "'k1' is not valid base64"),
        (f"{OLD},k1:" + base64.b64encode(b"y" * 32).decode(), "'k1' appears twice"),
        ("k 1:" + base64.b64encode(b"x" * 32).decode(), "data key id 'k 1'"),
    ],
)
def test_a_bad_key_ring_is_refused_naming_the_problem(ring, problem):
    with pytest.raises(KeyRingError, match=problem) as refused:
        FieldCipher(ring)
    assert "\n" not in str(refused.value) and base64.b64encode(b"x" * 32).decode() not in str(
        refused.value
    )  # one line, and never the key material


def test_production_without_a_data_key_refuses_to_start(monkeypatch, tmp_path):
    monkeypatch.delenv("HERALD_DATA_KEY", raising=False)
    with pytest.raises(ValueError, match="HERALD_DATA_KEY"):
        Settings(
            env="production",
            data_dir=tmp_path,
            sms_auth_token="t",
            operator_token="o",
            unsubscribe_secret="u",
        )
    assert not (tmp_path / "data.key").exists()


def test_dev_generates_a_usable_data_key_readable_only_by_its_owner(monkeypatch, tmp_path):
    monkeypatch.delenv("HERALD_DATA_KEY", raising=False)
    ring = Settings(env="dev", data_dir=tmp_path).resolved_data_keys(create=True)
    key_file = tmp_path / "data.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert Settings(env="dev", data_dir=tmp_path).resolved_data_keys() == ring
    cipher = FieldCipher(ring)
    assert cipher.decrypt(cipher.encrypt(PHONE, context="c"), context="c") == PHONE


def test_only_a_creator_makes_a_data_key_anything_else_names_the_folder(monkeypatch, tmp_path):
    # `herald dev` and `herald migrate` create it; a command run in the wrong folder must
    # not make a second key that the real stack never sees.
    monkeypatch.delenv("HERALD_DATA_KEY", raising=False)
    with pytest.raises(MissingDataKey, match=str(tmp_path.resolve())):
        Settings(env="dev", data_dir=tmp_path).resolved_data_keys()
    assert not (tmp_path / "data.key").exists()
