from tests.test_fuzz import *  # noqa
from hypothesis import find

def test_probe(webhook):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {}, "annotations": {SIGS_GROUP: "g", SIGS_MIN: "05"}},
           "spec": {"containers": [{"name": "c"}]}}
    print(passes_pod_rules(pod), post(webhook, "/validate", envelope(request_for(pod))))
    response, after = mutate(webhook, pod)
    print(after)
    print(post(webhook, "/validate", envelope(request_for(after))))
    n = 0
    for _ in range(300):
        p = gang_pods.example()
        ann = p["metadata"]["annotations"]
        if ann.get(SIGS_MIN) == "05" and SIGS_GROUP in ann: n += 1
    print("hits", n)
