from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.stream_messages_response_200 import StreamMessagesResponse200
from ...types import UNSET, Response, Unset


def _get_kwargs(
    topic: str,
    group: str,
    *,
    invisible_ms: int | Unset = 30000,
    max_in_flight: int | Unset = 100,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["invisible_ms"] = invisible_ms

    params["max_in_flight"] = max_in_flight

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/topics/{topic}/groups/{group}/stream".format(
            topic=quote(str(topic), safe=""),
            group=quote(str(group), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | StreamMessagesResponse200 | None:
    if response.status_code == 200:
        response_200 = StreamMessagesResponse200.from_dict(response.text)

        return response_200

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())

        return response_409

    if response.status_code == 422:
        response_422 = Problem.from_dict(response.json())

        return response_422

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Problem | StreamMessagesResponse200]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    topic: str,
    group: str,
    *,
    client: AuthenticatedClient | Client,
    invisible_ms: int | Unset = 30000,
    max_in_flight: int | Unset = 100,
) -> Response[Problem | StreamMessagesResponse200]:
    """Receive messages as they become visible (server-sent events)

     Each message the moment it is visible, while fewer than ``max_in_flight`` are
    unsettled (acked, nacked or expired); the stream ends when the client goes or the
    server stops, and its unacked messages come back after ``invisible_ms``.

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        invisible_ms (int | Unset): How long each is held Default: 30000.
        max_in_flight (int | Unset): Most unacked messages at once Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | StreamMessagesResponse200]
    """

    kwargs = _get_kwargs(
        topic=topic,
        group=group,
        invisible_ms=invisible_ms,
        max_in_flight=max_in_flight,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    topic: str,
    group: str,
    *,
    client: AuthenticatedClient | Client,
    invisible_ms: int | Unset = 30000,
    max_in_flight: int | Unset = 100,
) -> Problem | StreamMessagesResponse200 | None:
    """Receive messages as they become visible (server-sent events)

     Each message the moment it is visible, while fewer than ``max_in_flight`` are
    unsettled (acked, nacked or expired); the stream ends when the client goes or the
    server stops, and its unacked messages come back after ``invisible_ms``.

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        invisible_ms (int | Unset): How long each is held Default: 30000.
        max_in_flight (int | Unset): Most unacked messages at once Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | StreamMessagesResponse200
    """

    return sync_detailed(
        topic=topic,
        group=group,
        client=client,
        invisible_ms=invisible_ms,
        max_in_flight=max_in_flight,
    ).parsed


async def asyncio_detailed(
    topic: str,
    group: str,
    *,
    client: AuthenticatedClient | Client,
    invisible_ms: int | Unset = 30000,
    max_in_flight: int | Unset = 100,
) -> Response[Problem | StreamMessagesResponse200]:
    """Receive messages as they become visible (server-sent events)

     Each message the moment it is visible, while fewer than ``max_in_flight`` are
    unsettled (acked, nacked or expired); the stream ends when the client goes or the
    server stops, and its unacked messages come back after ``invisible_ms``.

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        invisible_ms (int | Unset): How long each is held Default: 30000.
        max_in_flight (int | Unset): Most unacked messages at once Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | StreamMessagesResponse200]
    """

    kwargs = _get_kwargs(
        topic=topic,
        group=group,
        invisible_ms=invisible_ms,
        max_in_flight=max_in_flight,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    topic: str,
    group: str,
    *,
    client: AuthenticatedClient | Client,
    invisible_ms: int | Unset = 30000,
    max_in_flight: int | Unset = 100,
) -> Problem | StreamMessagesResponse200 | None:
    """Receive messages as they become visible (server-sent events)

     Each message the moment it is visible, while fewer than ``max_in_flight`` are
    unsettled (acked, nacked or expired); the stream ends when the client goes or the
    server stops, and its unacked messages come back after ``invisible_ms``.

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        invisible_ms (int | Unset): How long each is held Default: 30000.
        max_in_flight (int | Unset): Most unacked messages at once Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | StreamMessagesResponse200
    """

    return (
        await asyncio_detailed(
            topic=topic,
            group=group,
            client=client,
            invisible_ms=invisible_ms,
            max_in_flight=max_in_flight,
        )
    ).parsed
