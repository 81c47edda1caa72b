"""HTTP paths of the webhook (docs/contract.md section 3). The chart's webhook configurations must use these."""

from typing import Final

VALIDATE_GPUCLASSES: Final = "/validate/gpuclasses"
MUTATE_VMIS: Final = "/mutate/virtualmachineinstances"
VALIDATE_VMIS: Final = "/validate/virtualmachineinstances"
VALIDATE_VMS: Final = "/validate/virtualmachines"
MUTATE_PODS: Final = "/mutate/pods"
VALIDATE_PODS: Final = "/validate/pods"
HEALTHZ: Final = "/healthz"
READYZ: Final = "/readyz"
METRICS: Final = "/metrics"
