"""Where the warm server's socket lives, and who may be trusted on either end of it.

``crag ask`` sends its command line, working directory and settings to whatever answers on the
socket, and prints what comes back; ``crag serve`` runs what it is sent. So both ends check the
other: the socket lies in a directory that only its user may write (created ``0700``), the
socket file must be a socket owned by that user, and each end asks the kernel who the peer
process runs as (``SO_PEERCRED``) and talks only to the same user. A path that is not a socket
(a user's file, a directory) is never replaced.

Standard library only: the client imports this before anything heavy.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import stat
import struct
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

# The warm client's own variables, read with os.environ rather than as deployment settings
# (crag.settings.deployment): `crag ask` reads them before anything imports pydantic, so that a
# question reaches a running `crag serve` in milliseconds (importing the deployment settings
# took 0.6 to 1.3 s on 2 cores at load 4, 2026-12-02). They are also not sent to the server
# (CLIENT_ENV): they choose the server, they do not configure it.
SOCKET_ENV = "CRAG_SERVE_SOCKET"
"""Where the warm server listens (default: :func:`default_socket_path`)."""

AUTOSTART_ENV = "CRAG_SERVE_AUTOSTART"
"""``0`` (or ``off``, ``false``, ``no``): ``crag ask`` / ``crag ingest`` start no warm server."""

IDLE_TIMEOUT_ENV = "CRAG_SERVE_IDLE_TIMEOUT"
"""Seconds without a command after which a server ``crag ask`` started stops (default 900)."""

CLIENT_ENV = frozenset({SOCKET_ENV, AUTOSTART_ENV, IDLE_TIMEOUT_ENV})
"""The warm client's own ``CRAG_*`` variables: not deployment settings, so a server and its
clients need not agree on them (:func:`crag.app.warm.server.deployment_environment`)."""

MAX_SOCKET_PATH_BYTES = 100
"""A Unix socket's path must fit ``sun_path`` (108 bytes on Linux, 104 on macOS)."""


class SocketTrustError(ValueError):
    """The socket, its directory or the process on the other end is not this user's own."""


class WorkingDirectoryError(ValueError):
    """The process's working directory was deleted, or cannot be read."""


def _deleted_directory_name() -> str:
    """The name the kernel still knows the deleted working directory by (Linux), else ``""``."""
    try:
        name = os.readlink("/proc/self/cwd")
    except OSError:
        return ""
    return name.removesuffix(" (deleted)")


def current_directory() -> Path:
    """The working directory; a one-line error when it is gone.

    A directory deleted under a shell leaves its commands without one: ``os.getcwd()`` fails,
    and libraries loaded later fail in their own ways (a traceback, a native library's fatal
    error). The commands check it first, with only the standard library loaded.

    Raises:
        WorkingDirectoryError: It was deleted, or cannot be read.
    """
    try:
        return Path(os.getcwd())
    except FileNotFoundError as exc:
        name = _deleted_directory_name()
        where = f": {name}" if name else ""
        raise WorkingDirectoryError(
            f"the current directory no longer exists{where}; change to an existing directory"
        ) from exc
    except OSError as exc:
        raise WorkingDirectoryError(
            f"cannot read the current directory: {exc.strerror or exc}"
        ) from exc


def runtime_directory() -> Path:
    """The current user's private socket directory: ``$XDG_RUNTIME_DIR/crag``, else a temp one.

    The fallback is ``<tempdir>/crag-<uid>`` (as tmux does): its name is predictable, so another
    user may have made it first; :func:`check_private_directory` refuses it then.
    """
    base = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if base and Path(base).is_absolute():
        return Path(base) / "crag"
    return Path(tempfile.gettempdir()) / f"crag-{os.getuid()}"


def default_socket_path(cwd: Path | None = None) -> Path:
    """The socket of a server started in ``cwd``: one per directory, in the private directory.

    Named after a digest of the resolved directory, so the path stays short whatever the
    directory, and ``crag ask`` finds the server started in the directory it runs in.

    Raises:
        WorkingDirectoryError: No ``cwd`` is given and the working directory is gone.
    """
    where = (cwd or current_directory()).resolve()
    digest = hashlib.sha256(os.fsencode(where)).hexdigest()[:16]
    return runtime_directory() / f"serve-{digest}.sock"


def socket_path() -> Path:
    """The socket ``crag serve`` listens on and the clients try (``CRAG_SERVE_SOCKET`` first)."""
    configured = os.environ.get(SOCKET_ENV, "").strip()
    if configured:
        return Path(configured).expanduser().absolute()
    return default_socket_path()


def check_private_directory(directory: Path, *, create: bool) -> None:
    """Make sure nobody but this user can put a socket into ``directory`` (or swap ours).

    Owned by this user and writable by nobody else (no group or other write bit), as a
    directory ``0700`` created here is; ``create`` makes it (``0700``) when missing.

    Raises:
        SocketTrustError: It is not a directory, belongs to another user, or others may write it.
    """
    if create and not directory.exists():
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise SocketTrustError(
                f"cannot create the socket directory {directory}: {exc.strerror or exc}"
            ) from exc
    try:
        info = directory.stat()
    except OSError as exc:
        raise SocketTrustError(
            f"the socket directory {directory} is not usable: {exc.strerror or exc}"
        ) from exc
    if not stat.S_ISDIR(info.st_mode):
        raise SocketTrustError(f"the socket directory {directory} is not a directory")
    if info.st_uid != os.getuid():
        raise SocketTrustError(
            f"the socket directory {directory} belongs to another user (uid {info.st_uid})"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SocketTrustError(
            f"the socket directory {directory} may be written by other users "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); use a private one (mode 0700)"
        )


def existing_socket(path: Path) -> bool:
    """Whether ``path`` is a socket of this user (``False`` when nothing is there).

    Raises:
        SocketTrustError: Something else is at ``path`` (a file, a directory, a link), or a
            socket of another user.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketTrustError(f"{path} exists and is not a socket; refusing to replace it")
    if info.st_uid != os.getuid():
        raise SocketTrustError(f"the socket {path} belongs to another user (uid {info.st_uid})")
    return True


def peer_uid(conn: socket.socket) -> int | None:
    """The user id the process on the other end runs as, from the kernel (Linux).

    ``None`` where the platform has no ``SO_PEERCRED``: there, the socket file's owner and its
    private directory are the only checks.
    """
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, size))
    return int(uid)


def check_peer(conn: socket.socket) -> None:
    """Refuse a peer process that runs as another user.

    Raises:
        SocketTrustError: The peer's uid is not this process's.
    """
    uid = peer_uid(conn)
    if uid is not None and uid != os.getuid():
        raise SocketTrustError(f"the process on the other end runs as another user (uid {uid})")


def connect_trusted(path: Path, timeout: float) -> socket.socket | None:
    """Connect to a server of this user at ``path``; ``None`` when none answers there.

    Raises:
        SocketTrustError: ``path`` or its directory is not this user's own, or the process
            listening on it runs as another user.
    """
    if not existing_socket(path):
        return None
    check_private_directory(path.parent, create=False)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(str(path))
        check_peer(conn)
    except SocketTrustError:
        conn.close()
        raise
    except OSError:  # a socket left by a server that died
        conn.close()
        return None
    return conn


def prepare_socket_path(path: Path) -> None:
    """Get ``path`` ready to bind: its private directory made, a stale socket of ours removed.

    Raises:
        SocketTrustError: ``path`` is not a socket, or is someone else's, or its directory is
            not private; or a server already answers on it.
    """
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise SocketTrustError(
            f"the socket path {path} is too long for a Unix socket; set {SOCKET_ENV} to a "
            "shorter one"
        )
    check_private_directory(path.parent, create=True)
    probe = connect_trusted(path, timeout=2.0)
    if probe is not None:
        probe.close()
        raise SocketTrustError(f"a crag server already listens on {path}")
    if existing_socket(path):  # nothing answers: left by a server that died
        logger.info("removing the stale socket %s", path)
        path.unlink(missing_ok=True)
