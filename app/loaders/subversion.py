"""The connections Subversion may open from an archive visit's child process.

Subversion's C library (in the child, through subvertpy) and the ``svnrdump``
program the archive's svn loader runs connect by themselves: the check of
``app.loaders.outbound`` does not see their sockets, they follow HTTP
redirects, fetch ``svn:externals`` from any URL and resolve names again. So
the child gives Subversion a runtime configuration of its own (a private
configuration directory, nothing read from ``~/.subversion`` or
``/etc/subversion``) that

- sends every ``http``/``https`` connection through a forward proxy the child
  runs on loopback (``CheckingProxy``), which resolves each host itself,
  refuses an internal address not allowed (the URL rules) and connects to the
  address it checked: a redirect, an external and a second DNS answer are
  held like the visited URL;
- runs no tunnel (``svn+ssh://`` and other ``svn+NAME://`` fail).

Every session subvertpy opens and every URL the loader hands Subversion's
client (the repository, each external the loader exports itself) is checked
first (``Reach.check``: ``svn://`` by the rules and a resolution check,
``file://`` only under the loaders' working directories unless the rules
allow it); the externals an export or checkout would fetch (and theirs,
``MAX_EXTERNALS_DEPTH`` levels down) are read and checked first, all left out
when one is refused. ``svnrdump`` gets the configuration and, for ``svn://``,
the checked address instead of the host name (svnserve serves every host
name alike). What this cannot see (an ``svn://`` URL an ``http(s)`` server
redirects a session to, which Subversion's client follows itself, the second
resolution of an ``svn://`` host in the C library, externals deeper than
read) is held below the process by ``app.loaders.below``.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from app.inputs.rules import address, check_addresses, check_url, url_host
from app.loaders.git import host_literal, resolved_addresses, url_scheme
from app.loaders.outbound import rewrite_popen

#: Longest request head the proxy reads (Subversion's are a few hundred bytes).
MAX_HEAD_BYTES = 64 * 1024
#: How long the proxy waits to connect to a checked address.
CONNECT_TIMEOUT_S = 30.0
#: The schemes Subversion may reach: ``http``/``https`` through the proxy,
#: ``svn`` checked, ``file`` (the local copy the dump loader mounts).
SCHEMES = frozenset({"http", "https", "svn", "file"})
#: How deep externals of externals are read before an export (Subversion's
#: export fetches the externals of the externals it fetches).
MAX_EXTERNALS_DEPTH = 3
#: The programs started with the private configuration (``--config-dir``).
SVN_PROGRAMS = frozenset({"svn", "svnrdump"})

Resolver = Callable[..., list[tuple[Any, ...]]]
#: A program's argument that is a URL.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

log = logging.getLogger("revisit.loaders.subversion")


class CheckingProxy:
    """A forward proxy on loopback (``CONNECT`` for https, absolute-form requests
    for http) that connects only to checked addresses: each host resolved by the
    proxy, refused (403, its reason in ``refused``) when an address is internal and
    REVISIT_ALLOWED_INTERNAL_HOSTS does not allow it. A plain-http connection goes
    to the host of its first request (Subversion opens one per host), its requests
    passed on in absolute form (which HTTP/1.1 servers must accept)."""

    def __init__(self, resolve: Resolver = socket.getaddrinfo) -> None:
        self._resolve = resolve
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.refused: list[str] = []
        threading.Thread(target=self._serve, name="svn-proxy", daemon=True).start()

    def close(self) -> None:
        """Accept no more connections (those open end with the process)."""
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def connect(self, host: str, port: int) -> socket.socket:
        """A connection to ``host`` at an address it resolves to, after refusing
        (ValueError) an internal one not allowed."""
        found = [host] if address(host) is not None else None
        if found is None:
            infos = self._resolve(host, port, proto=socket.IPPROTO_TCP)
            found = sorted({str(info[4][0]) for info in infos})
        check_addresses(host, found)
        error: OSError = OSError(f"{host}: no address")
        for each in found:
            try:
                return socket.create_connection((each, port), timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                error = exc
        raise error

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        with client:
            head = _read_head(client)
            try:
                method, host, port = _target(head)
            except ValueError as exc:
                _answer(client, "400 Bad Request", str(exc))
                return
            try:
                upstream = self.connect(host, port)
            except ValueError as exc:
                self.refused.append(str(exc))
                log.warning("subversion: refused %s:%d: %s", host, port, exc)
                _answer(client, "403 Forbidden", str(exc))
                return
            except OSError as exc:
                _answer(client, "502 Bad Gateway", f"{host}:{port}: {exc}")
                return
            with upstream:
                upstream.settimeout(None)
                if method == "CONNECT":
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    upstream.sendall(head)
                back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
                back.start()
                _pipe(client, upstream)
                back.join()


def _read_head(conn: socket.socket) -> bytes:
    """The request head and whatever followed it in the same reads."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < MAX_HEAD_BYTES:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _target(head: bytes) -> tuple[str, str, int]:
    """The method, host and port a proxy request names (ValueError if none)."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3:
        raise ValueError(f"not a proxy request: {line[:100]!r}")
    method, target = parts[0], parts[1]
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"not host:port: {target[:100]!r}")
        return method, host.strip("[]").lower(), int(port)
    split = urlsplit(target)
    if split.scheme.lower() != "http" or not split.hostname:
        raise ValueError(f"not an http URL: {target[:100]!r}")
    return method, split.hostname, split.port or 80


def _answer(conn: socket.socket, status: str, reason: str) -> None:
    body = reason.encode()
    with suppress(OSError):
        conn.sendall(
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def write_config(directory: str, proxy_port: int) -> None:
    """Subversion's runtime configuration in ``directory``: every http(s)
    connection through the proxy at ``proxy_port`` (no host excepted), no tunnel
    (``svn+ssh``), no password kept."""
    with open(os.path.join(directory, "servers"), "w") as servers:
        servers.write(
            "[global]\n"
            "http-proxy-host = 127.0.0.1\n"
            f"http-proxy-port = {proxy_port}\n"
            "http-proxy-exceptions =\n"
            "store-passwords = no\n"
            "store-plaintext-passwords = no\n"
        )
    with open(os.path.join(directory, "config"), "w") as config:
        # ``false`` instead of ssh: an svn+ssh URL (an external) fails at once.
        config.write("[tunnels]\nssh = false\n[auth]\npassword-stores =\n")


@dataclass
class Reach:
    """What Subversion may reach by URL: hosts by ``resolve``, local repositories
    (``file://``) under ``local_roots`` (the loaders' working directories, where
    the dump loader mounts its copy) or anywhere the rules allow ``file://``."""

    resolve: Resolver = socket.getaddrinfo
    local_roots: list[str] = field(default_factory=lambda: [tempfile.gettempdir()])

    def check(self, url: str) -> None:
        """Refuse (ValueError) a URL Subversion must not reach by itself: a scheme
        but ``http``, ``https`` (the proxy holds those), ``svn`` and ``file``; an
        ``svn`` URL the rules refuse or whose host resolves to an internal address
        not allowed; a ``file`` URL outside ``local_roots`` the rules refuse. A
        host that does not resolve is Subversion's to report."""
        scheme = url_scheme(url)
        if scheme not in SCHEMES:
            raise ValueError(f"url: scheme {scheme!r} not allowed for Subversion ({url[:200]})")
        if scheme == "svn":
            check_url(url)
            with suppress(OSError):
                resolved_addresses(url, scheme, self.resolve)
        elif scheme == "file" and not self._local(url):
            check_url(url)

    def _local(self, url: str) -> bool:
        path = os.path.realpath(url2pathname(urlsplit(url).path))
        roots = [os.path.realpath(root) for root in self.local_roots if root]
        return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


@contextmanager
def subversion_held(reach: Reach | None = None) -> Iterator[CheckingProxy]:
    """Within the block, in this process, Subversion reaches only checked
    addresses (module docstring) and the URLs ``reach`` allows: subvertpy's
    client and sessions use the private configuration and check their URLs,
    ``svn`` and ``svnrdump`` started through ``subprocess`` get it too. The
    proxy's refusals are in its ``refused``."""
    reach = reach or Reach()
    directory = tempfile.mkdtemp(prefix="revisit-svn-")
    proxy = CheckingProxy(reach.resolve)
    try:
        write_config(directory, proxy.port)
        _hold_subvertpy(directory, reach)
        _hold_programs(directory, reach)
        yield proxy
    finally:
        proxy.close()
        shutil.rmtree(directory, ignore_errors=True)


def _refusal(exc: ValueError) -> Exception:
    """Subversion's own error for a refused URL: the loaders take it as an
    unreachable URL (an external left out) rather than a crash."""
    subvertpy = importlib.import_module("subvertpy")
    error: Exception = subvertpy.SubversionException(str(exc), subvertpy.ERR_BAD_URL)
    return error


def _hold_subvertpy(directory: str, reach: Reach) -> None:
    """subvertpy's client and sessions (the loader imports their module, not the
    names) with the configuration of ``directory``, their URLs checked."""
    try:
        client: Any = importlib.import_module("subvertpy.client")
        ra: Any = importlib.import_module("subvertpy.ra")
    except ImportError:
        return  # no Subversion here: nothing to hold
    config = client.get_config(directory)

    def check(url: Any) -> None:
        text = os.fsdecode(url) if isinstance(url, bytes) else url
        if isinstance(text, str) and _URL.match(text):
            try:
                reach.check(text)
            except ValueError as exc:
                log.warning("subversion: refused %s", exc)
                raise _refusal(exc) from exc

    make_client = client.Client

    def held_client(**kwargs: Any) -> _CheckedClient:
        return _CheckedClient(make_client(**{**kwargs, "config": config}), check)

    def held_session(session: Any) -> Callable[..., Any]:
        def open_session(url: Any, *args: Any, **kwargs: Any) -> Any:
            check(url)
            return session(url, *args, **{**kwargs, "config": config})

        return open_session

    client.Client = held_client
    ra.url_handlers = {
        scheme: held_session(session)
        for scheme, session in ra.url_handlers.items()
        if scheme in SCHEMES
    }


class _CheckedClient:
    """A subvertpy client whose every call naming a URL first checks it, and whose
    exports and checkouts leave out the externals when one of them, or one of
    theirs, is a URL Subversion must not reach (Subversion fetches them itself)."""

    def __init__(self, client: Any, check: Callable[[Any], None]) -> None:
        self._client = client
        self._check = check

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def checked(*args: Any, **kwargs: Any) -> Any:
            for value in (*args, *kwargs.values()):  # a local path has no scheme
                self._check(value)
            if name in ("export", "checkout") and args and not kwargs.get("ignore_externals"):
                peg, rev = kwargs.get("peg_rev"), kwargs.get("rev")
                refused = self._refused_external(args[0], peg, rev, MAX_EXTERNALS_DEPTH)
                if refused is not None:
                    log.warning("subversion: externals of %s left out: %s", args[0], refused)
                    kwargs["ignore_externals"] = True
            return attribute(*args, **kwargs)

        return checked

    def _refused_external(self, url: Any, peg: Any, rev: Any, depth: int) -> str | None:
        """Why an external of the tree at ``url`` (or of its externals' trees,
        ``depth`` levels down) is refused, or None."""
        subvertpy = importlib.import_module("subvertpy")
        parse = importlib.import_module("swh.loader.svn.utils").parse_external_definition
        try:
            found = self._client.propget("svn:externals", url, peg, rev, True)
            root = next(iter(self._client.info(url, rev, peg).values())).repos_root_url
        except (subvertpy.SubversionException, StopIteration):
            return None  # nothing to read: the export fails as well
        for directory, value in found.items():
            where = os.fsdecode(directory).replace(root, "", 1).strip("/")
            for line in os.fsdecode(value).splitlines():
                line = line.strip(" \t\r")
                if not line or line.startswith("#"):
                    continue
                try:
                    external = parse(line, where, root)
                except ValueError:
                    continue  # Subversion cannot read it either
                try:
                    self._check(external.url)
                except subvertpy.SubversionException as exc:
                    return str(exc.args[0])
                if depth > 0:
                    peg_rev = external.peg_revision
                    nested = self._refused_external(
                        external.url, peg_rev, external.revision or peg_rev, depth - 1
                    )
                    if nested is not None:
                        return nested
        return None


def _hold_programs(directory: str, reach: Reach) -> None:
    """``svn`` and ``svnrdump`` started through ``subprocess`` read the
    configuration of ``directory``; their ``svn://`` URLs are checked and name
    the checked address; another scheme but http(s) is refused (ValueError)."""

    def configured(arguments: dict[str, Any]) -> None:
        argv = arguments.get("args")
        if not isinstance(argv, (list, tuple)) or not argv or arguments.get("shell"):
            return
        if os.path.basename(os.fsdecode(argv[0])) in SVN_PROGRAMS:
            rest = [pinned_url(os.fsdecode(a), reach) for a in argv[1:]]
            arguments["args"] = [argv[0], "--config-dir", directory, *rest]

    rewrite_popen(configured)


def pinned_url(argument: str, reach: Reach) -> str:
    """``argument`` as given to a Subversion program, an ``svn://`` URL checked
    (ValueError) and naming the first address its host resolved to; any other
    URL checked by scheme."""
    if not _URL.match(argument):
        return argument
    reach.check(argument)
    parts = urlsplit(argument)
    if parts.scheme.lower() != "svn":
        return argument
    host = url_host(parts.netloc)
    if not host or address(host) is not None:
        return argument
    try:
        found = resolved_addresses(argument, "svn", reach.resolve)
    except OSError:
        return argument  # svnrdump reports the name that does not resolve
    return _with_host(argument, found)


def _with_host(url: str, addresses: Sequence[str]) -> str:
    parts = urlsplit(url)
    literal = host_literal(addresses[0])
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    return parts._replace(netloc=netloc).geturl()
