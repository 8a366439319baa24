"""The one-click unsubscribe reference (RFC 8058).

An attempt token signed with the unsubscribe secret, so the link carries no address. The
email activity signs it and the API verifies it; both import it from here.
"""

from __future__ import annotations

import hashlib
import hmac

SUBSCRIPTION_LIKE = frozenset({"promotional", "operational"})
"""The categories whose email carries RFC 8058 one-click unsubscribe headers: the email
activity adds them at send, a preview shows where they go (domain.preview)."""


def unsubscribe_token(secret: str, token: str) -> str:
    """A signed, opaque unsubscribe reference for one attempt (no address inside)."""
    mac = hmac.new(secret.encode(), token.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{token}.{mac}"


def verify_unsubscribe_token(secret: str, value: str) -> str | None:
    """The attempt token `value` was signed for, or None when the signature is not ours."""
    token, _, mac = value.rpartition(".")
    expected = unsubscribe_token(secret, token).encode("utf-8")
    if token and hmac.compare_digest(expected, value.encode("utf-8", "surrogatepass")):
        return token
    return None
