import logging

from actors.broker import WithoutUserinfo

SECRET = "S3cretPass"


def _formatted(record: logging.LogRecord) -> str:
    handler = logging.Handler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(WithoutUserinfo())
    assert handler.filter(record)
    return handler.format(record)


def test_a_log_line_and_its_traceback_show_no_credentials() -> None:
    try:
        raise ValueError(f"cannot reach https://u:{SECRET}@h.example/x.git")
    except ValueError as exc:
        info = (type(exc), exc, exc.__traceback__)
    payload = {"url": f"https://u:{SECRET}@h.example/x.git"}
    record = logging.LogRecord("dramatiq", logging.ERROR, "f", 1, "failed %s", (payload,), info)
    text = _formatted(record)
    assert SECRET not in text
    assert "failed {'url': 'https://***@h.example/x.git'}" in text
    assert "ValueError: cannot reach https://***@h.example/x.git" in text


def test_a_record_that_cannot_be_formatted_is_left_to_the_handler() -> None:
    record = logging.LogRecord("x", logging.INFO, "f", 1, "%d items", ("many",), None)
    assert WithoutUserinfo().filter(record)
