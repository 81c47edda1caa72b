"""HTTP paths of the webhook (docs/contract.md section 3), named from the one table of endpoints
(:data:`shared.core.admission.review.ENDPOINTS`). The chart's webhook configurations must use these."""

from typing import Final

from gpuclass.shared.core.admission.review import ENDPOINTS
from gpuclass.shared.process import http

_BY_WEBHOOK: Final = {endpoint.webhook: path for path, endpoint in ENDPOINTS.items()}

VALIDATE_GPUCLASSES: Final = _BY_WEBHOOK["gpuclasses"]
MUTATE_VMIS: Final = _BY_WEBHOOK["virtualmachineinstances"]
VALIDATE_VMIS: Final = _BY_WEBHOOK["final-virtualmachineinstances"]
VALIDATE_VMS: Final = _BY_WEBHOOK["virtualmachines"]
MUTATE_PODS: Final = _BY_WEBHOOK["pods"]
VALIDATE_PODS: Final = _BY_WEBHOOK["vgpu-pods"]
HEALTHZ: Final = http.HEALTHZ  # the probe paths are both binaries' (shared/process/http.py)
READYZ: Final = http.READYZ
METRICS: Final = http.METRICS
