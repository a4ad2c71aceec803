"""The docs list every setting of every role with its default, as the models say."""

from __future__ import annotations

import settings_tables

from tickwork.core.settings import settings_of


def test_every_role_has_a_settings_table() -> None:
    found = {
        model
        for path in settings_tables.DOCS
        for model in settings_tables.sections(path.read_text("utf-8"))
    }
    assert found == set(settings_tables.MODELS)


def test_the_tables_list_every_field_with_its_default() -> None:
    for path in settings_tables.DOCS:
        text = path.read_text("utf-8")
        for name, written in settings_tables.sections(text).items():
            model = settings_tables.MODELS[name]
            expected = settings_tables.table(model)
            assert written == expected, (
                f"{path.name}: the {name} table is out of date; run `make docs`"
            )
            for setting in settings_of(model):
                row = f"| `{setting.name}` |"
                assert row in written and settings_tables.default_of(setting) in written


def test_every_field_is_documented() -> None:
    for model in settings_tables.MODELS.values():
        for setting in settings_of(model):
            assert setting.description.strip(), f"{model.__name__}.{setting.name}"
