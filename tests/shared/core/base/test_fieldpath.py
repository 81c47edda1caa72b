"""FieldPath renders as apimachinery's field.Path does, and re-roots on its parts.

Expected strings follow k8s.io/apimachinery/pkg/util/validation/field/path.go's String():
children joined by dots, list indexes and map keys in brackets.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuclass.shared.core.base.causes import invalid
from gpuclass.shared.core.base.fieldpath import FieldPath

ANNOTATION = FieldPath.of("metadata", "annotations").key("gpu.cozystack.io/classes")


@pytest.mark.parametrize(
    ("path", "rendered"),
    [
        (FieldPath(), ""),
        (FieldPath.of("spec"), "spec"),
        (FieldPath.of("spec", "tolerations").index(0).child("key"), "spec.tolerations[0].key"),
        (ANNOTATION.index(2).child("count"), "metadata.annotations[gpu.cozystack.io/classes][2].count"),
        (FieldPath.of("spec", "domain", "resources", "limits").key("nvidia.com/GA100"),
         "spec.domain.resources.limits[nvidia.com/GA100]"),
    ],
)  # fmt: skip
def test_rendering_is_the_api_servers(path: FieldPath, rendered: str) -> None:
    assert str(path) == rendered
    assert FieldPath.parse(rendered) == path


def test_a_selection_entry_is_renamed_on_its_parts_not_its_text() -> None:
    entry = ANNOTATION.index(1).child("className")
    assert str(entry.rebase(ANNOTATION, FieldPath.of("gpus"))) == "gpus[1].className"
    other = FieldPath.of("metadata", "annotations").key("gpu.cozystack.io/classes-extra")
    assert other.rebase(ANNOTATION, FieldPath.of("gpus")) == other, "a longer key is not under it"


def test_causes_keep_the_path_and_render_the_field() -> None:
    cause = invalid(FieldPath.of("spec").child("memory"), "too big")
    assert cause.field == "spec.memory" and cause.render() == "spec.memory: too big"
    assert invalid(FieldPath(), "not an object").render() == "not an object"


names = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd")), min_size=1).filter(
    lambda s: not s.isdigit()
)
steps = st.one_of(
    names.map(lambda n: ("child", n)),
    st.integers(0, 1000).map(lambda i: ("index", i)),
    names.map(lambda k: ("key", k)),
)


@given(st.lists(steps, max_size=6))
def test_parse_inverts_rendering(raw: list[tuple[str, object]]) -> None:
    path = FieldPath()
    for kind, value in raw:
        path = (
            path.child(str(value))
            if kind == "child"
            else path.index(int(str(value)))
            if kind == "index"
            else path.key(str(value))
        )
    if path.steps and path.steps[0][0] != "child":
        return  # a path starts with a field, as every object path does
    assert FieldPath.parse(str(path)) == path
