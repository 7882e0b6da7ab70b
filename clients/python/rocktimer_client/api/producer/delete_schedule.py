from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.schedule_view import ScheduleView
from ...types import Response


def _get_kwargs(
    topic: str,
    schedule_id: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "delete",
        "url": "/v1/topics/{topic}/schedules/{schedule_id}".format(
            topic=quote(str(topic), safe=""),
            schedule_id=quote(str(schedule_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Problem | ScheduleView | None:
    if response.status_code == 200:
        response_200 = ScheduleView.from_dict(response.json())

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
) -> Response[Problem | ScheduleView]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    topic: str,
    schedule_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> Response[Problem | ScheduleView]:
    """Delete a recurring schedule: nothing fires after it

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ScheduleView]
    """

    kwargs = _get_kwargs(
        topic=topic,
        schedule_id=schedule_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    topic: str,
    schedule_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> Problem | ScheduleView | None:
    """Delete a recurring schedule: nothing fires after it

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | ScheduleView
    """

    return sync_detailed(
        topic=topic,
        schedule_id=schedule_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    topic: str,
    schedule_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> Response[Problem | ScheduleView]:
    """Delete a recurring schedule: nothing fires after it

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ScheduleView]
    """

    kwargs = _get_kwargs(
        topic=topic,
        schedule_id=schedule_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    topic: str,
    schedule_id: str,
    *,
    client: AuthenticatedClient | Client,
) -> Problem | ScheduleView | None:
    """Delete a recurring schedule: nothing fires after it

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | ScheduleView
    """

    return (
        await asyncio_detailed(
            topic=topic,
            schedule_id=schedule_id,
            client=client,
        )
    ).parsed
