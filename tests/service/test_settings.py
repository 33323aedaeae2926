import pytest

from core.settings import Settings


def test_environment_variables_use_the_rankserve_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSERVE_ANCHOR_COUNT", "500")
    monkeypatch.setenv("RANKSERVE_LAMBDA_INF", "0.25")
    settings = Settings()
    assert (settings.anchor_count, settings.lambda_inf) == (500, 0.25)


@pytest.mark.parametrize(
    "name", ["ANCHOR_COUNT", "ANCHOR_SEED", "MODEL_PATH", "DEVICE", "API_KEY", "ADMIN_TOKEN"]
)
def test_an_empty_variable_means_none(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(f"RANKSERVE_{name}", "")
    assert getattr(Settings(), name.lower()) is None


def test_out_of_range_lambda_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSERVE_LAMBDA_INF", "1.5")
    with pytest.raises(ValueError, match="lambda_inf"):
        Settings()


_LENGTHS = ["openvino_single_lengths", "openvino_single_lengths_on_demand"]


@pytest.mark.parametrize("field", _LENGTHS)
@pytest.mark.parametrize(
    ("value", "lengths"), [("16,32", [16, 32]), (" 8 , 24 ", [8, 24]), ("[16]", [16]), ("", [])]
)
def test_openvino_single_lengths_are_comma_separated(
    monkeypatch: pytest.MonkeyPatch, field: str, value: str, lengths: list[int]
) -> None:
    monkeypatch.setenv(f"RANKSERVE_{field.upper()}", value)
    assert getattr(Settings(), field) == lengths


@pytest.mark.parametrize("field", _LENGTHS)
@pytest.mark.parametrize("value", ["0", "16,x", "600"])
def test_a_single_length_out_of_range_is_refused(
    monkeypatch: pytest.MonkeyPatch, field: str, value: str
) -> None:
    monkeypatch.setenv(f"RANKSERVE_{field.upper()}", value)
    with pytest.raises(ValueError, match=field):
        Settings()
