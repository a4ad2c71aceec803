"""The docs are checked against the code and the chart, so that a reader who copies an
example gets what it says.

Over ``README.md`` and ``docs/*.md``:

- every fenced Python snippet compiles, its ``tickwork`` imports resolve, and the calls
  and attributes it makes on tickwork's own objects (a ``Worker``, a ``RunContext``,
  a ``WorkerClient``) exist and bind to their signatures (one scope per document, as
  the reader keeps the ``worker`` of an earlier snippet in mind);
- every ``tickwork …`` command (in shell blocks, synopses and inline code) names a
  command of the CLI and only options that command has, and click parses it with
  ``--help``; the options tables name options the commands have, with their variables;
  the offline commands' (``tickwork schedule``) output is what the docs show;
- the chart objects, Services (with their ports) and values the docs name exist in the
  chart rendered offline, and the RBAC the docs list is what the chart grants; the
  chart's NOTES.txt prints only what works without a checkout;
- ScheduledJob manifests and tokens files shown are valid; the API paths, problem types
  (both ways), log actions, metrics (with their types and labels) and, in the
  architecture map, the modules named exist;
- relative links resolve to files, and their ``#anchors`` to headings (GitHub's rules).

A block that is deliberately partial is marked on the line before its fence with
``<!-- not checked: the reason -->``; keep such marks few.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import json
import re
import shlex
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
import settings_tables
import yaml
from chart.chart import CHART, NAMESPACE, RELEASE, VALUE_SETS, Rendered, chart, name, render
from click.testing import CliRunner

from tickwork.api.access import Operation
from tickwork.api.auth import StaticTokens, TokenEntry
from tickwork.cli import cli
from tickwork.core.errors import SchemaMismatch, TickworkError
from tickwork.core.settings import settings_of
from tickwork.engine import manifests
from tickwork.worker import Worker, WorkerSettings
from tickwork.worker import run as run_worker
from tickwork.worker.testing import RunOptions, run_handler, run_handler_async

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
MAX_UNCHECKED = 3


def _report(problems: list[str]) -> str:
    return "the docs disagree with the code or the chart:\n  " + "\n  ".join(problems)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ---------------------------------------------------------------------------------------
# Markdown, as far as the checks need it: fenced blocks, inline code, headings, tables,
# links.

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_MARK = re.compile(r"^\s*<!--\s*not checked:\s*(?P<reason>.*?)\s*-->\s*$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    lang: str
    text: str
    unchecked: str | None  # the reason a `not checked` mark gives

    def where(self, offset: int = 1) -> str:
        """``path:line`` of the block's ``offset``-th line (1: the first inside)."""
        return f"{_shown(self.path)}:{self.line + offset}"


@dataclasses.dataclass(frozen=True)
class Span:
    path: Path
    line: int
    text: str  # whitespace collapsed: a span may wrap

    def where(self) -> str:
        return f"{_shown(self.path)}:{self.line}"


Row = tuple[int, list[str]]


@dataclasses.dataclass(frozen=True)
class Markdown:
    path: Path
    blocks: tuple[Block, ...]
    prose: tuple[str, ...]  # the lines, fenced blocks blanked (line numbers kept)

    def paragraphs(self) -> Iterator[tuple[int, str]]:
        """(first line, text) of each run of non-blank prose lines."""
        start, lines = 0, []
        for number, line in enumerate((*self.prose, ""), start=1):
            if line.strip():
                if not lines:
                    start = number
                lines.append(line)
            elif lines:
                yield start, "\n".join(lines)
                lines = []

    def spans(self) -> Iterator[Span]:
        for start, text in self.paragraphs():
            for match in _CODE_SPAN.finditer(text):
                line = start + text.count("\n", 0, match.start())
                yield Span(self.path, line, " ".join(match.group(2).split()))

    def links(self) -> Iterator[tuple[int, str]]:
        for start, text in self.paragraphs():
            # Code spans may hold brackets and parentheses that are no link.
            blanked = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)
            for match in _LINK.finditer(blanked):
                yield start + text.count("\n", 0, match.start()), match.group(3)

    def anchors(self) -> set[str]:
        """The anchors GitHub gives the headings (and the explicit ``id``s)."""
        found: set[str] = set()
        counts: dict[str, int] = {}
        for line in self.prose:
            heading = _HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                count = counts.get(base, 0)
                counts[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
        return found

    def tables(self) -> Iterator[tuple[int, list[str], list[Row]]]:
        """(line, header cells, rows) of every table."""
        index = 0
        while index + 1 < len(self.prose):
            if self.prose[index].startswith("|") and re.fullmatch(
                r"[|:\- ]+", self.prose[index + 1]
            ):
                start, header, rows = index + 1, _cells(self.prose[index]), []
                index += 2
                while index < len(self.prose) and self.prose[index].startswith("|"):
                    rows.append((index + 1, _cells(self.prose[index])))
                    index += 1
                yield start, header, rows
            else:
                index += 1

    def rows(self, *header: str) -> list[Row]:
        """The rows of the tables whose header begins with ``header``."""
        return [
            row
            for _, cells, rows in self.tables()
            if cells[: len(header)] == list(header)
            for row in rows
        ]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text, lowercased, punctuation dropped, spaces
    made hyphens (markup counts by its text)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def document(path: Path) -> Markdown:
    lines = path.read_text("utf-8").split("\n")
    prose = list(lines)
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        end = index + 1
        while end < len(lines):
            closing = lines[end].strip()
            if closing.startswith(fence[0] * len(fence)) and not closing.strip(fence[0]):
                break
            end += 1
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        mark = _MARK.match(before)
        body = "\n".join(
            line[indent:] if not line[:indent].strip() else line for line in lines[index + 1 : end]
        )
        info = opening.group("info").lower()
        blocks.append(Block(path, index + 1, info, body, mark.group("reason") if mark else None))
        for blanked in range(index, min(end + 1, len(lines))):
            prose[blanked] = ""
        index = end + 1
    return Markdown(path, tuple(blocks), tuple(prose))


def _checked(lang: str | tuple[str, ...]) -> Iterator[Block]:
    """The blocks of one language (or several) that carry no `not checked` mark."""
    langs = (lang,) if isinstance(lang, str) else lang
    for path in DOCS:
        for block in document(path).blocks:
            if block.lang in langs and block.unchecked is None:
                yield block


def test_few_blocks_are_left_unchecked_and_each_says_why() -> None:
    unchecked = [block for path in DOCS for block in document(path).blocks if block.unchecked]
    marks = [
        line for path in DOCS for line in path.read_text("utf-8").split("\n") if _MARK.match(line)
    ]
    assert len(marks) == len(unchecked), "a `not checked` mark must sit right before a fence"
    assert all(block.unchecked for block in unchecked), "a mark gives its reason"
    assert len(unchecked) <= MAX_UNCHECKED, [block.where(0) for block in unchecked]


# ---------------------------------------------------------------------------------------
# Links.


def link_problems(path: Path) -> list[str]:
    problems = []
    for line, target in document(path).links():
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        where = f"{_shown(path)}:{line}"
        if not resolved.exists():
            problems.append(f"{where}: {target}: no file {_shown(resolved)}")
        elif anchor:
            if resolved.suffix != ".md":
                problems.append(f"{where}: {target}: an anchor into a file that is not Markdown")
            elif anchor not in document(resolved).anchors():
                problems.append(f"{where}: {target}: no heading #{anchor} in {resolved.name}")
    return problems


def test_relative_links_resolve_to_files_and_headings() -> None:
    problems = [problem for path in DOCS for problem in link_problems(path)]
    assert not problems, _report(problems)


# ---------------------------------------------------------------------------------------
# Python snippets: compiled, tickwork names resolved, calls bound to their signatures.


@dataclasses.dataclass(frozen=True)
class Instance:
    """A name bound to an object of a tickwork class (``worker = Worker.from_env()``)."""

    cls: type


@dataclasses.dataclass(frozen=True)
class Member:
    """A method looked up on an instance: called with the instance as ``self``."""

    cls: type
    name: str


def _keyword_models() -> dict[Any, set[str]]:
    """Callables whose ``**keywords`` are the fields of a settings model."""
    settings = set(WorkerSettings.model_fields)
    return {
        Worker: settings,
        Worker.from_env: settings | {"url", "token"},
        run_worker: settings | {"url", "token"},
        # The handler test helpers take make_context's keywords through RunOptions.
        run_handler: set(RunOptions.__annotations__),
        run_handler_async: set(RunOptions.__annotations__),
    }


def _is_tickwork(value: object) -> bool:
    module = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", "")
    return isinstance(module, str) and module.split(".")[0] == "tickwork"


def _has_attribute(cls: type, attribute: str) -> bool:
    if hasattr(cls, attribute) or attribute in getattr(cls, "model_fields", {}):
        return True
    if dataclasses.is_dataclass(cls) and attribute in {f.name for f in dataclasses.fields(cls)}:
        return True
    return any(attribute in getattr(base, "__annotations__", {}) for base in cls.__mro__)


def _return_type(function: Callable[..., object]) -> type | None:
    try:
        hints = typing.get_type_hints(function)
    except Exception:
        return None
    returned = hints.get("return")
    return returned if isinstance(returned, type) and _is_tickwork(returned) else None


def _in_order(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every statement, in source order (a statement before those it contains)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.stmt):
            yield child
            yield from _in_order(child)


class SnippetChecker:
    """Reads a document's Python snippets in order, in one scope: what a name stands
    for is followed as far as it is tickwork's (an imported class, an instance made by
    a call, a parameter annotated with a tickwork class)."""

    def __init__(self) -> None:
        self.scope: dict[str, object] = {}
        self.problems: list[str] = []
        self.keyword_models = _keyword_models()

    def check(self, block: Block) -> None:
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # `async with WorkerClient(…)` at the top
        try:
            tree = compile(block.text, block.where(0), "exec", ast.PyCF_ONLY_AST | flags)
            compile(tree, block.where(0), "exec", flags)  # `return` outside a function, …
        except SyntaxError as error:
            self.problems.append(f"{block.where(error.lineno or 1)}: {error.msg}")
            return
        for statement in _in_order(tree):
            self._statement(block, statement)

    def _problem(self, block: Block, node: ast.AST, message: str) -> None:
        self.problems.append(f"{block.where(getattr(node, 'lineno', 1))}: {message}")

    def _statement(self, block: Block, node: ast.stmt) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "tickwork":
                    continue
                try:
                    module = importlib.import_module(alias.name)
                except ImportError as error:
                    self._problem(block, node, f"import {alias.name}: {error}")
                    continue
                top = alias.asname or "tickwork"
                self.scope[top] = module if alias.asname else importlib.import_module("tickwork")
        elif isinstance(node, ast.ImportFrom):
            if not node.module or node.level or node.module.split(".")[0] != "tickwork":
                return
            try:
                module = importlib.import_module(node.module)
            except ImportError as error:
                self._problem(block, node, f"from {node.module} import …: {error}")
                return
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if value is None:
                    try:
                        value = importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        self._problem(block, node, f"{node.module} has no {alias.name}")
                        continue
                self.scope[alias.asname or alias.name] = value
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = self._resolve(block, node.value) if node.value is not None else None
            for target in targets:
                if isinstance(target, ast.Name):
                    self._bind(target.id, value)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                value = self._resolve(block, item.context_expr)
                if isinstance(item.optional_vars, ast.Name):
                    self._bind(item.optional_vars.id, value)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                self._resolve(block, decorator)
            arguments = node.args
            for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
                given = argument.annotation
                annotation = self._resolve(block, given) if given is not None else None
                tickworks = isinstance(annotation, type) and _is_tickwork(annotation)
                self._bind(argument.arg, Instance(annotation) if tickworks else None)
        else:
            if isinstance(node, ast.For | ast.AsyncFor) and isinstance(node.target, ast.Name):
                self._bind(node.target.id, None)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self._resolve(block, child)

    def _bind(self, name: str, value: object) -> None:
        if isinstance(value, Instance) or (value is not None and _is_tickwork(value)):
            self.scope[name] = value
        else:
            self.scope.pop(name, None)

    def _resolve(self, block: Block, node: ast.expr) -> object:
        """What an expression stands for (None: not tickwork's, or not known); every
        call and attribute on the way is checked."""
        if isinstance(node, ast.Name):
            return self.scope.get(node.id)
        if isinstance(node, ast.Await):
            self._resolve(block, node.value)
            return None  # what a coroutine gives is not followed
        if isinstance(node, ast.Attribute):
            base = self._resolve(block, node.value)
            if isinstance(base, Instance):
                if not _has_attribute(base.cls, node.attr):
                    self._problem(block, node, f"{base.cls.__name__} has no {node.attr!r}")
                    return None
                return Member(base.cls, node.attr)
            if isinstance(base, ModuleType | type) and _is_tickwork(base):
                if not hasattr(base, node.attr):
                    self._problem(block, node, f"{base.__name__} has no {node.attr!r}")
                    return None
                return getattr(base, node.attr)
            return None
        if isinstance(node, ast.Call):
            function = self._resolve(block, node.func)
            for argument in (*node.args, *(k.value for k in node.keywords)):
                self._resolve(block, argument)
            return self._call(block, node, function)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._resolve(block, child)
        return None

    def _call(self, block: Block, node: ast.Call, function: object) -> object:
        leading: list[object] = []
        if isinstance(function, Member):
            static = inspect.getattr_static(function.cls, function.name)
            target = getattr(function.cls, function.name)
            if not isinstance(static, staticmethod | classmethod):
                leading = [None]  # self
        elif function is not None and not isinstance(function, Instance | ModuleType):
            target = function
        else:
            return None
        if not callable(target) or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        if any(k.arg is None for k in node.keywords):  # **mapping: the names are unknown
            return None
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):
            return None
        shown = ast.unparse(node.func)
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        try:
            bound = signature.bind(*leading, *node.args, **keywords)
        except TypeError as error:
            self._problem(block, node, f"{shown}(…): {error}")
            return None
        allowed = self.keyword_models.get(target)
        for parameter in signature.parameters.values():
            if allowed is not None and parameter.kind is inspect.Parameter.VAR_KEYWORD:
                for keyword in bound.arguments.get(parameter.name, {}):
                    if keyword not in allowed:
                        self._problem(block, node, f"{shown}(…): no setting {keyword!r}")
        if isinstance(target, type):
            return Instance(target)
        returned = _return_type(target)
        return Instance(returned) if returned is not None else None


def python_problems(paths: tuple[Path, ...]) -> tuple[list[str], int]:
    problems: list[str] = []
    checked = 0
    for path in paths:
        checker = SnippetChecker()
        for block in document(path).blocks:
            if block.lang in ("python", "py") and block.unchecked is None:
                checker.check(block)
                checked += 1
        problems += checker.problems
    return problems, checked


def test_python_snippets_compile_and_their_tickwork_names_resolve() -> None:
    problems, checked = python_problems(DOCS)
    assert checked >= 5, "no Python snippets found: is the fence parser broken?"
    assert not problems, _report(problems)


# The snippet check finds the mistakes it is for (issue 21 found the first one).
_WRONG_SNIPPETS = {
    "keyword-only": (
        "from tickwork.worker import RunContext, Worker\nworker = Worker.from_env()\n\n"
        '@worker.handler("export-invoices")\nasync def f(ctx: RunContext) -> None:\n'
        "    ctx.payload\n",
        "worker.handler(…): too many positional arguments",
    ),
    "attribute": (
        "from tickwork.worker import RunContext\n"
        "async def f(ctx: RunContext) -> None:\n    ctx.idempotencyKey\n",
        "RunContext has no 'idempotencyKey'",
    ),
    "import": ("from tickwork.worker import Workers\n", "has no Workers"),
    "setting": (
        "from tickwork.worker import Worker\nWorker.from_env(threads=4)\n",
        "no setting 'threads'",
    ),
    "client": (
        "from tickwork.worker import WorkerClient\n"
        "async with WorkerClient(url, token) as client:\n    await client.lease_runs()\n",
        "WorkerClient has no 'lease_runs'",
    ),
}


@pytest.mark.parametrize("sample", sorted(_WRONG_SNIPPETS))
def test_the_snippet_check_finds_a_wrong_snippet(sample: str, tmp_path: Path) -> None:
    code, expected = _WRONG_SNIPPETS[sample]
    path = tmp_path / "sample.md"
    path.write_text(f"```python\n{code}```\n", "utf-8")
    problems, _ = python_problems((path,))
    assert any(expected in problem for problem in problems), problems


# ---------------------------------------------------------------------------------------
# The command line: `tickwork …` in shell blocks, synopses, inline code and tables.

_SHELLS = ("sh", "bash", "shell", "console", "zsh")
_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "<"}


@dataclasses.dataclass(frozen=True)
class Command:
    where: str
    args: tuple[str, ...]  # after `tickwork`


def _complete(line: str) -> bool:
    try:
        shlex.split(line, comments=True)
    except ValueError:
        return False
    return True


def _shell_lines(block: Block) -> Iterator[tuple[int, str]]:
    """(line offset, command line) of a shell block: continuations joined; heredocs,
    comments and a console's output left out."""
    lines = block.text.split("\n")
    index, heredoc = 0, None
    while index < len(lines):
        offset, line = index + 1, lines[index]
        index += 1
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if block.lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        # A line goes on after a backslash, and inside a quoted string (a JSON body).
        while index < len(lines) and (line.rstrip().endswith("\\") or not _complete(line)):
            if line.rstrip().endswith("\\"):
                line = line.rstrip()[:-1] + " " + lines[index].strip()
            else:
                line += "\n" + lines[index]
            index += 1
        started = re.search(r"<<-?\s*'?(\w+)'?", line)
        if started:
            heredoc = started.group(1)
        if _complete(line):
            yield offset, line


def _synopsis_lines(block: Block) -> Iterator[tuple[int, str]]:
    """A synopsis block (``tickwork role --option VALUE [--flag] …``): indented lines
    continue the line above."""
    current: tuple[int, str] | None = None
    for offset, line in enumerate(block.text.split("\n"), start=1):
        if line[:1].isspace() and current is not None:
            current = (current[0], current[1] + " " + line.strip())
            continue
        if current is not None:
            yield current
        current = (offset, line) if line.strip() else None
    if current is not None:
        yield current


def _synopsis_tokens(text: str) -> list[str]:
    """A synopsis's words: brackets and alternatives dropped (`[--flag]`, `a|b`)."""
    text = re.sub(r"[\[\]|]", " ", text)
    return [t for t in shlex.split(text) if t not in ("…", "...")]


def _tickwork_args(tokens: list[str]) -> Iterator[tuple[str, ...]]:
    """The arguments of every `tickwork` command of a shell line."""
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token not in _OPERATORS:
            segment.append(token)
            continue
        words, segment = segment, []
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words.pop(0)  # VARIABLE=value before the command
        if words and (words[0] == "tickwork" or words[0].endswith("/bin/tickwork")):
            yield tuple(words[1:])


def commands(path: Path) -> Iterator[Command]:
    markdown = document(path)
    for block in markdown.blocks:
        if block.unchecked is not None:
            continue
        if block.lang in _SHELLS:
            for offset, line in _shell_lines(block):
                for args in _tickwork_args(shlex.split(line, comments=True)):
                    yield Command(block.where(offset), args)
        elif block.lang == "" and block.text.lstrip().startswith("tickwork "):
            for offset, line in _synopsis_lines(block):
                for args in _tickwork_args(_synopsis_tokens(line)):
                    yield Command(block.where(offset), args)
    for span in markdown.spans():
        words = span.text.split()
        # `tickwork dispatcher: port 8080 is in use` is a message, not a command.
        if len(words) > 1 and words[0] == "tickwork" and re.fullmatch(r"[a-z][a-z-]*", words[1]):
            yield Command(span.where(), tuple(_synopsis_tokens(span.text)[1:]))


def _context() -> click.Context:
    return click.Context(cli, info_name="tickwork")


def _command(path: tuple[str, ...]) -> click.Command | None:
    current: click.Command | None = cli
    for word in path:
        if not isinstance(current, click.Group):
            return None
        current = current.get_command(_context(), word)
    return current


def _option(command: click.Command, flag: str) -> click.Option | None:
    """The option ``flag`` of ``command`` (``--x=1`` names ``--x``); of a group, an
    option every sub-command has."""
    flag = flag.split("=")[0]
    if isinstance(command, click.Group):
        found = [
            _option(sub, flag)
            for word in command.list_commands(_context())
            if (sub := command.get_command(_context(), word)) is not None
        ]
        return found[0] if found and all(found) else None
    for parameter in command.params:
        if isinstance(parameter, click.Option) and flag in (
            *parameter.opts,
            *parameter.secondary_opts,
        ):
            return parameter
    return None


def cli_problems(command: Command) -> list[str]:
    return [f"{command.where}: {problem}" for problem in _cli_problems(command.args)]


@functools.cache
def _cli_problems(args: tuple[str, ...]) -> tuple[str, ...]:
    """What is wrong with ``tickwork *args`` (the same command is checked once)."""
    current: click.Command = cli
    path: list[str] = []
    rest = list(args)
    while isinstance(current, click.Group) and rest and not rest[0].startswith("-"):
        word = rest.pop(0)
        found = current.get_command(_context(), word)
        if found is None:
            return (f"no command `tickwork {' '.join([*path, word])}`",)
        path.append(word)
        current = found
    shown = " ".join(["tickwork", *path])
    problems = [
        f"`{shown}` has no option {token.split('=')[0]}"
        for token in rest
        if re.match(r"^--?[A-Za-z]", token)
        and token not in ("--help", "-h")
        and _option(current, token) is None
    ]
    if problems:
        return tuple(problems)
    # An option named without its value (`tickwork dev --manifests` in prose) is given
    # one, so that --help is not taken for it.
    given: list[str] = []
    for index, token in enumerate(rest):
        given.append(token)
        option = _option(current, token) if token.startswith("--") else None
        following = rest[index + 1] if index + 1 < len(rest) else "--"
        takes_value = option is not None and not option.is_flag and not option.count
        if takes_value and "=" not in token and following.startswith("--"):
            given.append("VALUE")
    result = CliRunner().invoke(cli, [*path, *given, "--help"])
    if result.exit_code != 0 or "Usage:" not in result.output:
        return (f"`{shown} … --help`: {result.output.strip()}",)
    return ()


def test_cli_examples_name_commands_and_options_that_exist() -> None:
    found = [command for path in DOCS for command in commands(path)]
    assert len(found) >= 20, "few tickwork commands found: is the parser broken?"
    problems = [problem for command in found for problem in cli_problems(command)]
    assert not problems, _report(problems)


def test_the_cli_check_finds_a_wrong_command(tmp_path: Path) -> None:
    path = tmp_path / "sample.md"
    path.write_text(
        "```sh\ntickwork dlq replay --force r1-2\ntickwork jobz list\n```\n\n"
        "Run `tickwork schedule preview --zone UTC`.\n",
        "utf-8",
    )
    found = [problem for command in commands(path) for problem in cli_problems(command)]
    assert any("`tickwork dlq replay` has no option --force" in p for p in found), found
    assert any("no command `tickwork jobz`" in p for p in found), found
    assert any("`tickwork schedule preview` has no option --zone" in p for p in found), found


def _commands_of_sections(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """Where a doc starts speaking of one command: a heading naming `tickwork X`, or a
    synopsis block."""
    found: list[tuple[int, tuple[str, ...]]] = []
    markdown = document(path)
    for number, line in enumerate(markdown.prose, start=1):
        heading = _HEADING.match(line)
        named = re.search(r"`tickwork ([a-z][a-z -]*)`", heading.group(2)) if heading else None
        if named:
            found.append((number, tuple(named.group(1).split())))
    for block in markdown.blocks:
        if block.lang == "" and block.text.startswith("tickwork "):
            found.append((block.line, (block.text.split()[1],)))
    return sorted(found)


def option_table_problems(path: Path) -> list[str]:
    """Tables with an `option` (or `flag`) column: each option exists on the commands
    of the row's `roles`, else of the command the section is about; a `variable` is
    the environment variable of the row's option."""
    problems: list[str] = []
    names = set(cli.list_commands(_context()))
    sections = _commands_of_sections(path)
    for start, header, rows in document(path).tables():
        lowered = [cell.lower() for cell in header]
        column = next((i for i, c in enumerate(lowered) if c in ("option", "flag")), None)
        if column is None:
            continue
        roles = lowered.index("roles") if "roles" in lowered else None
        variable = lowered.index("variable") if "variable" in lowered else None
        section = [command for line, command in sections if line < start][-1:]
        for number, cells in rows:
            where = f"{_shown(path)}:{number}"
            flags = [
                flag
                for span in re.findall(r"`([^`]+)`", cells[column])
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", span)
            ]
            if roles is None:
                paths = section
            else:
                paths = [(w,) for w in re.findall(r"`([^`]+)`", cells[roles]) if w in names]
            found: list[click.Option] = []
            for command_path in paths if flags else []:
                command = _command(command_path)
                shown = " ".join(("tickwork", *command_path))
                if command is None:
                    problems.append(f"{where}: no command `{shown}`")
                    continue
                for flag in flags:
                    option = _option(command, flag)
                    if option is None:
                        problems.append(f"{where}: `{shown}` has no option {flag}")
                    else:
                        found.append(option)
            if variable is not None and found:
                envvars = set()
                for option in found:
                    envvars.update([option.envvar] if isinstance(option.envvar, str) else [])
                    envvars.update(option.envvar if isinstance(option.envvar, list) else [])
                for env in sorted(set(re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[variable]))):
                    if env not in envvars:
                        problems.append(f"{where}: {env} is not the variable of {flags}")
    return problems


def test_option_tables_name_options_the_commands_have() -> None:
    problems = [problem for path in DOCS for problem in option_table_problems(path)]
    assert not problems, _report(problems)


def console_sessions(path: Path) -> Iterator[tuple[str, list[str], str]]:
    """(where, tickwork arguments, the output shown) of the console blocks' commands."""
    for block in document(path).blocks:
        if block.lang != "console" or block.unchecked is not None:
            continue
        lines = block.text.split("\n")
        for index, line in enumerate(lines):
            if not line.startswith("$ "):
                continue
            output = []
            for following in lines[index + 1 :]:
                if following.startswith("$ "):
                    break
                output.append(following)
            for args in _tickwork_args(shlex.split(line[2:], comments=True)):
                yield block.where(index + 1), list(args), "\n".join(output).strip()


def test_offline_commands_print_what_the_docs_show() -> None:
    """`tickwork schedule` needs no server: its examples are run and their output
    compared."""
    problems = []
    ran = 0
    for path in DOCS:
        for where, args, shown in console_sessions(path):
            if args[:1] == ["schedule"]:
                ran += 1
                result = CliRunner().invoke(cli, args)
                if result.exit_code != 0 or result.output.strip() != shown:
                    problems.append(f"{where}: prints\n{result.output}")
    assert ran >= 2
    assert not problems, _report(problems)


# ---------------------------------------------------------------------------------------
# The chart: the objects, Services, values and RBAC the docs name, and its NOTES.txt.


@functools.cache
def renders() -> dict[str, Rendered]:
    return {key: render(dict(values)) for key, values in VALUE_SETS.items()}


@functools.cache
def chart_objects() -> frozenset[tuple[str, str]]:
    """(kind, name) of everything the chart makes in any of the test value sets, and
    the Secrets cert-manager writes for its Certificates."""
    found: set[tuple[str, str]] = set()
    for rendered in renders().values():
        for made in rendered.documents:
            found.add((made["kind"], made["metadata"]["name"]))
            if made["kind"] == "Certificate":
                found.add(("Secret", made["spec"]["secretName"]))
    return frozenset(found)


@functools.cache
def service_ports() -> dict[str, frozenset[int]]:
    ports: dict[str, set[int]] = {}
    for rendered in renders().values():
        for service in rendered.kinds("Service"):
            ports.setdefault(service["metadata"]["name"], set()).update(
                p["port"] for p in service["spec"]["ports"]
            )
    return {key: frozenset(value) for key, value in ports.items()}


@functools.cache
def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text("utf-8"))
    return loaded


@functools.cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text("utf-8"))
    return loaded


def value_exists(path: str) -> bool:
    """A dotted path of the chart's values (``*``: any key below), in values.yaml or,
    for what has no default there, in values.schema.json."""
    node: Any = values()
    for key in path.split("."):
        if key == "*" and isinstance(node, dict):
            return True
        if not isinstance(node, dict) or key not in node:
            break
        node = node[key]
    else:
        return True
    node = schema()
    for key in path.split("."):
        if key == "*":
            return bool(node.get("type") == "object")
        if key in node.get("properties", {}):
            node = node["properties"][key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
        while "$ref" in node:
            node = schema()["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return True


@functools.cache
def not_values() -> frozenset[str]:
    """Dotted names the docs use that are no chart value: the roles' settings
    (`database.shards`) and the access policy's operations (`metrics.read`)."""
    settings = {s.name for model in settings_tables.MODELS.values() for s in settings_of(model)}
    return frozenset(settings | {operation.value for operation in Operation})


_KINDS = {
    "svc": "Service",
    "service": "Service",
    "deployment": "Deployment",
    "deploy": "Deployment",
    "job": "Job",
    "secret": "Secret",
    "configmap": "ConfigMap",
    "statefulset": "StatefulSet",
}
_NAME = re.compile(
    r"(?:\b(?P<kind>" + "|".join(_KINDS) + r")/)?"
    r"(?P<name>(?:<release>|\b" + RELEASE + r")-tickwork(?:-(?:[a-z0-9]+|<[a-z-]+>))*)"
)
_URL = re.compile(r"\b(?P<scheme>https?)://(?P<host>[A-Za-z0-9<>._-]+)(?::(?P<port>\d+))?")
_SET = re.compile(r"--set(?:-string|-json|-file)?[ =]+(?P<path>[A-Za-z0-9_.]+)=")
_FILE_TYPES = {"conf", "crt", "json", "key", "md", "pem", "py", "sql", "toml", "txt", "yaml"}
_VALUE_SPAN = re.compile(r"(?P<path>[a-z][A-Za-z0-9]*(?:\.(?:[A-Za-z0-9]+|\*))+)(?:=\S*)?")


def _object_exists(kind: str | None, named: str) -> bool:
    """Whether the chart makes ``named`` (``<revision>``-like placeholders match any
    name part)."""
    expected = re.compile(
        "".join(
            "[a-z0-9-]+" if part.startswith("<") else re.escape(part)
            for part in re.split(r"(<[a-z-]+>)", named.replace("<release>", RELEASE))
        )
    )
    return any(
        expected.fullmatch(found) and kind in (None, found_kind)
        for found_kind, found in chart_objects()
    )


def name_problems(where: str, text: str) -> list[str]:
    """Chart objects named in ``text`` (``<release>-tickwork-…``, ``svc/…``) and the
    Services (and ports) of in-cluster URLs."""
    problems = []
    for match in _NAME.finditer(text):
        kind = _KINDS.get(match.group("kind") or "")
        if not _object_exists(kind, match.group("name")):
            problems.append(f"{where}: the chart makes no {kind or 'object'} {match.group('name')}")
    for match in _URL.finditer(text):
        host = match.group("host")
        labels = host.split(".")
        in_cluster = len(labels) == 1 or host.endswith((".svc", ".svc.cluster.local"))
        if not in_cluster or labels[0] in ("localhost", "kubernetes"):
            continue
        service = labels[0].replace("<release>", RELEASE)
        port = int(match.group("port") or (443 if match.group("scheme") == "https" else 80))
        ports = service_ports().get(service)
        if ports is None:
            problems.append(
                f"{where}: {match.group(0)}: the chart has no Service {service} "
                f"(it has {', '.join(sorted(service_ports()))})"
            )
        elif port not in ports:
            problems.append(f"{where}: {match.group(0)}: {service} listens on {sorted(ports)}")
        elif len(labels) > 1 and labels[1] not in (NAMESPACE, "<namespace>"):
            problems.append(f"{where}: {match.group(0)}: the release is in {NAMESPACE}")
    return problems


def value_problems(where: str, text: str, *, span: bool) -> list[str]:
    """Chart values ``--set`` names and, for an inline code span, the span itself when
    it reads as a value path (its first key a top-level value)."""
    paths = [m.group("path") for m in _SET.finditer(text)]
    whole = _VALUE_SPAN.fullmatch(text) if span else None
    if (
        whole
        and whole["path"].split(".")[0] in values()
        and whole["path"] not in not_values()
        and whole["path"].rsplit(".", 1)[1] not in _FILE_TYPES  # `postgresql.conf`
    ):
        paths.append(whole["path"])
    return [f"{where}: the chart has no value {path}" for path in paths if not value_exists(path)]


def test_the_chart_objects_services_and_values_the_docs_name_exist() -> None:
    problems: list[str] = []
    for path in DOCS:
        markdown = document(path)
        for block in markdown.blocks:
            if block.unchecked is None and block.lang not in ("python", "py"):
                problems += name_problems(block.where(0), block.text)
                problems += value_problems(block.where(0), block.text, span=False)
        for number, line in enumerate(markdown.prose, start=1):
            problems += name_problems(f"{_shown(path)}:{number}", line)
        for span in markdown.spans():
            problems += value_problems(span.where(), span.text, span=True)
    assert not problems, _report(problems)


def test_the_chart_check_finds_a_wrong_name() -> None:
    """The names issue 21 found wrong, and their right forms."""
    problems = name_problems("x", "export TICKWORK_URL=http://tickwork:8080")
    assert any("the chart has no Service tickwork" in p for p in problems), problems
    assert name_problems("x", "http://<release>-tickwork-dispatcher.<namespace>.svc") == []
    assert name_problems("x", f"https://{RELEASE}-tickwork-dispatcher.{NAMESPACE}.svc")
    assert name_problems("x", f"kubectl logs deployment/{RELEASE}-tickwork-migrate-<revision>")
    assert value_problems("x", "dispatcher.authAudience", span=True)
    assert not value_problems("x", "dispatcher.authAudiences", span=True)
    assert value_problems("x", "--set dispatcher.replica=3", span=False)


def notes(values_: dict[str, Any]) -> str:
    manifests_ = chart().render(values=values_, name=RELEASE, namespace=NAMESPACE, is_install=True)
    [text] = [text for path, text in manifests_.items() if path.endswith("NOTES.txt")]
    return text


@pytest.mark.parametrize("values_name", sorted(VALUE_SETS))
def test_the_chart_notes_use_only_what_the_chart_ships(values_name: str) -> None:
    """NOTES.txt is read after `helm install` of a packaged chart: what it prints must
    work without a checkout, and name what the chart makes."""
    text = notes(dict(VALUE_SETS[values_name]))
    where = f"NOTES.txt ({values_name})"
    problems = name_problems(where, text)
    for path in re.findall(r"\b[a-z][A-Za-z]*(?:\.[a-z][A-Za-z]*)+\b", text):
        if path.split(".")[0] in values() and not value_exists(path):
            problems.append(f"{where}: the chart has no value {path}")
    for line in text.split("\n"):
        applied = re.search(r"kubectl\b.*\s(?:-f|--filename)[ =]?(\S+)", line)
        if applied and applied.group(1) != "-" and not applied.group(1).startswith("http"):
            problems.append(f"{where}: {line.strip()}: the chart ships no {applied.group(1)}")
    for _, body in re.findall(r"<<-?\s*'?(\w+)'?\n(.*?)\n\s*\1\b", text, re.DOTALL):
        for manifest in yaml.safe_load_all(body):
            try:
                manifests.parse_document(manifest, where)
            except manifests.ManifestError as error:
                problems.append(f"{where}: {error}")
    assert not problems, _report(problems)


_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}


def _permissions(cell: str) -> set[tuple[str, str]]:
    """(resource, verb) of a cell such as "`get`, `list` `leases`; `create` `events`"
    (a kind in words counts as its resource: "`get` the Lease `tickwork-operator`")."""
    found: set[tuple[str, str]] = set()
    for part in cell.split(";"):
        words = re.findall(r"`([^`]+)`", part)
        verbs = [w for w in words if w in _VERBS]
        resources = [w for w in words if w not in _VERBS and re.fullmatch(r"[a-z]+(/[a-z]+)?", w)]
        resources += [f"{kind.lower()}s" for kind in re.findall(r"\bthe (Lease|Secret)s?\b", part)]
        found.update((resource, verb) for resource in resources for verb in verbs)
    return found


def _granted(account: str) -> set[tuple[str, str]]:
    """(resource, verb) the chart's bindings give the release's ServiceAccount (a rule
    limited to some resourceNames counts: the docs say which names in words)."""
    rendered = renders()["minimal"]
    found: set[tuple[str, str]] = set()
    for binding in rendered.kinds("RoleBinding") + rendered.kinds("ClusterRoleBinding"):
        if not any(
            subject["kind"] == "ServiceAccount"
            and subject["name"] == name(account)
            and subject.get("namespace") == NAMESPACE
            for subject in binding.get("subjects", [])
        ):
            continue
        reference = binding["roleRef"]
        for role in rendered.kinds(reference["kind"]):
            same_namespace = role["metadata"].get("namespace") == binding["metadata"].get(
                "namespace"
            )
            if role["metadata"]["name"] == reference["name"] and (
                reference["kind"] == "ClusterRole" or same_namespace
            ):
                for rule in role["rules"]:
                    found.update((r, v) for r in rule["resources"] for v in rule["verbs"])
    return found


def test_the_rbac_the_docs_list_is_what_the_chart_grants() -> None:
    problems: list[str] = []
    # A row names its account ("secrets hook (install, upgrade)": tw-tickwork-secrets);
    # rows of one account add up ("operator, with the hook's certificate"), and the
    # chart's smallest install has every one of them.
    listed_by: dict[str, set[tuple[str, str]]] = {}
    for _, cells in document(ROOT / "docs" / "operations.md").rows("ServiceAccount", "may"):
        account = re.split(r"[,(]", cells[0])[0].strip().removesuffix(" hook")
        listed_by.setdefault(account, set()).update(_permissions(cells[1]))
    assert set(listed_by) >= {"operator", "scheduler", "dispatcher"}
    for account, listed in sorted(listed_by.items()):
        granted = _granted(account)
        if listed != granted:
            problems.append(
                f"docs/operations.md: the {account} may {sorted(listed)}; "
                f"the chart grants {name(account)} {sorted(granted)}"
            )
    # docs/kubernetes.md says what the operator needs by the flags it runs with: the
    # rows that apply to the chart's flags are what the chart grants.
    rows = document(ROOT / "docs" / "kubernetes.md").rows("API group", "resource", "verbs")
    assert rows, "docs/kubernetes.md: the operator's permissions table is gone"
    deployment = renders()["minimal"].one("Deployment", name("operator"))
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    flags = {arg.split("=")[0] for arg in container["args"]}
    listed: set[tuple[str, str]] = set()
    for _, cells in rows:
        unless = re.findall(r"unless `(--[a-z-]+)`", cells[3])
        with_ = re.findall(r"with `(--[a-z-]+)`", cells[3])
        if not any(flag in flags for flag in unless) and all(flag in flags for flag in with_):
            listed |= _permissions(f"{cells[2]} {cells[1]}")
    granted = _granted("operator")
    if listed != granted:
        problems.append(
            f"docs/kubernetes.md: with the chart's flags the operator needs {sorted(listed)}; "
            f"the chart grants {sorted(granted)}"
        )
    assert not problems, _report(problems)


# ---------------------------------------------------------------------------------------
# What else the docs name: manifests and tokens files, API paths, log actions, metrics,
# the modules of the architecture map.


def test_scheduledjob_manifests_and_tokens_files_shown_are_valid() -> None:
    problems: list[str] = []
    seen = 0
    for block in _checked(("yaml", "yml")):
        try:
            loaded = list(yaml.safe_load_all(block.text))
        except yaml.YAMLError as error:
            problems.append(f"{block.where(0)}: not YAML: {error}")
            continue
        for item in loaded:
            if isinstance(item, dict) and item.get("kind") == "ScheduledJob":
                seen += 1
                try:
                    manifests.parse_document(item, block.where(0))
                except manifests.ManifestError as error:
                    problems.append(str(error))
            elif isinstance(item, list) and all(isinstance(e, dict) and "token" in e for e in item):
                seen += 1
                try:
                    StaticTokens([TokenEntry.model_validate(entry) for entry in item])
                except ValueError as error:
                    problems.append(f"{block.where(0)}: a tokens file: {error}")
    assert seen >= 3
    assert not problems, _report(problems)


@functools.cache
def routes() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """(method, path pattern) of every route the API and the dashboard serve."""
    from tickwork.api import (
        audit_routes,
        jobs_routes,
        notifications_routes,
        operations_routes,
        ops_routes,
        queues_routes,
        worker_routes,
    )
    from tickwork.api.ui import actions, bulk, pages
    from tickwork.api.ui import routes as ui_routes

    found = []
    for router in (
        ops_routes.router,
        worker_routes.router,
        jobs_routes.router,
        audit_routes.router,
        operations_routes.router,
        queues_routes.router,
        notifications_routes.router,
        pages.router,
        actions.router,
        bulk.router,
        ui_routes._edges,
    ):
        for route in router.routes:
            path = getattr(route, "path", "")
            if ":path}" in path:  # the dashboard's catch-all answers every other path
                continue
            pattern = re.compile(
                "".join(
                    r"[^/:]+" if part.startswith("{") else re.escape(part)
                    for part in re.split(r"(\{[^}]+\})", path)
                )
            )
            found += [(method, pattern) for method in getattr(route, "methods", ())]
    return tuple(found)


def _served(method: str | None, path: str) -> bool:
    path = path.split("?")[0]
    return any(
        method in (None, found)
        and (pattern.fullmatch(path) or pattern.pattern.startswith(re.escape(path) + "/"))
        for found, pattern in routes()
    )


def route_problems(path: Path) -> list[str]:
    """`METHOD /path` and `/v1/…`, `/ui/…` in inline code, and the rows of a table
    with Method and Path columns (`:resume` after `/v1/jobs/{name}:pause` included)."""
    named: list[tuple[str, str | None, str]] = []
    for span in document(path).spans():
        words = span.text.split()
        if len(words) == 2 and words[0] in ("GET", "POST", "PUT", "DELETE", "PATCH"):
            if words[1].startswith("/"):
                named.append((span.where(), words[0], words[1]))
        elif len(words) == 1 and re.match(r"^/(v1|ui)\b", words[0]):
            named.append((span.where(), None, words[0]))
    for number, cells in document(path).rows("Method", "Path"):
        base = ""
        for given in re.findall(r"`([^`]+)`", cells[1]):
            base = base.rsplit(":", 1)[0] + given if given.startswith(":") else given
            named.append((f"{_shown(path)}:{number}", cells[0], base))
    return [
        f"{where}: the API serves no {method or 'call of'} {given}"
        for where, method, given in named
        if not _served(method, given)
    ]


def test_the_api_paths_the_docs_name_are_served() -> None:
    problems = [problem for path in DOCS for problem in route_problems(path)]
    assert _served("GET", "/ui/audit") and not _served("GET", "/v1/jobz")
    assert not _served("GET", "/v1/jobs/x:resume") and _served("POST", "/v1/jobs/x:resume")
    assert not problems, _report(problems)


def _leaves(cls: type[TickworkError]) -> Iterator[type[TickworkError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _leaves(sub)


def test_the_problems_table_lists_every_problem_the_api_answers() -> None:
    """docs/http-api.md's Problems table: a slug and status for every problem type of
    the contract (one error class per slug), and no other."""
    importlib.import_module("tickwork.api.app")  # every error class the API may answer
    # Never an HTTP answer: a role refuses to start on a shard of another schema (and
    # /readyz says so in its body); an unexpected error is a 500 without a slug to match.
    not_answered = {TickworkError.slug, SchemaMismatch.slug}
    code = {cls.slug: cls.status for cls in _leaves(TickworkError)}
    rows = document(ROOT / "docs" / "http-api.md").rows("status", "slug", "when")
    listed = {cell.strip("`"): int(status) for _, (status, cell, *_) in rows}
    problems = [
        f"docs/http-api.md: {slug} is answered with {code[slug]}, not {status}"
        if slug in code
        else f"docs/http-api.md: the API answers no problem {slug}"
        for slug, status in listed.items()
        if code.get(slug) != status
    ]
    problems += [
        f"docs/http-api.md: the Problems table lacks {status} {slug}"
        for slug, status in code.items()
        if slug not in listed and slug not in not_answered
    ]
    assert not problems, _report(problems)


@functools.cache
def log_actions() -> tuple[re.Pattern[str], ...]:
    """The ``action`` of every log record the code writes (an f-string's fields match
    any name)."""
    found = set()
    for source in (ROOT / "src" / "tickwork").rglob("*.py"):
        found.update(re.findall(r"\"action\": f?\"([^\"]+)\"", source.read_text("utf-8")))
    return tuple(
        re.compile(
            "".join(
                "[a-z-]+" if part.startswith("{") else re.escape(part)
                for part in re.split(r"(\{[^}]*\})", action)
            )
        )
        for action in found
    )


def test_the_log_actions_the_docs_name_are_logged() -> None:
    """`[scheduler-error]` in the docs is what an operator greps the logs for."""
    problems = [
        f"{span.where()}: no log record has the action {span.text}"
        for path in DOCS
        for span in document(path).spans()
        # `[tickwork]` is a list of values; an action has a hyphen: `[claim-skipped]`.
        if re.fullmatch(r"\[[a-z]+(?:-[a-z]+)+\]", span.text)
        and not any(action.fullmatch(span.text[1:-1]) for action in log_actions())
    ]
    assert len(log_actions()) >= 50
    assert not problems, _report(problems)


@functools.cache
def metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """Every series name the roles export: name -> (type, label names)."""
    from prometheus_client.metrics import MetricWrapperBase

    from tickwork.engine.metrics import Metrics
    from tickwork.jobrunner.metrics import RunnerMetrics
    from tickwork.operator.leadership import OperatorMetrics

    found: dict[str, tuple[str, frozenset[str]]] = {}
    for owner in (Metrics(), OperatorMetrics(), RunnerMetrics()):
        for metric in vars(owner).values():
            if not isinstance(metric, MetricWrapperBase):
                continue
            kind, base = metric._type, metric._name
            names = {base + "_total"} if kind == "counter" else {base}
            if kind == "histogram":
                names |= {base + suffix for suffix in ("_bucket", "_sum", "_count")}
            found.update(dict.fromkeys(names, (kind, frozenset(metric._labelnames))))
    return found


def test_the_metrics_the_docs_name_are_exported_with_their_labels() -> None:
    """A panel or an alert written from the docs finds its series: each `tickwork_…`
    name is exported (or is a label of one, or the LISTEN channel), and a metrics
    table's type and labels are the code's."""
    exported = metrics()
    labels = {label for _, names in exported.values() for label in names}
    sql = "".join(p.read_text("utf-8") for p in (ROOT / "src").rglob("*.sql"))
    known = exported.keys() | labels | set(re.findall(r"pg_notify\('(\w+)'", sql))
    problems: list[str] = []
    for path in DOCS:
        for span in document(path).spans():
            named = re.fullmatch(r"(tickwork_[a-z_]*[a-z])(?:\{[^}]*\}|=.*)?", span.text)
            if named and named.group(1) not in known:
                problems.append(f"{span.where()}: no series {named.group(1)} is exported")
        for number, cells in document(path).rows("metric", "type", "labels"):
            [metric] = re.findall(r"`([^`]+)`", cells[0])
            if metric not in exported:
                continue  # reported above
            kind, names = exported[metric]
            # Label values are given in parentheses: `step` (`materialised`, …).
            listed = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cells[2])))
            if cells[1] != kind or listed != names:
                problems.append(
                    f"{_shown(path)}:{number}: {metric} is a {kind} labelled "
                    f"{sorted(names)}, not a {cells[1]} labelled {sorted(listed)}"
                )
    assert not problems, _report(problems)


_LAYERS = ("core", "store", "engine", "coordination", "api", "operator", "worker", "cli")


def _resolves(dotted: str) -> bool:
    """``engine.jobs.Jobs.enqueue``: a module of the package and attributes of it."""
    parts = ["tickwork", *dotted.removeprefix("tickwork.").split(".")]
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_the_modules_and_functions_the_architecture_names_exist() -> None:
    """docs/architecture.md is a map of the code: its layer table's modules and every
    `layer.module.name` it mentions exist."""
    path = ROOT / "docs" / "architecture.md"
    problems: list[str] = []
    checked = 0
    for number, cells in document(path).rows("layer", "holds"):
        [layer] = re.findall(r"`([a-z]+)/`", cells[0])
        for module in re.findall(r"`([a-z_]+)`", cells[1]):
            checked += 1
            if not _resolves(f"{layer}.{module}"):
                problems.append(f"docs/architecture.md:{number}: no module {layer}.{module}")
    pattern = re.compile(r"(?:tickwork\.)?(?:" + "|".join(_LAYERS) + r")\.[A-Za-z_][\w.]*")
    for span in document(path).spans():
        if pattern.fullmatch(span.text):
            checked += 1
            if not _resolves(span.text):
                problems.append(f"{span.where()}: no {span.text} in the code")
    assert checked >= 50
    assert not problems, _report(problems)
