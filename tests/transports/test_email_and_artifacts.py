"""SmtpEmail into the SmtpSink, and the artifact store that feeds it attachments."""

from __future__ import annotations

import hashlib
import os
import stat
from email.message import EmailMessage
from pathlib import Path

import pytest

from ledger.artifacts import (
    ArtifactMismatch,
    ArtifactMissing,
    ArtifactRef,
    FolderArtifactStore,
)
from simulators.smtp import SmtpSink
from transports.email import EmailAttachment, EmailMessageSpec, EmailSubmitted, message_id_for
from transports.errors import EmailAmbiguousError, EmailPermanentError, EmailTransientError
from transports.smtp import DkimConfig, SmtpEmail

PDF = b"%PDF-1.4\n" + bytes(range(256)) * 40 + b"\n%%EOF\n"
TOKEN = "order-created:o-77:email:1"


def spec(**overrides: object) -> EmailMessageSpec:
    fields: dict[str, object] = {
        "token": TOKEN,
        "to": "Ada Member <ada@example.org>",
        "sender": "Herald <notify@herald.example>",
        "subject": "Your order o-77 was created",
        "text": "Thanks for your order o-77.\n",
    }
    fields.update(overrides)
    return EmailMessageSpec(**fields)  # type: ignore[arg-type]


def smtp_for(sink: SmtpSink, **options: object) -> SmtpEmail:
    return SmtpEmail(host="127.0.0.1", port=sink.port, **options)  # type: ignore[arg-type]


async def test_a_message_with_an_artifact_attachment_arrives_intact(
    clean_sink: SmtpSink, tmp_path: Path
) -> None:
    store = FolderArtifactStore(tmp_path / "artifacts")
    ref = store.put(PDF, media_type="application/pdf", filename="invoice-o-77.pdf")
    attachment = EmailAttachment(ref.filename, ref.media_type, store.get(ref))

    result = await smtp_for(clean_sink).send(spec(attachments=[attachment]))

    assert isinstance(result, EmailSubmitted)
    assert result.message_id == message_id_for(TOKEN)
    assert result.message_id == f"<{hashlib.sha256(TOKEN.encode()).hexdigest()[:32]}@herald>"
    assert result.response.startswith("250")
    (received,) = await clean_sink.wait_for(1)
    got: EmailMessage = received.message
    assert received.mail_from == "notify@herald.example"
    assert received.rcpt_tos == ("ada@example.org",)
    assert got["Message-ID"] == result.message_id
    assert got["Subject"] == "Your order o-77 was created"
    assert got["To"] == "Ada Member <ada@example.org>"
    assert got["Auto-Submitted"] == "auto-generated"
    assert got["Date"] is not None
    assert "List-Unsubscribe" not in got and "List-Unsubscribe-Post" not in got
    assert got.get_body(("plain",)).get_content() == "Thanks for your order o-77.\n"
    (part,) = list(got.iter_attachments())
    assert part.get_filename() == "invoice-o-77.pdf"
    assert part.get_content_type() == "application/pdf"
    content = part.get_content()
    assert content == PDF
    assert hashlib.sha256(content).hexdigest() == ref.sha256


async def test_one_click_unsubscribe_headers_are_set_when_an_url_is_given(
    clean_sink: SmtpSink,
) -> None:
    url = "https://herald.example/v1/unsubscribe/abc123"
    await smtp_for(clean_sink).send(spec(unsubscribe_url=url, html="<p>Thanks</p>"))
    (received,) = await clean_sink.wait_for(1)
    assert received.message["List-Unsubscribe"] == f"<{url}>"
    assert received.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert received.message.get_body(("html",)).get_content().strip() == "<p>Thanks</p>"


async def test_the_same_token_always_gives_the_same_message_id(clean_sink: SmtpSink) -> None:
    first = await smtp_for(clean_sink).send(spec())
    second = await smtp_for(clean_sink).send(spec())
    other = await smtp_for(clean_sink).send(spec(token="order-created:o-77:email:2"))
    assert first.message_id == second.message_id != other.message_id
    assert smtp_for(clean_sink, message_id_domain="mail.example").message_id_domain
    assert message_id_for(TOKEN, "mail.example").endswith("@mail.example>")


async def test_a_tampered_artifact_is_refused_before_any_smtp_connection(
    clean_sink: SmtpSink, tmp_path: Path
) -> None:
    store = FolderArtifactStore(tmp_path / "artifacts")
    ref = store.put(PDF, media_type="application/pdf", filename="invoice.pdf")
    path = store.path_for(ref.sha256)
    os.chmod(path, 0o644)
    path.write_bytes(PDF.replace(b"%%EOF", b"%%EOX"))  # same size, different bytes

    with pytest.raises(ArtifactMismatch) as caught:
        attachment = EmailAttachment(ref.filename, ref.media_type, store.get(ref))
        await smtp_for(clean_sink).send(spec(attachments=[attachment]))

    assert "hashes to" in caught.value.reason and caught.value.sha256 == ref.sha256
    assert clean_sink.connections == 0 and clean_sink.messages == []


async def test_a_message_over_the_size_limit_is_permanent_and_never_connects(
    clean_sink: SmtpSink,
) -> None:
    big = EmailAttachment("big.bin", "application/octet-stream", b"\0" * 20_000)
    with pytest.raises(EmailPermanentError) as caught:
        await smtp_for(clean_sink).send(spec(attachments=[big], max_bytes=10_000))
    assert "over the 10000-byte limit" in caught.value.reason
    assert clean_sink.connections == 0


async def test_a_5xx_recipient_refusal_is_permanent_and_a_4xx_is_transient(
    clean_sink: SmtpSink,
) -> None:
    clean_sink.refusals["gone@example.org"] = "550 5.1.1 no such user"
    clean_sink.refusals["full@example.org"] = "452 4.2.2 mailbox full"
    with pytest.raises(EmailPermanentError) as permanent:
        await smtp_for(clean_sink).send(spec(to="gone@example.org"))
    with pytest.raises(EmailTransientError) as transient:
        await smtp_for(clean_sink).send(spec(to="full@example.org"))
    assert (permanent.value.code, transient.value.code) == (550, 452)
    assert "gone@example.org" not in str(permanent.value)
    assert clean_sink.messages == []


async def test_a_timeout_after_data_is_ambiguous(clean_sink: SmtpSink) -> None:
    clean_sink.stalls["slow@example.org"] = 5.0
    with pytest.raises(EmailAmbiguousError):
        await smtp_for(clean_sink, timeout=0.5).send(spec(to="slow@example.org"))
    assert clean_sink.stalled == 1


async def test_an_unreachable_relay_is_transient(tmp_path: Path) -> None:
    sink = SmtpSink()
    await sink.start()
    port = sink.port
    await sink.stop()
    with pytest.raises(EmailTransientError):
        await SmtpEmail(host="127.0.0.1", port=port, timeout=1).send(spec())


async def test_the_sink_writes_each_message_to_its_maildir(tmp_path: Path) -> None:
    async with SmtpSink(maildir=tmp_path / "mail") as sink:
        assert sink.port != 0
        await SmtpEmail(host="127.0.0.1", port=sink.port).send(spec())
        (received,) = await sink.wait_for(1)
    assert received.path == tmp_path / "mail" / "1.eml"
    assert received.path.read_bytes() == received.raw
    assert message_id_for(TOKEN).encode() in received.raw


async def test_a_dkim_signed_message_verifies_over_the_unsubscribe_headers(
    clean_sink: SmtpSink,
) -> None:
    import base64

    import dkim
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)
    config = DkimConfig("herald.example", "s1", pem)
    await smtp_for(clean_sink, dkim=config).send(
        spec(unsubscribe_url="https://herald.example/v1/unsubscribe/t.mac")
    )
    (received,) = await clean_sink.wait_for(1)
    raw = received.raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    signature = received.message["DKIM-Signature"]
    assert "list-unsubscribe" in signature.lower() and "list-unsubscribe-post" in signature.lower()

    def dns(name: bytes, timeout: int = 5) -> bytes:
        assert name == b"s1._domainkey.herald.example."
        return record

    assert dkim.verify(raw, dnsfunc=dns)
    # A changed header breaks the signature: the check is real.
    assert not dkim.verify(
        raw.replace(b"List-Unsubscribe: <https", b"List-Unsubscribe: <http"), dnsfunc=dns
    )


def test_the_store_is_content_addressed_read_only_and_idempotent(tmp_path: Path) -> None:
    store = FolderArtifactStore(tmp_path)
    ref = store.put(b"hello", media_type="text/plain", filename="a.txt")
    digest = hashlib.sha256(b"hello").hexdigest()
    assert ref == ArtifactRef(digest, 5, "text/plain", "a.txt", str(tmp_path / digest[:2] / digest))
    assert stat.S_IMODE(os.stat(ref.location).st_mode) == 0o444
    assert store.put(b"hello", media_type="text/plain", filename="a.txt") == ref
    assert store.get(ref) == b"hello"
    assert [p.name for p in (tmp_path / digest[:2]).iterdir()] == [digest], "no temp files left"


def test_a_size_change_a_missing_file_and_a_forged_reference_are_all_refused(
    tmp_path: Path,
) -> None:
    store = FolderArtifactStore(tmp_path)
    ref = store.put(b"hello", media_type="text/plain", filename="a.txt")
    os.chmod(ref.location, 0o644)
    Path(ref.location).write_bytes(b"hello, world")
    with pytest.raises(ArtifactMismatch, match="12 bytes on disk"):
        store.get(ref)
    with pytest.raises(ArtifactMismatch):
        store.put(b"hello", media_type="text/plain", filename="a.txt")
    with pytest.raises(ArtifactMissing):
        store.get(ArtifactRef("0" * 64, 1, "text/plain", "x", "elsewhere"))
    with pytest.raises(ValueError):
        store.get(ArtifactRef("../../etc/passwd", 1, "text/plain", "x", "x"))
