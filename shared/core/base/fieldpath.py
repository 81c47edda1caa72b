"""A field's path as a value, rendered as the API server renders it (apimachinery's `field.Path`).

`FieldPath.of("spec", "tolerations").index(0).child("key")` renders `spec.tolerations[0].key`;
a map key renders in brackets (`metadata.annotations[gpu.cozystack.io/classes]`). Causes
carry a path, and code that re-roots a path (a VMI's field named as the VM's template field)
does it on the parts, never by editing the rendered string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Step = tuple[Literal["child", "index", "key"], str | int]
_TOKEN = re.compile(r"\.?([^.\[\]]+)|\[([^\]]*)\]")


@dataclass(frozen=True, slots=True)
class FieldPath:
    """The steps from the object's root to one field: children, list indexes and map keys."""

    steps: tuple[Step, ...] = ()
    _text: str | None = field(default=None, compare=False, repr=False)
    """The rendered path, computed on first use: a cause renders it for its message and again
    for `details.causes[].field`."""

    @classmethod
    def of(cls, *names: str) -> FieldPath:
        """A path of child fields from the root: `FieldPath.of("spec", "memory")`."""
        return cls(tuple(("child", name) for name in names))

    @classmethod
    def parse(cls, text: str) -> FieldPath:
        """The path a rendered string names (`a.b[0][k]`); the inverse of `str()`.

        A bracket holding digits is a list index, anything else a map key (which may
        contain dots, as annotation names do).
        """
        steps: list[Step] = []
        for match in _TOKEN.finditer(text):
            name, bracket = match.group(1), match.group(2)
            if name is not None:
                steps.append(("child", name))
            elif bracket.isdigit():
                steps.append(("index", int(bracket)))
            else:
                steps.append(("key", bracket))
        return cls(tuple(steps))

    def child(self, *names: str) -> FieldPath:
        """The path of a field below this one."""
        return FieldPath(self.steps + tuple(("child", name) for name in names))

    def index(self, i: int) -> FieldPath:
        """The path of the list item `i` of this field."""
        return FieldPath((*self.steps, ("index", i)))

    def key(self, k: str) -> FieldPath:
        """The path of the map entry `k` of this field."""
        return FieldPath((*self.steps, ("key", k)))

    def under(self, prefix: FieldPath) -> bool:
        """Whether this path is `prefix` or below it."""
        return self.steps[: len(prefix.steps)] == prefix.steps

    def rebase(self, prefix: FieldPath, new: FieldPath) -> FieldPath:
        """This path with `prefix` replaced by `new` (unchanged when not under `prefix`)."""
        if not self.under(prefix):
            return self
        return FieldPath(new.steps + self.steps[len(prefix.steps) :])

    def __str__(self) -> str:
        text = self._text
        if text is None:
            text = ""
            for kind, value in self.steps:
                if kind == "child":
                    text += f".{value}" if text else str(value)
                else:
                    text += f"[{value}]"
            object.__setattr__(self, "_text", text)  # frozen: a cache, not a change of value
        return text

    def __bool__(self) -> bool:
        return bool(self.steps)
