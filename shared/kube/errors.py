"""The one error an API call raises, with one property per status the callers act on.

Callers ask `exc.not_found`, `exc.conflict`, `exc.already_exists`, `exc.forbidden`,
`exc.invalid`, `exc.gone`, never a raw status number, so what a status means is written once,
here.
Every adapter (the HTTP client, the reconciler's fake) raises it; the reflector
re-lists on :attr:`ApiError.gone`.
"""

from __future__ import annotations


class ApiError(Exception):
    """An API call that failed: `status` is the HTTP code, 0 when the server was not reached.

    `reason` is the Status object's reason (`NotFound`, `AlreadyExists`, `Conflict`, ...)
    when the server sent one.
    """

    def __init__(self, status: int, reason: str = "", *, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def unreachable(self) -> bool:
        """0: no answer from the server (connection refused, reset, timed out)."""
        return self.status == 0

    @property
    def unauthorized(self) -> bool:
        """401: the credentials were not accepted."""
        return self.status == 401

    @property
    def forbidden(self) -> bool:
        """403: RBAC, an admission policy or a webhook refused the request."""
        return self.status == 403

    @property
    def not_found(self) -> bool:
        """404: the object (or its collection) does not exist."""
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409 for any reason: a stale resourceVersion, or a create of an existing name."""
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        """409 AlreadyExists: a create found the name taken (not a stale write)."""
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def invalid(self) -> bool:
        """422: the request is invalid (a JSON patch whose `test` operation failed, among others)."""
        return self.status == 422

    @property
    def gone(self) -> bool:
        """410: the watch's resourceVersion (or a list's continue token) expired; re-list."""
        return self.status == 410
