"""The webhooks' HTTP client (app/push/client.py) against real local TCP servers that answer
in the ways receivers do: keep-alive, chunked, delimited by the close, closing an idle
connection, too much head, no answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from app.push.client import MAX_REPLY_HEAD_BYTES, Pool, ReplyError
from tests.support.process import free_port
from tests.workers.support import run

# What the server does with the n-th request (0-based) of a connection: bytes to answer
# with and whether to close after; None: close at once without answering.
Answer = Callable[[int], tuple[bytes, bool] | None]

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


async def with_server(answer: Answer, body: Callable[[str, list[int]], Awaitable[None]]) -> None:
    """Serve ``answer`` on a free port; run ``body(url, connections)``, where connections
    counts the requests each accepted connection carried."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(0)
        me = len(connections) - 1
        try:
            while True:
                await _read_request(reader)
                connections[me] += 1
                reply = answer(connections[me] - 1)
                if reply is None:
                    break
                writer.write(reply[0])
                await writer.drain()
                if reply[1]:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await body(f"http://127.0.0.1:{port}/hook?x=1", connections)
    finally:
        server.close()
        await server.wait_closed()


def test_keep_alive_reuses_one_connection_and_reads_chunked_and_retry_after() -> None:
    chunked = b"HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked += b"2\r\nno\r\n0\r\n\r\n"

    async def body(url: str, connections: list[int]) -> None:
        pool = Pool(url)
        assert await pool.post(b"{}", {}, 5) == (200, None)
        assert await pool.post(b"{}", {"X-A": "b"}, 5) == (429, "3")
        assert await pool.post(b"{}", {}, 5) == (200, None)
        assert connections == [3]
        pool.close()

    run(with_server(lambda n: (chunked if n == 1 else OK, False), body))


def test_an_interim_reply_is_skipped_for_the_one_that_follows() -> None:
    """A 100 Continue (its Retry-After not the reply's) and then the reply, on a connection
    kept alive for the next POST."""
    interim = b"HTTP/1.1 100 Continue\r\nRetry-After: 9\r\n\r\n"
    final = b"HTTP/1.1 503 Busy\r\nRetry-After: 2\r\nContent-Length: 4\r\n\r\nbusy"

    async def body(url: str, connections: list[int]) -> None:
        pool = Pool(url)
        assert await pool.post(b"{}", {}, 5) == (503, "2")
        assert await pool.post(b"{}", {}, 5) == (200, None)
        assert connections == [2]
        pool.close()

    run(with_server(lambda n: (interim + final if n == 0 else OK, False), body))


def test_a_reply_delimited_by_the_close_is_read_and_its_connection_not_reused() -> None:
    async def body(url: str, connections: list[int]) -> None:
        pool = Pool(url)
        assert (await pool.post(b"{}", {}, 5)).status == 204
        assert (await pool.post(b"{}", {}, 5)).status == 204
        assert connections == [1, 1]

    run(with_server(lambda n: (b"HTTP/1.0 204 No Content\r\n\r\n", True), body))


def test_a_reused_connection_closed_unanswered_is_retried_once_on_a_new_one() -> None:
    async def body(url: str, connections: list[int]) -> None:
        pool = Pool(url)
        assert (await pool.post(b"{}", {}, 5)).status == 200
        # The receiver drops the kept-alive connection as the next request arrives (its
        # idle timeout): nothing was answered, so it goes again on a new connection.
        assert (await pool.post(b"{}", {}, 5)).status == 200
        assert connections == [2, 1]
        pool.close()

    run(with_server(lambda n: (OK, False) if n == 0 else None, body))


def test_a_new_connection_closed_unanswered_is_a_failure() -> None:
    async def body(url: str, connections: list[int]) -> None:
        with pytest.raises(ReplyError):
            await Pool(url).post(b"{}", {}, 5)
        assert connections == [1]

    run(with_server(lambda n: None, body))


def test_an_oversized_reply_head_is_a_failure() -> None:
    huge = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * MAX_REPLY_HEAD_BYTES + b"\r\n\r\n"

    async def body(url: str, connections: list[int]) -> None:
        with pytest.raises(ReplyError, match="head"):
            await Pool(url).post(b"{}", {}, 5)

    run(with_server(lambda n: (huge, False), body))


def test_no_reply_in_time_is_a_timeout() -> None:
    async def body(url: str, connections: list[int]) -> None:
        with pytest.raises(TimeoutError):
            await Pool(url).post(b"{}", {}, 0.2)

    run(with_server(lambda n: (b"", False), body))  # answers nothing, keeps it open


def test_a_refused_connection_is_an_os_error() -> None:
    async def post() -> None:
        await Pool(f"http://127.0.0.1:{free_port()}/").post(b"{}", {}, 5)

    with pytest.raises(OSError, match=r"refused|Connect call failed"):
        run(post())
