from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.receive_request import ReceiveRequest
from ...models.receive_result import ReceiveResult
from ...types import Response


def _get_kwargs(
    topic: str,
    group: str,
    *,
    body: ReceiveRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/topics/{topic}/groups/{group}/receive".format(
            topic=quote(str(topic), safe=""),
            group=quote(str(group), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | ReceiveResult | None:
    if response.status_code == 200:
        response_200 = ReceiveResult.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = Problem.from_dict(response.json())

        return response_413

    if response.status_code == 415:
        response_415 = Problem.from_dict(response.json())

        return response_415

    if response.status_code == 422:
        response_422 = Problem.from_dict(response.json())

        return response_422

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())

        return response_429

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Problem | ReceiveResult]:
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
    body: ReceiveRequest,
) -> Response[Problem | ReceiveResult]:
    """Receive visible messages (long poll with wait_ms)

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        body (ReceiveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ReceiveResult]
    """

    kwargs = _get_kwargs(
        topic=topic,
        group=group,
        body=body,
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
    body: ReceiveRequest,
) -> Problem | ReceiveResult | None:
    """Receive visible messages (long poll with wait_ms)

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        body (ReceiveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | ReceiveResult
    """

    return sync_detailed(
        topic=topic,
        group=group,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    topic: str,
    group: str,
    *,
    client: AuthenticatedClient | Client,
    body: ReceiveRequest,
) -> Response[Problem | ReceiveResult]:
    """Receive visible messages (long poll with wait_ms)

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        body (ReceiveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ReceiveResult]
    """

    kwargs = _get_kwargs(
        topic=topic,
        group=group,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    topic: str,
    group: str,
    *,
    client: AuthenticatedClient | Client,
    body: ReceiveRequest,
) -> Problem | ReceiveResult | None:
    """Receive visible messages (long poll with wait_ms)

    Args:
        topic (str): Topic name (% as %25)
        group (str): Consumer group name
        body (ReceiveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | ReceiveResult
    """

    return (
        await asyncio_detailed(
            topic=topic,
            group=group,
            client=client,
            body=body,
        )
    ).parsed
