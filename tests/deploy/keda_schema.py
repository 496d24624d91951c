"""JSON schemas for the two KEDA custom resources the manifests use, ScaledObject and
TriggerAuthentication (keda.sh/v1alpha1), for which kubernetes-validate ships none.

Written by hand, no download at test time: a subset of the openAPIV3Schema in KEDA's published
CRDs (kedacore/keda config/crd/bases/keda.sh_scaledobjects.yaml and
keda.sh_triggerauthentications.yaml, KEDA 2.12+), with the same field names, types, required
fields and enums. Stricter than the CRD in one way: unknown fields are errors (additionalProperties
false), as `kubectl apply` with strict field validation treats them; the CRD itself would prune
them silently. Fields of the CRD that SPEX does not use are listed by name (so they pass) but
not described further. REDIS_STREAMS_PARAMETERS is the redis-streams scaler's parameter list
from KEDA's documentation (docs/2.12/scalers/redis-streams.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["REDIS_STREAMS_PARAMETERS", "SCALED_OBJECT", "TRIGGER_AUTHENTICATION"]

_INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
_ANY: dict[str, Any] = {}  # a CRD field SPEX does not use: accepted as the CRD describes it, unchecked here


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_METADATA = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1}},
    "required": ["name"],
}

_SCALING_RULES = _object(
    {
        "policies": {
            "type": "array",
            "items": _object(
                {
                    "type": {"enum": ["Pods", "Percent"]},
                    "value": {**_INT32, "minimum": 1},
                    "periodSeconds": {**_INT32, "minimum": 1, "maximum": 1800},
                },
                ("type", "value", "periodSeconds"),
            ),
        },
        "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
        "stabilizationWindowSeconds": {**_INT32, "minimum": 0, "maximum": 3600},
    }
)

SCALED_OBJECT: dict[str, Any] = _object(
    {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _METADATA,
        "spec": _object(
            {
                "scaleTargetRef": _object(
                    {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "envSourceContainerName": {"type": "string"},
                    },
                    ("name",),
                ),
                "pollingInterval": _INT32,
                "cooldownPeriod": _INT32,
                "initialCooldownPeriod": _INT32,
                "idleReplicaCount": _INT32,
                "minReplicaCount": _INT32,
                "maxReplicaCount": _INT32,
                "advanced": _object(
                    {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": _object(
                            {
                                "name": {"type": "string"},
                                "behavior": _object({"scaleUp": _SCALING_RULES, "scaleDown": _SCALING_RULES}),
                            }
                        ),
                        "scalingModifiers": _ANY,
                    }
                ),
                "fallback": _object(
                    {"failureThreshold": _INT32, "replicas": _INT32, "behavior": _ANY},
                    ("failureThreshold", "replicas"),
                ),
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": _object(
                        {
                            "type": {"type": "string", "minLength": 1},
                            "name": {"type": "string"},
                            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": _object(
                                {
                                    "name": {"type": "string", "minLength": 1},
                                    "kind": {
                                        "enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]
                                    },
                                },
                                ("name",),
                            ),
                        },
                        ("type", "metadata"),
                    ),
                },
            },
            ("scaleTargetRef", "triggers"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

TRIGGER_AUTHENTICATION: dict[str, Any] = _object(
    {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "TriggerAuthentication"},
        "metadata": _METADATA,
        "spec": _object(
            {
                "secretTargetRef": {
                    "type": "array",
                    "items": _object(
                        {
                            "parameter": {"type": "string", "minLength": 1},
                            "name": {"type": "string", "minLength": 1},
                            "key": {"type": "string", "minLength": 1},
                        },
                        ("parameter", "name", "key"),
                    ),
                },
                "env": _ANY,
                "configMapTargetRef": _ANY,
                "podIdentity": _ANY,
                "hashiCorpVault": _ANY,
                "azureKeyVault": _ANY,
                "awsSecretManager": _ANY,
                "gcpSecretManager": _ANY,
                "boundServiceAccountToken": _ANY,
            }
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

REDIS_STREAMS_PARAMETERS = frozenset(
    {
        "address",
        "host",
        "port",
        "addressFromEnv",
        "hostFromEnv",
        "portFromEnv",
        "usernameFromEnv",
        "passwordFromEnv",
        "stream",
        "consumerGroup",
        "pendingEntriesCount",
        "streamLength",
        "lagCount",
        "activationLagCount",
        "enableTLS",
        "unsafeSsl",
        "databaseIndex",
    }
)
