"""Just enough of a Dockerfile to replay its install steps outside Docker: build arguments
with their defaults, where COPY puts things, the ENV it sets, and the ``pip`` commands of
its RUN steps."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass
class Dockerfile:
    args: dict[str, str] = field(default_factory=dict)
    base: str = ""
    copies: dict[str, str] = field(default_factory=dict)  # destination -> source
    env: dict[str, str] = field(default_factory=dict)
    pip_commands: list[list[str]] = field(default_factory=list)

    def expand(self, text: str) -> str:
        """``text`` with ``${NAME}`` replaced by the build argument's default or the ENV."""
        def value(match: re.Match) -> str:
            name = match.group(1) or match.group(2)
            return {**self.args, **self.env}.get(name, match.group(0))

        return _VARIABLE.sub(value, text)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) per instruction, continuation lines joined, comments out."""
    joined, current = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") and not current:
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            keyword, _, rest = current.strip().partition(" ")
            joined.append((keyword.upper(), rest.strip()))
        current = ""
    return joined


def parse(path: Path) -> Dockerfile:
    parsed = Dockerfile()
    for keyword, rest in _instructions(path.read_text(encoding="utf-8")):
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            if default:
                parsed.args.setdefault(name, default)
        elif keyword == "FROM":
            parsed.base = parsed.expand(rest)
        elif keyword == "COPY":
            source, destination = shlex.split(rest)
            parsed.copies[destination] = source
        elif keyword == "ENV":
            name, _, value = rest.partition("=")
            parsed.env[name] = parsed.expand(value)
        elif keyword == "RUN":
            for command in rest.split("&&"):
                words = shlex.split(parsed.expand(command))
                if words and words[0] == "pip":
                    parsed.pip_commands.append(words[1:])
    return parsed


def localized(words: list[str], copies: dict[str, str], here: dict[str, Path]) -> list[str]:
    """``words`` with each path under a COPY destination turned into the local path of its
    source (``here`` maps sources, as written in COPY, to local folders)."""
    result = []
    for word in words:
        for destination, source in copies.items():
            if word.startswith(destination):
                word = str(here[source]) + "/" + word[len(destination):].lstrip("/")
                break
        result.append(word)
    return result
