"""The installed version of gpuclass, for `--version`, the User-Agent and `gpuclass_build_info`."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "gpuclass"


def package_version() -> str:
    """The version pip installed, or "unknown" when run from a source tree never installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def version_line(prog: str) -> str:
    """What `<prog> --version` prints: `gpuclass-webhook 0.1.0`."""
    return f"{prog} {package_version()}"
