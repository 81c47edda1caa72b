"""templates/NOTES.txt: what the install notes tell the person who ran `helm install`."""

from __future__ import annotations

from tests.chart_helpers import render


def test_notes_name_the_uninstall_order() -> None:
    notes = render()["gpuclass/templates/NOTES.txt"]
    assert "pre-delete hook" in notes
    notes = render({"cleanupHook": {"enabled": False}})["gpuclass/templates/NOTES.txt"]
    assert "DISABLED" in notes


def test_notes_say_which_license_sources_the_reconciler_may_read() -> None:
    notes = render()["gpuclass/templates/NOTES.txt"]
    assert "may read no Secret (settings.licenseSecretNames is empty)" in notes
    notes = render({"settings": {"licenseSecretNames": ["vgpu-a", "vgpu-b"]}})[
        "gpuclass/templates/NOTES.txt"
    ]
    assert "may read the Secrets vgpu-a, vgpu-b in\ncozy-system" in notes
