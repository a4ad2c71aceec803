"""The settings tables of the docs, generated from the settings models.

``docs/configuration.md`` and ``docs/workers.md`` hold one table per role between
``<!-- settings: Model -->`` and ``<!-- /settings -->``; ``make docs`` (this module
run as a script) writes them, and ``test_settings_docs`` checks they are current.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Final

from tickwork.cli.options import shown
from tickwork.core import settings as role_settings
from tickwork.core.settings import Setting, Settings, settings_of
from tickwork.jobrunner.settings import JobRunnerSettings
from tickwork.worker.settings import WorkerSettings

ROOT: Final = Path(__file__).resolve().parent.parent
MODELS: Final[dict[str, type[Settings]]] = {
    model.__name__: model
    for model in (
        role_settings.MigrateSettings,
        role_settings.ReshardSettings,
        role_settings.SchedulerSettings,
        role_settings.DispatcherSettings,
        role_settings.OperatorSettings,
        role_settings.DevSettings,
        JobRunnerSettings,
        WorkerSettings,
    )
}
DOCS: Final = (ROOT / "docs" / "configuration.md", ROOT / "docs" / "workers.md")
_SECTION: Final = re.compile(r"(<!-- settings: (\w+) -->\n)(.*?)(<!-- /settings -->)", re.DOTALL)


def default_of(setting: Setting) -> str:
    extra = setting.field.json_schema_extra
    if isinstance(extra, dict) and "shown" in extra:
        return f"`{extra['shown']}`"
    if setting.required:
        return "required"
    value = setting.default
    if value in (None, (), {}):
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple) and setting.option is None:
        return "`" + ", ".join(str(item) for item in value) + "`"
    return f"`{shown(value)}`"


def _text(description: str) -> str:
    return " ".join(description.replace("``", "`").replace("|", "\\|").split())


def table(model: type[Settings]) -> str:
    """The table of ``model``: every field, nested groups flattened."""
    command_line = any(s.option is not None for s in settings_of(model))
    lines = (
        ["| setting | option | variable | default | |", "|---|---|---|---|---|"]
        if command_line
        else ["| setting | default | |", "|---|---|---|"]
    )
    for setting in settings_of(model):
        option = setting.option
        flag = f"`{option.flag}`" if option is not None and option.flag else ""
        env = f"`{option.env}`" if option is not None and option.env else ""
        cells = [f"`{setting.name}`"]
        if command_line:
            cells += [flag, env]
        cells += [default_of(setting), _text(setting.description)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """``text`` with every settings section rewritten from its model."""

    def section(match: re.Match[str]) -> str:
        return match.group(1) + table(MODELS[match.group(2)]) + match.group(4)

    return _SECTION.sub(section, text)


def sections(text: str) -> dict[str, str]:
    """The models a document has tables of, and the tables as written."""
    return {match.group(2): match.group(3) for match in _SECTION.finditer(text)}


if __name__ == "__main__":
    for path in DOCS:
        before = path.read_text("utf-8")
        after = render(before)
        if after != before:
            path.write_text(after, "utf-8")
            print(f"rewrote the settings tables of {path.relative_to(ROOT)}", file=sys.stderr)
