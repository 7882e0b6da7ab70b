from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.reschedule_message import RescheduleMessage
from ...models.send_result import SendResult
from ...types import Response


def _get_kwargs(
    topic: str,
    msg_id: str,
    *,
    body: RescheduleMessage,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "patch",
        "url": "/v1/topics/{topic}/messages/{msg_id}".format(
            topic=quote(str(topic), safe=""),
            msg_id=quote(str(msg_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Problem | SendResult | None:
    if response.status_code == 200:
        response_200 = SendResult.from_dict(response.json())

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

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

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
) -> Response[Problem | SendResult]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    topic: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: RescheduleMessage,
) -> Response[Problem | SendResult]:
    """Move a scheduled message to another time (a past time: at once)

    Args:
        topic (str): Topic name (% as %25)
        msg_id (str): Message id (uniq key)
        body (RescheduleMessage): The new delivery time: exactly one of deliver_at_ms, delay_ms
            (from now),
            delay_level. A time already past delivers at once.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | SendResult]
    """

    kwargs = _get_kwargs(
        topic=topic,
        msg_id=msg_id,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    topic: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: RescheduleMessage,
) -> Problem | SendResult | None:
    """Move a scheduled message to another time (a past time: at once)

    Args:
        topic (str): Topic name (% as %25)
        msg_id (str): Message id (uniq key)
        body (RescheduleMessage): The new delivery time: exactly one of deliver_at_ms, delay_ms
            (from now),
            delay_level. A time already past delivers at once.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | SendResult
    """

    return sync_detailed(
        topic=topic,
        msg_id=msg_id,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    topic: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: RescheduleMessage,
) -> Response[Problem | SendResult]:
    """Move a scheduled message to another time (a past time: at once)

    Args:
        topic (str): Topic name (% as %25)
        msg_id (str): Message id (uniq key)
        body (RescheduleMessage): The new delivery time: exactly one of deliver_at_ms, delay_ms
            (from now),
            delay_level. A time already past delivers at once.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | SendResult]
    """

    kwargs = _get_kwargs(
        topic=topic,
        msg_id=msg_id,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    topic: str,
    msg_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: RescheduleMessage,
) -> Problem | SendResult | None:
    """Move a scheduled message to another time (a past time: at once)

    Args:
        topic (str): Topic name (% as %25)
        msg_id (str): Message id (uniq key)
        body (RescheduleMessage): The new delivery time: exactly one of deliver_at_ms, delay_ms
            (from now),
            delay_level. A time already past delivers at once.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | SendResult
    """

    return (
        await asyncio_detailed(
            topic=topic,
            msg_id=msg_id,
            client=client,
            body=body,
        )
    ).parsed
