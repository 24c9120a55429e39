"""The Flask application: /mutate, /validate, /healthz, /readyz, /metrics.

A malformed body gets HTTP 400 with the reason; a bug in our code admits the object
unchanged with a warning rather than failing the apiserver's call.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from flask import Flask, Response, request

from gang.config import Config
from gang.decide import Action
from gang.objects import Deadline, ObjectSource
from gang.validate import validate, warnings
from webhook import metrics
from webhook.review import BadRequest, admit_pod, parse_review, review_response

log = logging.getLogger("kubenexus.webhook")
MAX_BODY_BYTES = 8 * 1024 * 1024


def create_app(config: Config, source: ObjectSource, ready: Callable[[], tuple[bool, str]]) -> Flask:
    app = Flask("kubenexus-webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    def reply(body: dict, status: int = 200) -> Response:
        return Response(json.dumps(body, separators=(",", ":")), status=status, content_type="application/json")

    def answer(endpoint: str, handle: Callable[[dict], tuple[dict, str]]) -> Response:
        started = time.perf_counter()
        try:
            req = parse_review(request.get_data())
        except BadRequest as exc:
            metrics.REQUESTS.labels(endpoint, "bad_request").inc()
            return reply({"error": str(exc)}, 400)
        try:
            review, result = handle(req)
        except BadRequest as exc:
            metrics.REQUESTS.labels(endpoint, "bad_request").inc()
            return reply({"error": str(exc)}, 400)
        except Exception:  # never fail the apiserver's call because of our bug
            log.exception("admission handler failed", extra={"uid": req["uid"], "endpoint": endpoint})
            review, result = review_response(req["uid"], warnings=[
                "kubenexus: internal error; object admitted unchanged"]), "error"
        metrics.REQUESTS.labels(endpoint, result).inc()
        metrics.LATENCY.labels(endpoint).observe(time.perf_counter() - started)
        return reply(review)

    def mutate(req: dict) -> tuple[dict, str]:
        admission = admit_pod(req, source, config)
        if admission is None:
            return review_response(req["uid"]), "ignored"
        decision = admission.decision
        metrics.DECISIONS.labels(decision.action.value).inc()
        # Every pod with an owner reaches the webhook: only gang decisions and warnings are news.
        level = logging.INFO if decision.action is not Action.SKIP or decision.warnings else logging.DEBUG
        meta = admission.pod.get("metadata") or {}
        extra = {"uid": req["uid"], "namespace": req.get("namespace"), "action": decision.action.value,
                 "pod": meta.get("name") or f"{meta.get('generateName', '')}*",
                 "group": decision.group, "reasons": decision.reasons, "warnings": decision.warnings}
        if admission.denial:
            log.info("pod denied", extra={**extra, "denial": admission.denial})
            return admission.review, "denied"
        log.log(level, "pod admitted", extra=extra)
        return admission.review, "patched" if admission.patch else "allowed"

    def check(req: dict) -> tuple[dict, str]:
        denial = validate(req, config, source, Deadline(config.admission_deadline_seconds))
        if denial is None:
            return review_response(req["uid"], warnings=warnings(req)), "allowed"
        log.info("request denied", extra={"uid": req["uid"], "namespace": req.get("namespace"),
                                          "kind": req["kind"].get("kind"), "denial": denial.message})
        return review_response(req["uid"], allowed=False, message=denial.message, code=int(denial.code)), "denied"

    @app.post("/mutate")
    def mutate_endpoint():
        return answer("mutate", mutate)

    @app.post("/validate")
    def validate_endpoint():
        return answer("validate", check)

    @app.route("/healthz", methods=["GET", "POST"])  # POST: the benchmark's no-op floor
    def healthz():
        return "ok"

    @app.get("/readyz")
    def readyz():
        ok, reason = ready()
        return (reason, 200) if ok else (reason, 503)

    @app.get("/metrics")
    def metrics_endpoint():
        body, content_type = metrics.exposition()
        return Response(body, content_type=content_type)

    return app
