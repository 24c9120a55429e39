"""The apiserver's built-in validation for the emulator: object metadata, pod create/update, pod binding.

Pure functions over JSON-shaped dicts. Each returns what a real kube-apiserver answers, so the emulator
refuses exactly what a cluster refuses — never more, never less. Wording follows the v1.30 release (where
KEP-3521 pod scheduling readiness and KEP-3838 mutable scheduling directives went GA).

Ported from kubernetes/kubernetes (read the source, not memory):
  staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go, generic.go   ObjectMeta rules (``meta``)
  staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go              names, labels (``names``)
  staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go            error text (``errors``)
  pkg/apis/core/validation/validation.go        ValidatePodCreate (``pod``), container resources
      (``resources``), ValidatePodUpdate, validateOnlyDeletedSchedulingGates, validateNodeSelectorMutation,
      validateNodeAffinityMutation, ... (``pod_update``)
  pkg/registry/core/pod/storage/storage.go      BindingREST.setPodHostAndAnnotations, assignPod (``binding``)
Quantities are ``cluster.quantity``.

The caller does what the apiserver does around validation: answer ``decode.decode_errors`` with 400 BadRequest
before validating; set metadata.namespace from the URL; apply defaults (restartPolicy, dnsPolicy,
terminationMessagePolicy, ...) to both old and new objects; answer any error list with 422 Invalid
(``errors.invalid_message``). Not ported (accepted here, possibly refused by a cluster): volumes, ports, env,
probes, security contexts, pod (anti-)affinity terms, topology spread, pod-level resources, pod-specific
annotations, and the "required" checks on fields that defaulting always fills.
"""
