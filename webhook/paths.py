"""HTTP paths of the webhook (docs/contract.md section 3). The chart's webhook configurations must use these."""

from typing import Final

from gpuclass.shared.process import http

VALIDATE_GPUCLASSES: Final = "/validate/gpuclasses"
MUTATE_VMIS: Final = "/mutate/virtualmachineinstances"
VALIDATE_VMIS: Final = "/validate/virtualmachineinstances"
VALIDATE_VMS: Final = "/validate/virtualmachines"
MUTATE_PODS: Final = "/mutate/pods"
VALIDATE_PODS: Final = "/validate/pods"
HEALTHZ: Final = http.HEALTHZ  # the probe paths are both binaries' (shared/process/http.py)
READYZ: Final = http.READYZ
METRICS: Final = http.METRICS
