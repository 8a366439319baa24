"""settings.py groups its settings by section, one base class each, and `Settings` only
combines them: a new setting goes in the section it belongs to, never loose in `Settings`."""

from __future__ import annotations

from settings import EmbeddedStack, Settings

SECTIONS = [base for base in Settings.__mro__[1:] if issubclass(base, EmbeddedStack)]


def own_fields(cls: type) -> set[str]:
    return {name for name in vars(cls).get("__annotations__", {}) if not name.startswith("_")}


def test_settings_declares_no_setting_of_its_own() -> None:
    assert own_fields(Settings) - {"model_config"} == set()


def test_every_setting_is_in_exactly_one_section() -> None:
    declared = [name for section in SECTIONS for name in own_fields(section)]
    assert sorted(declared) == sorted(Settings.model_fields)
    assert len(SECTIONS) >= 6
    assert all(section.__doc__ for section in SECTIONS), "a section says what it holds"
