"""The Flask application: /mutate, /validate, /healthz, /readyz, /metrics.

A malformed body gets HTTP 400 with the reason; a bug in our code admits the object
unchanged with a warning rather than failing the apiserver's call.

The admission endpoints are answered in front of Flask (``_Admission``, Flask's ``wsgi_app`` middleware) when
their request carries a Content-Length within ``MAX_BODY_BYTES``, which is every request the apiserver sends:
Flask's request and response objects, context and routing cost about as much as the handler itself. The answer
is the same (status, body, headers); anything else, a chunked body or a refusal by size, goes through Flask.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from flask import Flask, Response, request

from gang.config import Config
from gang.decide import Action
from gang.objects import Deadline, ObjectSource
from gang.validate import queue_warnings, validate, warnings
from kube.queues import WatchedQueues
from webhook import metrics
from webhook.review import BadRequest, admit_pod, parse_review, review_response
from webhook.skips import SkipNotices

log = logging.getLogger("kubenexus.webhook")
MAX_BODY_BYTES = 8 * 1024 * 1024
JSON = "application/json"
_STATUS = {200: "200 OK", 400: "400 BAD REQUEST"}  # werkzeug's status lines


def create_app(config: Config, source: ObjectSource, ready: Callable[[], tuple[bool, str]],
               notices: SkipNotices | None = None, queues: WatchedQueues | None = None,
               namespaces: ObjectSource | None = None) -> Flask:
    """The app answering admission from ``source``; with ``queues`` (and ``namespaces``, whose labels Queues
    select by), roots whose Queue will hold their gang are warned about (gang/validate.py ``queue_warnings``)."""
    app = Flask("kubenexus-webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    def answer(endpoint: str, handle: Callable[[dict], tuple[dict, str]], body: bytes) -> tuple[int, bytes]:
        """The HTTP status and JSON body answering an AdmissionReview."""
        started = time.perf_counter()
        try:
            req = parse_review(body)
        except BadRequest as exc:
            metrics.REQUESTS.labels(endpoint, "bad_request").inc()
            return 400, _json({"error": str(exc)})
        try:
            review, result = handle(req)
        except BadRequest as exc:
            metrics.REQUESTS.labels(endpoint, "bad_request").inc()
            return 400, _json({"error": str(exc)})
        except Exception:  # never fail the apiserver's call because of our bug
            log.exception("admission handler failed", extra={"uid": req["uid"], "endpoint": endpoint})
            review, result = review_response(req["uid"], warnings=[
                "kubenexus: internal error; object admitted unchanged"]), "error"
        metrics.REQUESTS.labels(endpoint, result).inc()
        metrics.LATENCY.labels(endpoint).observe(time.perf_counter() - started)
        return 200, _json(review)

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
        if notices is not None and decision.skipped_root is not None and not req.get("dryRun"):
            notices.tell(decision.skipped_root, decision.reasons[-1])
        return admission.review, "patched" if admission.patch else "allowed"

    def check(req: dict) -> tuple[dict, str]:
        deadline = Deadline(config.admission_deadline_seconds)
        denial = validate(req, config, source, deadline)
        if denial is None:
            found = warnings(req)
            if queues is not None:
                found += queue_warnings(req, queues, namespaces or source, deadline)
            return review_response(req["uid"], warnings=found), "allowed"
        log.info("request denied", extra={"uid": req["uid"], "namespace": req.get("namespace"),
                                          "kind": req["kind"].get("kind"), "denial": denial.message})
        return review_response(req["uid"], allowed=False, message=denial.message, code=int(denial.code)), "denied"

    endpoints: dict[str, Callable[[bytes], tuple[int, bytes]]] = {
        "/mutate": partial(answer, "mutate", mutate), "/validate": partial(answer, "validate", check)}

    def through_flask(path: str) -> Response:  # what _Admission leaves to Flask
        status, body = endpoints[path](request.get_data())
        return Response(body, status=status, content_type=JSON)

    @app.post("/mutate")
    def mutate_endpoint():
        return through_flask("/mutate")

    @app.post("/validate")
    def validate_endpoint():
        return through_flask("/validate")

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

    app.wsgi_app = _Admission(app.wsgi_app, endpoints)  # type: ignore[method-assign]
    return app


def _json(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


class _Admission:
    """WSGI middleware: a POST to an admission endpoint with a body of known size is answered here, as Flask would
    (status line, Content-Type, Content-Length; gunicorn adds the rest), without Flask's per-request machinery."""

    def __init__(self, flask: Callable[..., Iterable[bytes]],
                 endpoints: dict[str, Callable[[bytes], tuple[int, bytes]]]) -> None:
        self._flask, self._endpoints = flask, endpoints

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        endpoint = self._endpoints.get(environ.get("PATH_INFO", ""))
        length = environ.get("CONTENT_LENGTH", "")
        if (endpoint is None or environ["REQUEST_METHOD"] != "POST" or not length.isdigit()
                or int(length) > MAX_BODY_BYTES):
            return self._flask(environ, start_response)
        status, body = endpoint(environ["wsgi.input"].read(int(length)))
        start_response(_STATUS[status], [("Content-Type", JSON), ("Content-Length", str(len(body)))])
        return [body]
