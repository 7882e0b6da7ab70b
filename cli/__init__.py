"""The ``rocktimer`` command: the service's HTTP API for people and scripts (typer + rich).

It talks to a server through the generated client (clients/python): ``ROCKTIMER_URL``
(default http://127.0.0.1:8080) and ``ROCKTIMER_API_KEY``, or ``--url`` / ``--api-key``.
"""
