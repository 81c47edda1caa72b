"""pytest plugin: one real control plane per session (per pytest-xdist worker), started
only when a test needs it.

`control_plane` (session scope) starts etcd + kube-apiserver, registers the
project's GPUClass CRD (charts/gpuclass/templates/crd-gpuclass.yaml, plain YAML)
and the KubeVirt CRDs of tests/controlplane/crds/, waits until they are
Established and served, and stops everything when the session ends.

`kube_scheduler`, `node_lifecycle_controller`, `garbage_collector` and `kwok_kubelet`
(module scope) start those components against it (tests/controlplane/components.py)
for the modules that ask; a missing binary skips, or fails like the plane itself.

The binaries are located (or built, first time only) once collection is over and
only if a selected test uses the fixture, so a long first build is not charged to
one test's timeout. Missing binaries skip those tests, or fail them when
GPUCLASS_REQUIRE_CONTROL_PLANE=1 (CI). Every test using the fixture is marked
`controlplane`, so `-m "not controlplane"` leaves them out.

`kubectl` (session scope) is the path of the kubectl built with the control plane.

`kubevirt_parts` (module scope) runs KubeVirt's own admission webhooks and launcher
renderer (tests/controlplane/kubevirt_parts.py) for KubeVirt installed in `cozy-kubevirt`;
its binary is located (or built) with the others, and skips or fails the same way.

`cozyvalues_gen` (session scope) is the path of Cozystack's values generator, built from its
module (tests/controlplane/cozyvalues-gen/) once collection is over, when a selected test asks;
it needs no control plane, and skips or fails the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import components
from tests.controlplane.api import Api, RawObject
from tests.controlplane.cluster import AssetsUnavailable, ControlPlane, built_binary, find_assets
from tests.controlplane.components import Component, missing_binaries
from tests.controlplane.kubevirt_parts import (
    find_kubevirt_parts,
    install_kubevirt_cr,
    start_kubevirt_parts,
    stop_kubevirt_parts,
)
from tests.controlplane.webhooks import register_webhooks, remove_webhooks

ROOT = Path(__file__).resolve().parents[2]
GPUCLASS_CRD = ROOT / "charts" / "gpuclass" / "templates" / "crd-gpuclass.yaml"
KUBEVIRT_CRDS = tuple(sorted((Path(__file__).resolve().parent / "crds").glob("*.yaml")))
REQUIRE_ENV = "GPUCLASS_REQUIRE_CONTROL_PLANE"
FIXTURE = "control_plane"
KUBEVIRT_FIXTURE = "kubevirt_parts"
COZYVALUES_FIXTURE = "cozyvalues_gen"
COZYVALUES_BUILD = Path(__file__).resolve().parent / "cozyvalues-gen" / "build.sh"
KUBEVIRT_NAMESPACE = "cozy-kubevirt"
KUBEVIRT_CR = "kubevirt-e2e"
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.8.4"

_ASSETS = pytest.StashKey[Path | AssetsUnavailable]()
_KUBEVIRT_PARTS = pytest.StashKey[Path | AssetsUnavailable]()
_COZYVALUES_GEN = pytest.StashKey[Path | AssetsUnavailable]()
_STARTUP = pytest.StashKey[float]()
_WORKER_STARTUPS = pytest.StashKey[list[float]]()


def _uses_control_plane(item: pytest.Item) -> bool:
    return FIXTURE in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_control_plane(item):
            item.add_marker(pytest.mark.controlplane)
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker: the files that wait on a control plane are the long ones, so
        # they are handed out first and the short ones fill in around them (`make test` runs
        # with --dist loadfile --no-loadscope-reorder, so workers take files in this order).
        # Every worker sorts the same way, so their collections stay equal.
        items.sort(key=lambda item: not _uses_control_plane(item))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Find or build the binaries before the first test runs (its timeout would not
    cover a first build), and only when a selected test needs them."""
    config = session.config

    def wanted(fixture: str) -> bool:
        return any(fixture in getattr(item, "fixturenames", ()) for item in session.items)

    plane, generator = any(map(_uses_control_plane, session.items)), wanted(COZYVALUES_FIXTURE)
    if config.option.collectonly or not (plane or generator):
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        if plane:
            config.stash[_ASSETS] = _locate()
        if plane and wanted(KUBEVIRT_FIXTURE):
            config.stash[_KUBEVIRT_PARTS] = _locate_kubevirt_parts()
        if generator:
            config.stash[_COZYVALUES_GEN] = _locate_cozyvalues_gen()


def _located(find: Callable[[], Path]) -> Path | AssetsUnavailable:
    """What `find` found or built, or why it could not (kept, and raised by the fixture)."""
    try:
        return find()
    except AssetsUnavailable as exc:
        return exc


def _locate() -> Path | AssetsUnavailable:
    return _located(find_assets)


def _locate_kubevirt_parts() -> Path | AssetsUnavailable:
    return _located(find_kubevirt_parts)


def _locate_cozyvalues_gen() -> Path | AssetsUnavailable:
    return _located(
        lambda: built_binary("cozyvalues-gen", COZYVALUES_BUILD, "GPUCLASS_COZYVALUES_GEN")
    )


def _unavailable(reason: str) -> None:
    message = f"no control plane: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver with the GPUClass and KubeVirt CRDs Established."""
    config = request.config
    assets = config.stash.get(_ASSETS, None) or _locate()
    if isinstance(assets, AssetsUnavailable):
        _unavailable(str(assets))
        raise AssertionError("unreachable")  # pragma: no cover - skip/fail raise
    started = time.monotonic()
    with ControlPlane(assets) as plane:
        plane.install_crds([GPUCLASS_CRD, *KUBEVIRT_CRDS])
        config.stash[_STARTUP] = time.monotonic() - started
        yield plane


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Path:
    """kubectl built from the same k8s.io/kubernetes module as the API server (build.sh puts
    it beside kube-apiserver); one on PATH only when the assets folder has none."""
    for candidate in (control_plane.assets / "kubectl", shutil.which("kubectl")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    _unavailable(f"no kubectl in {control_plane.assets} or on PATH")
    raise AssertionError("unreachable")  # pragma: no cover - skip/fail raise


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker hands its plane's start-up time to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    startup = session.config.stash.get(_STARTUP, None)
    if workeroutput is not None and startup is not None:
        workeroutput["control_plane_startup"] = startup


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook, on the controller
def pytest_testnodedown(node: Any, error: object) -> None:
    startup = getattr(node, "workeroutput", {}).get("control_plane_startup")
    if startup is not None:
        node.config.stash.setdefault(_WORKER_STARTUPS, []).append(float(startup))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    startup = config.stash.get(_STARTUP, None)
    if startup is not None:
        terminalreporter.write_line(
            f"control plane: etcd + kube-apiserver ready, CRDs established in {startup:.1f}s"
        )
    workers = sorted(config.stash.get(_WORKER_STARTUPS, []))
    if workers:  # under pytest-xdist each worker that needs a plane starts its own
        terminalreporter.write_line(
            f"control planes: {len(workers)} (one per worker that needed one), etcd + "
            f"kube-apiserver ready, CRDs established in {', '.join(f'{t:.1f}s' for t in workers)}"
        )


class WebhookRegistry:
    """Registers webhook configurations and removes them all at teardown."""

    def __init__(self, api: Api) -> None:
        self._api = api
        self._registered: dict[tuple[str, str], RawObject] = {}

    def register(self, configurations: Iterable[Mapping[str, Any]]) -> list[RawObject]:
        items = [dict(c) for c in configurations]
        for item in items:
            self._registered[(item["kind"], item["metadata"]["name"])] = item
        return register_webhooks(self._api, items)

    def remove(self, configurations: Iterable[Mapping[str, Any]] | None = None) -> None:
        """Remove the given configurations, or every one registered so far."""
        items = list(self._registered.values()) if configurations is None else list(configurations)
        remove_webhooks(self._api, items)
        for item in items:
            self._registered.pop((item["kind"], item["metadata"]["name"]), None)


@pytest.fixture
def webhook_registry(control_plane: ControlPlane) -> Iterator[WebhookRegistry]:
    """Register Mutating/ValidatingWebhookConfigurations for one test (see
    tests/controlplane/webhooks.py to build them); all are removed afterwards."""
    registry = WebhookRegistry(control_plane.admin)
    yield registry
    registry.remove()


# -- scheduler, controllers and kwok (tests/controlplane/components.py) --------------------------


def _components(plane: ControlPlane) -> None:
    """Skip (or fail, in CI) a test whose component binaries were not built."""
    missing = missing_binaries(plane.assets)
    if missing:
        _unavailable(
            f"{', '.join(missing)} not in {plane.assets} (tests/controlplane/build.sh builds them)"
        )


@pytest.fixture(scope="module")
def kube_scheduler(control_plane: ControlPlane) -> Iterator[Component]:
    """kube-scheduler against the session's control plane, for one test module."""
    _components(control_plane)
    with components.scheduler(control_plane) as process:
        yield process


@pytest.fixture(scope="module")
def node_lifecycle_controller(control_plane: ControlPlane) -> Iterator[Component]:
    """kube-controller-manager running only the node lifecycle controller (short grace
    periods: a silent Node is NotReady ~10 s later), for one test module."""
    _components(control_plane)
    with components.controller_manager(control_plane) as process:
        yield process


@pytest.fixture(scope="module")
def kwok_kubelet(control_plane: ControlPlane) -> Iterator[Component]:
    """kwok playing the kubelet of every Node labelled `kwok.x-k8s.io/node: fake`."""
    _components(control_plane)
    with components.kwok(control_plane) as process:
        yield process


@pytest.fixture(scope="module")
def garbage_collector(control_plane: ControlPlane) -> Iterator[Component]:
    """kube-controller-manager running only the garbage collector (it deletes objects whose
    owners are gone), with that controller's bootstrap role, for one test module."""
    _components(control_plane)
    with components.controller_manager(
        control_plane,
        controllers=("garbage-collector-controller",),
        roles=("system:controller:generic-garbage-collector",),
    ) as process:
        yield process


@pytest.fixture(scope="session")
def cozyvalues_gen(request: pytest.FixtureRequest) -> Path:
    """Cozystack's values generator (cozyvalues-gen, built from the module
    tests/controlplane/cozyvalues-gen/ pins): values.yaml typedefs in, values.schema.json out."""
    binary = request.config.stash.get(_COZYVALUES_GEN, None) or _locate_cozyvalues_gen()
    if isinstance(binary, AssetsUnavailable):
        _unavailable(str(binary))
        raise AssertionError("unreachable")  # pragma: no cover - skip/fail raise
    return binary


@pytest.fixture(scope="module")
def kubevirt_configuration() -> dict[str, Any]:
    """`spec.configuration` of the KubeVirt CR `kubevirt_parts` installs: KubeVirt's defaults
    unless a test module overrides this fixture."""
    return {}


@pytest.fixture(scope="module")
def kubevirt_parts(
    control_plane: ControlPlane,
    kubevirt_configuration: dict[str, Any],
    request: pytest.FixtureRequest,
) -> Iterator[Component]:
    """KubeVirt's virt-api webhooks (VMIs, VMs, launcher Pods) and virt-controller's launcher
    renderer, for KubeVirt installed in `cozy-kubevirt` and configured by a deployed KubeVirt
    CR named `kubevirt-e2e` (spec from `kubevirt_configuration`), for one test module.

    KubeVirt reads only a CR with `status.phase` set; other modules' KubeVirt CRs have none, so
    KubeVirt's code ignores them (ours reads them all, which is why this one is removed after
    the module, with KubeVirt's webhook configurations)."""
    binary = request.config.stash.get(_KUBEVIRT_PARTS, None) or _locate_kubevirt_parts()
    if isinstance(binary, AssetsUnavailable):
        _unavailable(str(binary))
        raise AssertionError("unreachable")  # pragma: no cover - skip/fail raise
    api = control_plane.admin
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUBEVIRT_NAMESPACE}}
    api.apply([namespace])
    cr = install_kubevirt_cr(api, KUBEVIRT_NAMESPACE, KUBEVIRT_CR, kubevirt_configuration)
    try:
        process = start_kubevirt_parts(
            control_plane, binary, namespace=KUBEVIRT_NAMESPACE, launcher_image=LAUNCHER_IMAGE
        )
        try:
            yield process
        finally:
            stop_kubevirt_parts(control_plane, process)
    finally:
        api.delete(cr)
