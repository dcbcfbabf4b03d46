"""Type stubs of the native module (crates/leasehold-py/src)."""

from datetime import timedelta
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, Union

_Duration = Union[int, float, timedelta]

__version__: str

class LeaseholdError(Exception): ...
class InvalidArgument(LeaseholdError, ValueError): ...

class ConnectionFailed(LeaseholdError, ConnectionError):
    ambiguous: bool

class PermissionDenied(LeaseholdError, PermissionError): ...
class TopologyError(LeaseholdError): ...
class AuthenticationFailed(LeaseholdError): ...
class ServerError(LeaseholdError): ...
class FencingExhausted(LeaseholdError): ...

class NotHeld(LeaseholdError):
    key: str

class NotAcquired(LeaseholdError, TimeoutError):
    key: str
    waited: float
    attempts: int

Busy = NotAcquired

class ExpiredOnArrival(LeaseholdError):
    key: str

class NotReplicated(LeaseholdError):
    key: str

class NoQuorum(LeaseholdError):
    key: str

class LockLost(LeaseholdError):
    key: str
    reason: Optional[str]

class Unsupported(LeaseholdError):
    backend: str

class Conflict(LeaseholdError):
    key: str

class BackendNotCompiled(LeaseholdError): ...
class UnexpectedReply(LeaseholdError): ...
class ForkedProcess(LeaseholdError): ...

class Lease:
    @property
    def key(self) -> str: ...
    @property
    def fence(self) -> Optional[int]: ...
    @property
    def token(self) -> str: ...
    @property
    def held(self) -> bool: ...
    @property
    def lost(self) -> bool: ...
    @property
    def loss_reason(self) -> Optional[str]: ...
    @property
    def remaining(self) -> float: ...
    def release(self) -> None: ...
    def release_async(self) -> Awaitable[None]: ...
    def extend(self, ttl: _Duration) -> None: ...
    def extend_async(self, ttl: _Duration) -> Awaitable[None]: ...
    def on_lost(self, callback: Callable[[], Any]) -> None: ...

class LeaderWatch:
    @property
    def current(self) -> Optional[Tuple[str, int]]: ...
    def changed(self) -> Optional[Tuple[str, int]]: ...
    def changed_async(self) -> Awaitable[Optional[Tuple[str, int]]]: ...

class Request:
    @property
    def key(self) -> str: ...
    def acquire(self) -> Lease: ...
    def acquire_async(self) -> Awaitable[Lease]: ...

class Locker:
    def __init__(
        self,
        url: str,
        *,
        connect_timeout: Optional[_Duration] = None,
        response_timeout: Optional[_Duration] = None,
        tls_ca_file: Optional[str] = None,
        tls_cert_file: Optional[str] = None,
        tls_key_file: Optional[str] = None,
        history: bool = False,
    ) -> None: ...
    @property
    def backend(self) -> str: ...
    def request(
        self,
        kind: str,
        key: str,
        *,
        ttl: _Duration,
        wait: Optional[_Duration] = None,
        fencing: bool = False,
        auto_extend: bool = False,
        fair: bool = False,
        permits: Optional[int] = None,
        keys: Optional[List[str]] = None,
        id: Optional[str] = None,
        max_hold: Optional[_Duration] = None,
        min_hold: Optional[_Duration] = None,
        renew_every: Optional[_Duration] = None,
        owner_label: Optional[str] = None,
        owner: bool = True,
    ) -> Request: ...
    def inspect(self, key: str) -> Dict[str, Any]: ...
    def list(self, pattern: str) -> List[Dict[str, Any]]: ...
    def history(self, key: str, limit: int) -> List[Dict[str, Any]]: ...
    def leader(self, name: str) -> Optional[Tuple[str, int]]: ...
    def watch_leader(self, name: str, every: _Duration) -> LeaderWatch: ...
    def raise_fencing_counter(self, key: str, at_least: int) -> int: ...
    def release(self, key: str, token: str, fair: bool) -> None: ...
    def extend(self, key: str, token: str, ttl: _Duration) -> None: ...
    def force_release(self, key: str, reason: str) -> Optional[int]: ...

def cleanups_settled(timeout: _Duration) -> bool: ...

def connect_async(
    url: str,
    *,
    connect_timeout: Optional[_Duration] = None,
    response_timeout: Optional[_Duration] = None,
    tls_ca_file: Optional[str] = None,
    tls_cert_file: Optional[str] = None,
    tls_key_file: Optional[str] = None,
    history: bool = False,
) -> Awaitable[Locker]: ...
