"""Passing a client's connection to the owner of its first request's topic.

The kernel hands a new connection on the public port to any worker (SO_REUSEPORT). If
the first request on it is for a topic another worker owns, the accepting worker passes
the connection itself — its file descriptor and the bytes already read from it — to the
owner over the owner's handoff socket, ``<data_dir>/w<i>.pass`` (SCM_RIGHTS), and forgets
it: the owner answers that request and every later one on the connection, with no hop.
Passing costs about what one relayed request costs, once a connection (bench/fdpass.py);
a keep-alive client that keeps to its topics' worker then pays nothing more.

Only the first request of a connection decides, and only before anything was answered
on it: a connection that then asks for another worker's topic is relayed as any request
(app/cluster/relay.py), and a connection is passed at most once. Nothing is passed when
the owner's handoff socket does not take it at once (the owner is down or starting, or
the bytes read are more than PASS_MAX_BYTES): the request is relayed instead, which
answers 503 + Retry-After for an owner that is down. Connections on the private unix
socket are never passed. Once the owner holds the connection it is the owner's, as if
the kernel had handed it there: if the owner dies, the connection is reset with the
others it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import urllib.parse
from collections.abc import Callable

from app.cluster.layout import Layout, partition_of
from app.http import BoundedHeaders
from storage.keys import DLQ_PREFIX

PASS_MAX_BYTES = 64 * 1024  # bytes read before the decision that travel with a connection
TOPIC_PATH = b"/v1/topics/"

log = logging.getLogger("rocktimer")


def pass_path(data_dir: str, worker: int) -> str:
    return os.path.join(os.path.abspath(data_dir), f"w{worker}.pass")


def owner_of(url: bytes, layout: Layout) -> int | None:
    """The worker owning the topic of a request target, or None for a path without one
    (or a group's dead letters, which every partition answers)."""
    path = url.split(b"?", 1)[0]
    if not path.startswith(TOPIC_PATH):
        return None
    raw = path[len(TOPIC_PATH) :].split(b"/", 1)[0]
    if not raw:
        return None
    topic = urllib.parse.unquote(raw.decode("latin-1")) if b"%" in raw else raw.decode("latin-1")
    if topic.startswith(DLQ_PREFIX):
        return None
    return layout.owner(partition_of(topic, layout.partitions))


class Outbox:
    """This worker's links to the other workers' handoff sockets (connected on first use,
    dropped when a send fails: the owner was restarted or is down)."""

    def __init__(self, layout: Layout, worker: int) -> None:
        self.layout = layout
        self.worker = worker
        self._links: dict[int, socket.socket] = {}

    def give(self, owner: int, conn: socket.socket, read: bytes) -> bool:
        """Pass ``conn`` and the bytes ``read`` from it to ``owner``; False if it did not
        take them at once (nothing was passed)."""
        if len(read) > PASS_MAX_BYTES:
            return False
        for _ in range(2):  # a link left from an owner since restarted fails once
            link = self._links.get(owner)
            if link is None:
                link = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                link.setblocking(False)
                try:
                    link.connect(pass_path(self.layout.data_dir, owner))
                except OSError:
                    link.close()
                    return False
                self._links[owner] = link
            try:
                socket.send_fds(link, [read], [conn.fileno()])
                return True
            except BlockingIOError:
                return False  # the owner is not reading: relay this one
            except OSError:
                self._links.pop(owner).close()
        return False

    def close(self) -> None:
        links, self._links = self._links, {}
        for link in links.values():
            link.close()


class Passing(BoundedHeaders):
    """The public port's protocol in a worker: the first request of a connection for
    another worker's topic passes the connection there (``Handoff.outbox``)."""

    handoff: Handoff | None = None  # set by the worker before it serves

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._deciding = False  # the first request's head is still being read
        self._read = bytearray()  # ... and the bytes read meanwhile
        self._passed = False
        self._adopted: bytes | None = None  # bytes that came with a passed connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A connection on the public port (not the private unix socket, whose server
        # address has no port), not itself passed here: its first request decides.
        self._deciding = (
            self.handoff is not None
            and self._adopted is None
            and self.server is not None
            and self.server[1] is not None
        )
        if self._adopted is not None:
            read, self._adopted = self._adopted, None
            self.data_received(read)

    def data_received(self, data: bytes) -> None:
        if self._passed:
            return
        if self._deciding:
            self._read += data
        super().data_received(data)
        if self._passed:
            self.transport.abort()  # this side's descriptor only: the owner holds its own

    def on_headers_complete(self) -> None:
        if self._passed:  # a pipelined request behind the first: the owner has its bytes
            return
        if self._deciding:
            self._deciding = False
            read, self._read = bytes(self._read), bytearray()
            handoff = self.handoff
            assert handoff is not None
            owner = owner_of(self.url, handoff.layout)
            if owner is not None and owner != handoff.worker:
                sock = self.transport.get_extra_info("socket")
                if sock is not None and handoff.outbox.give(owner, sock, read):
                    self._passed = True
                    self.transport.pause_reading()
                    return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._passed:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._passed:
            super().on_message_complete()


class Handoff:
    """One worker's side of passing: its outbox to the others, and its own handoff socket
    where connections passed to it arrive, each adopted by the server's protocol."""

    def __init__(self, layout: Layout, worker: int) -> None:
        self.layout = layout
        self.worker = worker
        self.outbox = Outbox(layout, worker)
        self.path = pass_path(layout.data_dir, worker)
        self._inbox: socket.socket | None = None
        self._links: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._protocol: Callable[[], Passing] | None = None
        self._adopting: set[asyncio.Task[None]] = set()

    def listen(self) -> socket.socket:
        """This worker's handoff socket (a former worker's file is replaced)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        inbox = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        inbox.bind(self.path)
        os.chmod(self.path, 0o600)
        inbox.listen(64)
        inbox.setblocking(False)
        self._inbox = inbox
        return inbox

    def serve(self, loop: asyncio.AbstractEventLoop, protocol: Callable[[], Passing]) -> None:
        """Adopt the connections passed here with ``protocol`` (the server's own)."""
        assert self._inbox is not None
        self._loop, self._protocol = loop, protocol
        loop.add_reader(self._inbox.fileno(), self._accept)

    def _accept(self) -> None:
        assert self._inbox is not None
        assert self._loop is not None
        try:
            link, _ = self._inbox.accept()
        except (BlockingIOError, InterruptedError):
            return
        link.setblocking(False)
        self._links.append(link)
        self._loop.add_reader(link.fileno(), self._receive, link)

    def _receive(self, link: socket.socket) -> None:
        assert self._loop is not None
        try:
            read, fds, _, _ = socket.recv_fds(link, PASS_MAX_BYTES, 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            read, fds = b"", []
        if not read and not fds:  # the sender went away (it exited or was restarted)
            self._loop.remove_reader(link.fileno())
            self._links.remove(link)
            link.close()
            return
        for fd in fds[1:]:
            os.close(fd)
        if fds:
            self._adopt(socket.socket(fileno=fds[0]), read)

    def _adopt(self, conn: socket.socket, read: bytes) -> None:
        assert self._loop is not None
        assert self._protocol is not None
        make = self._protocol

        def protocol() -> Passing:
            proto: Passing = make()
            proto._adopted = read  # fed in connection_made, before any later read
            return proto

        async def adopt() -> None:
            try:
                await self._loop.connect_accepted_socket(protocol, conn)  # type: ignore[union-attr]
            except OSError as exc:  # the client went away meanwhile
                log.debug("a passed connection could not be adopted: %s", exc)
                conn.close()

        task = self._loop.create_task(adopt())
        self._adopting.add(task)
        task.add_done_callback(self._adopting.discard)

    def close(self) -> None:
        self.outbox.close()
        if self._loop is not None:
            for each in [*self._links, *([self._inbox] if self._inbox else [])]:
                with contextlib.suppress(ValueError, OSError):
                    self._loop.remove_reader(each.fileno())
        for link in self._links:
            link.close()
        self._links = []
        if self._inbox is not None:
            self._inbox.close()
            self._inbox = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
