"""The admission endpoints answered in front of Flask (webhook/app.py ``_Admission``) answer exactly as Flask does."""

from __future__ import annotations

import base64
import io
import json

import pytest
from werkzeug.test import EnvironBuilder, run_wsgi_app

from gang.config import Config
from gang.objects import MemorySource
from tests.support.contract import OPT_IN
from tests.support.operator_scenarios import SCENARIOS
from tests.support.webhook import pod_request
from webhook.app import MAX_BODY_BYTES, create_app

pytestmark = pytest.mark.unit

NS = "team-a"


@pytest.fixture(scope="module")
def app_and_pod():
    scenario = SCENARIOS["job"](NS, {OPT_IN: "true"})
    return create_app(Config(), MemorySource(scenario.owners), lambda: (True, "")), scenario.pod


def call(wsgi, path: str, body: bytes, **environ) -> tuple[bytes, str, list]:
    env = EnvironBuilder(path=path, method="POST", data=body, content_type="application/json").get_environ()
    env.update({"wsgi.input": io.BytesIO(body), **environ})
    answer, status, headers = run_wsgi_app(wsgi, env)
    return b"".join(answer), status, list(headers)


def review(request: dict) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
@pytest.mark.parametrize("case", ["gang pod", "not JSON", "not a review", "pod without namespace"])
def test_answers_as_flask_does(app_and_pod, path, case):
    app, pod = app_and_pod
    request = pod_request(pod, NS)
    body = {"gang pod": review(request), "not JSON": b"{x", "not a review": b"[]",
            "pod without namespace": review({**request, "namespace": None,
                                             "object": {**pod, "metadata": {"name": "p"}}})}[case]
    fast, through_flask = call(app.wsgi_app, path, body), call(app.wsgi_app._flask, path, body)
    assert fast == through_flask
    if case == "gang pod" and path == "/mutate":
        assert fast[1] == "200 OK" and json.loads(base64.b64decode(json.loads(fast[0])["response"]["patch"]))
    elif case in ("not JSON", "not a review"):
        assert fast[1].startswith("400")


def test_what_it_does_not_answer_goes_to_flask(app_and_pod):
    app, pod = app_and_pod
    body = review(pod_request(pod, NS))
    assert call(app.wsgi_app, "/mutate", body, CONTENT_LENGTH=str(MAX_BODY_BYTES + 1))[1].startswith("413")
    assert call(app.wsgi_app, "/mutate", b"", REQUEST_METHOD="GET")[1].startswith("405")
    assert call(app.wsgi_app, "/mutate/", body)[1].startswith("404")
    assert call(app.wsgi_app, "/healthz", body)[0] == b"ok"
