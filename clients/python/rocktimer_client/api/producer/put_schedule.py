from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.put_schedule import PutSchedule
from ...models.schedule_view import ScheduleView
from ...types import Response


def _get_kwargs(
    topic: str,
    schedule_id: str,
    *,
    body: PutSchedule,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "put",
        "url": "/v1/topics/{topic}/schedules/{schedule_id}".format(
            topic=quote(str(topic), safe=""),
            schedule_id=quote(str(schedule_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Problem | ScheduleView | None:
    if response.status_code == 200:
        response_200 = ScheduleView.from_dict(response.json())

        return response_200

    if response.status_code == 201:
        response_201 = ScheduleView.from_dict(response.json())

        return response_201

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

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
    body: PutSchedule,
) -> Response[Problem | ScheduleView]:
    """Create or replace a recurring schedule (cron in a time zone, or every_ms)

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id
        body (PutSchedule): A recurring schedule: exactly one of cron (five fields, in
            ``timezone``) and
            every_ms; each fire is one message with this body, properties and tag.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ScheduleView]
    """

    kwargs = _get_kwargs(
        topic=topic,
        schedule_id=schedule_id,
        body=body,
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
    body: PutSchedule,
) -> Problem | ScheduleView | None:
    """Create or replace a recurring schedule (cron in a time zone, or every_ms)

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id
        body (PutSchedule): A recurring schedule: exactly one of cron (five fields, in
            ``timezone``) and
            every_ms; each fire is one message with this body, properties and tag.

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
        body=body,
    ).parsed


async def asyncio_detailed(
    topic: str,
    schedule_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: PutSchedule,
) -> Response[Problem | ScheduleView]:
    """Create or replace a recurring schedule (cron in a time zone, or every_ms)

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id
        body (PutSchedule): A recurring schedule: exactly one of cron (five fields, in
            ``timezone``) and
            every_ms; each fire is one message with this body, properties and tag.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ScheduleView]
    """

    kwargs = _get_kwargs(
        topic=topic,
        schedule_id=schedule_id,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    topic: str,
    schedule_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: PutSchedule,
) -> Problem | ScheduleView | None:
    """Create or replace a recurring schedule (cron in a time zone, or every_ms)

    Args:
        topic (str): Topic name (% as %25)
        schedule_id (str): Recurring schedule id
        body (PutSchedule): A recurring schedule: exactly one of cron (five fields, in
            ``timezone``) and
            every_ms; each fire is one message with this body, properties and tag.

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
            body=body,
        )
    ).parsed
