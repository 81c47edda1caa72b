"""The options the `gpuclass` commands share with the servers, and the `GPUCLASS_*` variables
they read (a flag wins over its variable): one place for every command module.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from pydantic import TypeAdapter, ValidationError

from gpuclass.shared.core.admission.envelope import MalformedReview
from gpuclass.shared.core.base import names

ENV_PREFIX = "GPUCLASS_"


def env_help(said: str, option: str) -> str:
    """`said`, and the variable the option also reads (shown in `--help`)."""
    return f"{said} [env: {ENV_PREFIX}{option.upper().replace('-', '_')}]"


def env_bool(environ: Mapping[str, str], name: str) -> bool:
    """A boolean variable read as the servers' settings read it (true/false, 1/0, yes/no, on/off).

    Read when the command that uses it runs, so a bad value fails that command only, as a
    usage error (MalformedReview: exit 2), not every subcommand.
    """
    value = environ.get(ENV_PREFIX + name)
    if value is None:
        return False
    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        raise MalformedReview(f"{ENV_PREFIX}{name}={value[:40]!r} is not a boolean") from None


def objects_arg(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """--objects (and its variable), --license-namespace and --kubevirt-namespace: the options
    every command that reads the cluster as files shares with the servers."""
    objects = [part for part in environ.get(f"{ENV_PREFIX}OBJECTS", "").split(",") if part]
    parser.add_argument(
        "--objects",
        action="append",
        metavar="PATH",
        help=env_help(
            "YAML/JSON file or folder of Kubernetes objects (the cluster as it would be); "
            "repeatable (comma-separated in the variable; flags replace it)",
            "objects",
        ),
    )
    parser.set_defaults(objects_from_env=objects)
    parser.add_argument(
        "--license-namespace",
        dest="license_namespace",
        metavar="NAMESPACE",
        default=environ.get(f"{ENV_PREFIX}LICENSE_NAMESPACE", names.DEFAULT_LICENSE_NAMESPACE),
        help=env_help(
            "namespace of license source Secrets (default %(default)s)", "license-namespace"
        ),
    )
    parser.add_argument(
        "--kubevirt-namespace",
        metavar="NAMESPACE",
        default=environ.get(f"{ENV_PREFIX}KUBEVIRT_NAMESPACE", names.DEFAULT_KUBEVIRT_NAMESPACE),
        help=env_help(
            "namespace of the KubeVirt CR; CRs elsewhere are ignored, as in a cluster "
            "(default %(default)s)",
            "kubevirt-namespace",
        ),
    )


EPILOG = (
    "Options marked [env: ...] also read that environment variable; a flag wins over it. "
    f"{ENV_PREFIX}LICENCE_NAMESPACE is the deprecated spelling of {ENV_PREFIX}LICENSE_NAMESPACE."
)


def objects(args: argparse.Namespace) -> list[str]:
    """`--objects` flags, else the variable's list: flags replace the variable, not add to it."""
    return list(args.objects) if args.objects else list(args.objects_from_env)
