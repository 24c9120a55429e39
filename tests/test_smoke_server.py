from tests.conftest import pod_request


def test_plain_pod_passes_unchanged(webhook, namespace):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    response, after = webhook.admit(pod, namespace)
    assert "patch" not in response and after == pod


def test_bad_body_is_400(webhook):
    status, body = webhook.request("POST", "/mutate", b"{not json")
    assert status == 400 and b"not JSON" in body
    response = webhook.review("/validate", pod_request({"metadata": {}}, "x", operation="DELETE"))
    assert response["allowed"] is True
