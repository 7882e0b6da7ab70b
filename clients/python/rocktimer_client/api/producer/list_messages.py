from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.message_page import MessagePage
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    topic: str,
    *,
    state: Literal["scheduled"] | Unset = "scheduled",
    cursor: None | str | Unset = UNSET,
    limit: int | Unset = 100,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["state"] = state

    json_cursor: None | str | Unset
    if isinstance(cursor, Unset):
        json_cursor = UNSET
    else:
        json_cursor = cursor
    params["cursor"] = json_cursor

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/topics/{topic}/messages".format(
            topic=quote(str(topic), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> MessagePage | Problem | None:
    if response.status_code == 200:
        response_200 = MessagePage.from_dict(response.json())

        return response_200

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

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
) -> Response[MessagePage | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    topic: str,
    *,
    client: AuthenticatedClient | Client,
    state: Literal["scheduled"] | Unset = "scheduled",
    cursor: None | str | Unset = UNSET,
    limit: int | Unset = 100,
) -> Response[MessagePage | Problem]:
    """The topic's scheduled messages in due order

    Args:
        topic (str): Topic name (% as %25)
        state (Literal['scheduled'] | Unset): Which messages Default: 'scheduled'.
        cursor (None | str | Unset): next_cursor of the last page
        limit (int | Unset): Most items in the page Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[MessagePage | Problem]
    """

    kwargs = _get_kwargs(
        topic=topic,
        state=state,
        cursor=cursor,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    topic: str,
    *,
    client: AuthenticatedClient | Client,
    state: Literal["scheduled"] | Unset = "scheduled",
    cursor: None | str | Unset = UNSET,
    limit: int | Unset = 100,
) -> MessagePage | Problem | None:
    """The topic's scheduled messages in due order

    Args:
        topic (str): Topic name (% as %25)
        state (Literal['scheduled'] | Unset): Which messages Default: 'scheduled'.
        cursor (None | str | Unset): next_cursor of the last page
        limit (int | Unset): Most items in the page Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        MessagePage | Problem
    """

    return sync_detailed(
        topic=topic,
        client=client,
        state=state,
        cursor=cursor,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    topic: str,
    *,
    client: AuthenticatedClient | Client,
    state: Literal["scheduled"] | Unset = "scheduled",
    cursor: None | str | Unset = UNSET,
    limit: int | Unset = 100,
) -> Response[MessagePage | Problem]:
    """The topic's scheduled messages in due order

    Args:
        topic (str): Topic name (% as %25)
        state (Literal['scheduled'] | Unset): Which messages Default: 'scheduled'.
        cursor (None | str | Unset): next_cursor of the last page
        limit (int | Unset): Most items in the page Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[MessagePage | Problem]
    """

    kwargs = _get_kwargs(
        topic=topic,
        state=state,
        cursor=cursor,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    topic: str,
    *,
    client: AuthenticatedClient | Client,
    state: Literal["scheduled"] | Unset = "scheduled",
    cursor: None | str | Unset = UNSET,
    limit: int | Unset = 100,
) -> MessagePage | Problem | None:
    """The topic's scheduled messages in due order

    Args:
        topic (str): Topic name (% as %25)
        state (Literal['scheduled'] | Unset): Which messages Default: 'scheduled'.
        cursor (None | str | Unset): next_cursor of the last page
        limit (int | Unset): Most items in the page Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        MessagePage | Problem
    """

    return (
        await asyncio_detailed(
            topic=topic,
            client=client,
            state=state,
            cursor=cursor,
            limit=limit,
        )
    ).parsed
