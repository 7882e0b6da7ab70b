"""What stops a start is said in one line naming the setting and what it accepts."""

from __future__ import annotations

import pytest

from app.__main__ import EXIT_BAD_SETTING, load_settings


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"ROCKTIMER_PORT": "70000"}, ["ROCKTIMER_PORT='70000'", "an integer from 0 to 65535"]),
        (
            {"ROCKTIMER_API_KEYS": '{"k1": "producer", "k2": "root"}'},
            ["ROCKTIMER_API_KEYS ('k2')", "'producer', 'consumer' or 'admin'"],
        ),
        ({"ROCKTIMER_API_KEYS": "k1=admin"}, ["ROCKTIMER_API_KEYS", "not valid JSON"]),
        ({"ROCKTIMER_LOG_FORMAT": "xml"}, ["ROCKTIMER_LOG_FORMAT='xml'", "text | json"]),
        ({"ROCKTIMER_ACCESS_LOG": "maybe"}, ["ROCKTIMER_ACCESS_LOG='maybe'", "true or false"]),
        ({"ROCKTIMER_SCAN_CHUNK": "0"}, ["ROCKTIMER_SCAN_CHUNK='0'", "an integer >= 1"]),
        (
            {"ROCKTIMER_PORT": "x", "ROCKTIMER_LOG_LEVEL": "loud"},
            ["ROCKTIMER_PORT='x'", "ROCKTIMER_LOG_LEVEL='loud'", "debug | info"],
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    names: list[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        load_settings()
    assert stopped.value.code == EXIT_BAD_SETTING
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("rocktimer: bad setting ")
    for name in names:
        assert name in err, err
