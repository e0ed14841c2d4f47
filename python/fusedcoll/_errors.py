"""fusedcoll's exception classes in Python, and the translation of the operators' errors.

The operators raise what PyTorch makes of a C++ error: ``ValueError`` for fusedcoll's
``InvalidArgument``, ``NotImplementedError`` for ``UnsupportedError``, ``RuntimeError`` for the
rest, each message tagged ``"fusedcoll <code>: "``. The functions of this package raise the
matching class below instead, with fusedcoll's message (the tag removed). Every class derives from
the built-in exception the operator raises, so ``except ValueError`` catches both.
"""

import builtins
import functools
import re

__all__ = [
    "Error", "InvalidArgument", "UnsupportedError", "TimeoutError", "BackendError",
    "InternalError", "ProtocolError", "NotInitializedError",
]


class Error(RuntimeError):
    """Base of fusedcoll's exceptions (C++ ``fusedcoll::Error``)."""
    code = "error"


class InvalidArgument(Error, ValueError):
    """A precondition of the call does not hold; the message names the offending value."""
    code = "invalid_argument"


class UnsupportedError(Error, NotImplementedError):
    """Well-formed, but not supported by this backend or build."""
    code = "unsupported"


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 (fusedcoll's, like the C++ name)
    """A wait expired (``FUSEDCOLL_TIMEOUT``); the message names who waited for what."""
    code = "timeout"


class BackendError(Error):
    """A foreign API (MPI, the OS) failed, or a run was aborted by a failure elsewhere."""
    code = "backend"


class InternalError(Error):
    """An invariant of fusedcoll broke: a bug in fusedcoll."""
    code = "internal"


class ProtocolError(Error):
    """A kernel broke the put/signal/wait protocol (the emulator's checking mode)."""
    code = "protocol"


class NotInitializedError(Error):
    """A call before ``fusedcoll.init()`` (or, on the emulator, outside ``fusedcoll.run``)."""
    code = "not_initialized"


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, UnsupportedError, TimeoutError,
                                      BackendError, InternalError, ProtocolError,
                                      NotInitializedError)}
# fusedcoll::ErrorCode's values (include/fusedcoll/error.hpp).
_BY_NUMBER = {1: InvalidArgument, 2: UnsupportedError, 3: TimeoutError, 4: BackendError,
              5: InternalError, 6: ProtocolError}
_TAG = re.compile(r"fusedcoll ([a-z_]+): ")


def from_operator(exc):
    """The fusedcoll exception for an operator's exception, or None when it is not tagged."""
    message = str(exc)
    match = _TAG.match(message)
    if match is None or match.group(1) not in _BY_CODE:
        return None
    return _BY_CODE[match.group(1)](message[match.end():])


def from_code(number, message):
    """The fusedcoll exception for an ``ErrorCode`` value and a message."""
    return _BY_NUMBER.get(number, InternalError)(message)


def translated(fn):
    """Makes ``fn`` raise fusedcoll's exception classes for tagged operator errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Error:
            raise
        except (RuntimeError, ValueError, NotImplementedError) as exc:
            translated_exc = from_operator(exc)
            if translated_exc is None:
                raise
            raise translated_exc from None
    return wrapper
