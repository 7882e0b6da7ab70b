from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.dead_letter_detail import DeadLetterDetail
from ...models.problem import Problem
from ...types import Response


def _get_kwargs(
    topic: str,
    group: str,
    msg_id: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/topics/{topic}/groups/{group}/dlq/{msg_id}".format(
            topic=quote(str(topic), safe=""),
            group=quote(str(group), safe=""),
            msg_id=quote(str(msg_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> DeadLetterDetail | Problem | None:
    if response.status_code == 200:
        response_200 = DeadLetterDetail.from_dict(response.json())

        return response_200

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

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
) -> Response[DeadLetterDetail | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    topic: str,
    group: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> Response[DeadLetterDetail | Problem]:
    """One dead letter with its body and properties

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        msg_id (str): Message id (uniq key)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[DeadLetterDetail | Problem]
    """

    kwargs = _get_kwargs(
        topic=topic,
        group=group,
        msg_id=msg_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    topic: str,
    group: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> DeadLetterDetail | Problem | None:
    """One dead letter with its body and properties

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        msg_id (str): Message id (uniq key)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        DeadLetterDetail | Problem
    """

    return sync_detailed(
        topic=topic,
        group=group,
        msg_id=msg_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    topic: str,
    group: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> Response[DeadLetterDetail | Problem]:
    """One dead letter with its body and properties

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        msg_id (str): Message id (uniq key)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[DeadLetterDetail | Problem]
    """

    kwargs = _get_kwargs(
        topic=topic,
        group=group,
        msg_id=msg_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    topic: str,
    group: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> DeadLetterDetail | Problem | None:
    """One dead letter with its body and properties

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        msg_id (str): Message id (uniq key)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        DeadLetterDetail | Problem
    """

    return (
        await asyncio_detailed(
            topic=topic,
            group=group,
            msg_id=msg_id,
            client=client,
        )
    ).parsed
