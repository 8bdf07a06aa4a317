"""Domain errors. Each names the problem; the app maps each class to one HTTP status."""

from __future__ import annotations


class DomainError(Exception):
    """Base class: a request the domain layer refuses, with a message for the client."""

    status_code = 400


class InvalidInput(DomainError):
    """A value outside its constraint (422)."""

    status_code = 422


class NotFound(DomainError):
    """Unknown id, or an id of another tenant: the same answer, so ids do not leak (404)."""

    status_code = 404


class Conflict(DomainError):
    """The request contradicts what is stored: a step's score changed, a step out of order (409)."""

    status_code = 409


class PayloadTooLarge(DomainError):
    """A batch with more scores than the service accepts at once (413)."""

    status_code = 413


class BackendUnavailable(DomainError):
    """The backend that must vouch for a request could not be asked now; retry (503)."""

    status_code = 503


class Forbidden(DomainError):
    """An operator-only action, or acting for another tenant by name (403)."""

    status_code = 403
