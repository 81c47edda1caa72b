"""Baseline for bench_webhook.py: a bare ASGI app that reads the body and answers `allowed: true`.

It does the least any admission webhook must do (read the request, echo the uid,
write JSON) so the ratio shows what gpuclass's decision costs on top of that.
"""

from __future__ import annotations

from typing import Any

import orjson


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    review = orjson.loads(body)
    answer = orjson.dumps(
        {
            "apiVersion": review["apiVersion"],
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True},
        }
    )
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": answer})
