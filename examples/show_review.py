"""Pretty-print an AdmissionReview response from stdin, with its JSON patch decoded."""

import base64
import json
import sys

response = json.load(sys.stdin)["response"]
if response["allowed"]:
    print("allowed")
else:
    status = response["status"]
    print(f"refused ({status['code']}): {status['message']}")
for warning in response.get("warnings", []):
    print(f"warning: {warning}")
if "patch" in response:
    for op in json.loads(base64.b64decode(response["patch"])):
        print(f"  {op['op']} {op['path']} {json.dumps(op.get('value'))}")
