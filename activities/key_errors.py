"""An activity that meets a data key it cannot use stops its intent, once.

A key id the worker's ring lacks, or a ciphertext that does not open under its key, is not
cured by a retry: the ring is read when the process starts. The activity files a
`data_key_unreadable` review item and counts the metric (ledger.keys.file_unreadable),
then fails with a non-retryable `DataKeyUnreadable`, which the workflow meets on the path
it already has for a permanent failure (the channel fails with the reason; see
docs/operations.md, "The data key").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from cryptography.exceptions import InvalidTag
from temporalio.exceptions import ApplicationError

from activities import now_utc
from activities.contracts import ErrorType
from ledger.crypto import KeyRingError
from ledger.keys import file_unreadable
from ledger.transactions import Transactions

KEY_ERRORS = (KeyRingError, InvalidTag)


@contextlib.asynccontextmanager
async def stopping_on_key_errors(
    tx: Transactions, step: str, *, intent_id: str | None = None, attempt_token: str | None = None
) -> AsyncIterator[None]:
    """Turn a key error inside the block into a review item, the metric and a
    non-retryable ApplicationError (type DataKeyUnreadable). The message names the key id,
    never a field's content."""
    try:
        yield
    except KEY_ERRORS as err:
        problem = str(err) or "a ciphertext does not open under the data key its prefix names"
        await tx(
            lambda s: file_unreadable(
                s,
                step=step,
                problem=problem,
                now=now_utc(),
                intent_id=intent_id,
                attempt_token=attempt_token,
            )
        )
        raise ApplicationError(
            f"this worker's data key ring cannot read the intent's contact data: {problem}",
            type=ErrorType.DATA_KEY_UNREADABLE,
            non_retryable=True,
        ) from None
