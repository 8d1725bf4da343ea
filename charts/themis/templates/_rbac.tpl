{{/* The operator's permissions, shared by the ClusterRole and (operator.watch=namespace) the Role. */}}
{{- define "themis.namespacedRules" }}
  # The custom resources it reconciles (kopf keeps its progress in annotations and finalizers).
  - apiGroups: [themisdb.io]
    resources: [themisclusters, loraadapters]
    verbs: [get, list, watch, patch, update]
  - apiGroups: [themisdb.io]
    resources: [themisclusters/status, loraadapters/status]
    verbs: [get, patch, update]
  # The children of every ThemisCluster.
  - apiGroups: [""]
    resources: [configmaps, secrets, services]
    verbs: [get, list, watch, create, patch, update, delete]
  - apiGroups: [apps]
    resources: [statefulsets]
    verbs: [get, list, watch, create, patch, update, delete]
  - apiGroups: [policy]
    resources: [poddisruptionbudgets]
    verbs: [get, list, watch, create, patch, update, delete]
  - apiGroups: [monitoring.coreos.com]
    resources: [servicemonitors]
    verbs: [get, list, watch, create, patch, update, delete]
  # Shard pods, read only: why a shard cannot start (its termination message).
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch]
  # The shards' volumes: grown when spec.storage sizes grow (never created or deleted).
  - apiGroups: [""]
    resources: [persistentvolumeclaims]
    verbs: [get, list, watch, patch]
  # Events for transitions.
  - apiGroups: ["", events.k8s.io]
    resources: [events]
    verbs: [create, patch]
{{- end }}

{{- define "themis.clusterRules" }}
  # kopf's resource and namespace discovery.
  - apiGroups: [apiextensions.k8s.io]
    resources: [customresourcedefinitions]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [namespaces]
    verbs: [get, list, watch]
{{- end }}
