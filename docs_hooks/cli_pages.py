"""One Markdown page per `embedkit` verb, written from the Typer app itself at build time so it cannot drift.

Each page holds what `embedkit VERB --help` prints: the usage line, the help text and every visible option and
argument with its type, default and help, read from the click command objects Typer builds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CODE = re.compile(r"\[bold\](.*?)\[/bold\]|``(.*?)``", re.DOTALL)  # rich's bold commands, reST literals
DEFAULT = re.compile(r"\s*\[default: (.*?)\]\s*$")
REQUIRED = re.compile(r"\s*\[required\]\s*$")


@dataclass(frozen=True)
class Verb:
    """A command and the words that name it (`("index", "add")` for `embedkit index add`)."""

    words: tuple[str, ...]
    command: object
    context: object

    @property
    def name(self) -> str:
        return " ".join(("embedkit", *self.words))

    @property
    def page(self) -> str:
        return "reference/cli/" + "-".join(("embedkit", *self.words)) + ".md"


def root_command():
    """The click command Typer builds for `embedkit`, with every verb registered."""
    import typer.main

    from embedkit.cli import _register, app

    _register()
    return typer.main.get_command(app)


def verbs() -> list[Verb]:
    """Every visible verb and sub-verb, in the order `embedkit --help` lists them."""
    root = root_command()
    context_type = type(root.make_context("embedkit", [], resilient_parsing=True))
    found: list[Verb] = []

    def walk(group, parent, words):
        for name, command in group.commands.items():
            if command.hidden:
                continue
            context = context_type(command, info_name=name, parent=parent)
            found.append(Verb((*words, name), command, context))
            if getattr(command, "commands", None):
                walk(command, context, (*words, name))

    walk(root, context_type(root, info_name="embedkit"), ())
    return found


def visible_params(verb: Verb) -> list:
    """The parameters `--help` lists: every non-hidden one, and the help option."""
    params = [param for param in verb.command.params if not param.hidden]
    help_option = verb.command.get_help_option(verb.context)
    return [*params, help_option] if help_option is not None else params


def flags(verb: Verb) -> set[str]:
    """Every option name `--help` shows for this verb (`--factory`, `-e`, `--no-normalize`, ...)."""
    names: set[str] = set()
    for param in visible_params(verb):
        if type(param).__name__.endswith("Argument"):
            continue
        names |= set(param.opts) | set(param.secondary_opts)
    return names


def _escape(text: str) -> str:
    return text.replace("\\[", "[").replace("<", "&lt;").replace("*", "\\*").replace("|", "\\|")


def _markdown(text: str) -> str:
    """Rich markup to Markdown: `[bold]a command[/bold]` and ``literals`` become code spans, the rest is escaped."""
    out, end = [], 0
    for match in CODE.finditer(text or ""):
        out += [_escape(text[end : match.start()]), f"`{match.group(1) or match.group(2)}`"]
        end = match.end()
    return "".join([*out, _escape((text or "")[end:])])


def _row(param, verb: Verb) -> str:
    record = param.get_help_record(verb.context)
    help_text = record[1] if record else (param.help or "")
    default = ""
    if match := DEFAULT.search(help_text):
        default, help_text = f"`{match.group(1)}`", help_text[: match.start()]
    if match := REQUIRED.search(help_text):
        default, help_text = "required", help_text[: match.start()]
    names = [*param.opts, *param.secondary_opts]
    if type(param).__name__.endswith("Argument"):
        names = [param.name.upper()]
    kind = param.display_type(verb.context) if hasattr(param, "display_type") else ""
    kind = kind.strip("<>") if kind else ("flag" if getattr(param, "is_flag", False) else "")
    cells = [", ".join(f"`{name}`" for name in names), f"`{kind}`" if kind else "", default, _markdown(help_text)]
    return "| " + " | ".join(cell.replace("\n", " ") for cell in cells) + " |"


def page(verb: Verb, children: list[Verb]) -> str:
    """The Markdown of one verb's page."""
    command = verb.command
    usage = command.get_usage(verb.context)
    lines = [f"# `{verb.name}`", "", "*Generated from the Typer app at build time.*", ""]
    lines += [_markdown(command.help or ""), "", "## Usage", "", "```text", usage, "```", ""]
    params = visible_params(verb)
    arguments = [p for p in params if type(p).__name__.endswith("Argument")]
    options = [p for p in params if p not in arguments]
    header = ["| name | type | default | help |", "| --- | --- | --- | --- |"]
    if arguments:
        lines += ["## Arguments", "", *header, *(_row(p, verb) for p in arguments), ""]
    lines += ["## Options", "", *header, *(_row(p, verb) for p in options), ""]
    if children:
        lines += ["## Sub-commands", ""]
        lines += [f"- [`{child.name}`]({child.page.rsplit('/', 1)[1]})" for child in children]
        lines.append("")
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """Every CLI page by its path under docs/, and the index page listing them."""
    found = verbs()
    out: dict[str, str] = {}
    index = ["# Command line", "", "Every page here is generated from `embedkit`'s Typer app at build time.", ""]
    index += ["| command | what it does |", "| --- | --- |"]
    for verb in found:
        children = [v for v in found if v.words[:-1] == verb.words]
        out[verb.page] = page(verb, children)
        summary = _markdown((verb.command.help or "").split("\n\n")[0]).replace("\n", " ")
        index.append(f"| [`{verb.name}`]({verb.page.rsplit('/', 1)[1]}) | {summary} |")
    out["reference/cli/index.md"] = "\n".join(index) + "\n"
    return out


def nav() -> list:
    """The CLI section of the navigation."""
    return ["reference/cli/index.md", *({verb.name: verb.page} for verb in verbs())]
