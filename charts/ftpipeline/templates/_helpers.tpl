{{/* Names and labels shared by every template of the chart. */}}

{{- define "ftpipeline.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- /* The operator replicas' ClusterKopfPeering: cluster-wide, so named after the release's namespace too. */ -}}
{{- define "ftpipeline.peeringName" -}}
{{- printf "%s.%s" .Release.Namespace (include "ftpipeline.fullname" .) | trunc 253 -}}
{{- end -}}

{{- define "ftpipeline.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ftpipeline.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ftpipeline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "ftpipeline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "ftpipeline.fullname" .) }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{/* Where the operator finds the stores' CAs (ca.crt of each store's TLS Secret); it hands them to every
pipeline's sidecar at the same path, so the URLs below mean the same file in both (the operator's
render.STORE_CA_DIR). */}}
{{- define "ftpipeline.storeCADir" -}}/etc/ftpipeline-stores{{- end -}}

{{/* The Secret with a store's certificate (or only its CA, for an external one); empty: no TLS. */}}
{{- define "ftpipeline.storeTLSSecret" -}}
{{- $values := index .root.Values .store -}}
{{- if $values.tls.enabled -}}
{{- if $values.tls.existingSecret -}}
{{ $values.tls.existingSecret }}
{{- else if $values.enabled -}}
{{ include "ftpipeline.fullname" .root }}-{{ .store }}-tls
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ftpipeline.redisUrl" -}}
{{- $tls := include "ftpipeline.storeTLSSecret" (dict "root" . "store" "redis") -}}
{{- $url := .Values.redis.externalUrl -}}
{{- if .Values.redis.enabled -}}
{{- $url = printf "%s://%s-redis.%s.svc:6379/0" (ternary "rediss" "redis" (ne $tls "")) (include "ftpipeline.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- if $tls -}}
{{ $url }}{{ ternary "&" "?" (contains "?" $url) }}ssl_ca_certs={{ include "ftpipeline.storeCADir" . }}/redis/ca.crt
{{- else -}}
{{ $url }}
{{- end -}}
{{- end -}}

{{/* An in-chart ZooKeeper ensemble's members by name, in id order, comma-separated (zookeeper.replicas > 1):
what each member is told (--servers) and, with the client port, what clients connect to. */}}
{{- define "ftpipeline.zookeeperMembers" -}}
{{- $fullname := include "ftpipeline.fullname" . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.zookeeper.replicas) -}}
{{- $members = append $members (printf "%s-zookeeper-%d.%s-zookeeper-members.%s.svc" $fullname $i $fullname $.Release.Namespace) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{- define "ftpipeline.zookeeperConnect" -}}
{{- $tls := include "ftpipeline.storeTLSSecret" (dict "root" . "store" "zookeeper") -}}
{{- $hosts := .Values.zookeeper.externalConnect -}}
{{- if and .Values.zookeeper.enabled (gt (int .Values.zookeeper.replicas) 1) -}}
{{- $hosts = printf "%s:2181" (include "ftpipeline.zookeeperMembers" . | replace "," ":2181,") -}}
{{- else if .Values.zookeeper.enabled -}}
{{- $hosts = printf "%s-zookeeper.%s.svc:2181" (include "ftpipeline.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- if $tls -}}
{{ $hosts }}?ca={{ include "ftpipeline.storeCADir" . }}/zookeeper/ca.crt
{{- else -}}
{{ $hosts }}
{{- end -}}
{{- end -}}

{{/* Pod and container hardening: the image's non-root user, a read-only root filesystem. */}}
{{- define "ftpipeline.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "ftpipeline.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The webhook configuration is cluster-scoped: one per release and namespace. */}}
{{- define "ftpipeline.webhookName" -}}
{{ printf "%s-%s" (include "ftpipeline.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The namespaces whose FTPipelines the operator runs: the release's own unless listed; "*" is every one. */}}
{{- define "ftpipeline.watchNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{ toJson .Values.watchNamespaces }}
{{- else -}}
{{ toJson (list .Release.Namespace) }}
{{- end -}}
{{- end -}}

{{/* The watched namespaces that exist, and those that do not. A Role cannot be made in a namespace that is
not there, and one such name failed the whole install or upgrade; the operator gets its Role and watch in the
others, and NOTES.txt names the missing ones (created later, they are taken in by the next helm upgrade).
With no cluster to ask (helm template, a client-side dry run) lookup finds nothing, kube-system included:
then every name is taken as existing. */}}
{{- define "ftpipeline.existingWatchNamespaces" -}}
{{- $live := lookup "v1" "Namespace" "" "kube-system" -}}
{{- $out := list -}}
{{- range $ns := include "ftpipeline.watchNamespaces" . | fromJsonArray -}}
{{- if or (not $live) (eq $ns $.Release.Namespace) (eq $ns "*") (lookup "v1" "Namespace" "" $ns) -}}
{{- $out = append $out $ns -}}
{{- end -}}
{{- end -}}
{{ toJson $out }}
{{- end -}}

{{- define "ftpipeline.missingWatchNamespaces" -}}
{{- $existing := include "ftpipeline.existingWatchNamespaces" . | fromJsonArray -}}
{{- $out := list -}}
{{- range $ns := include "ftpipeline.watchNamespaces" . | fromJsonArray -}}
{{- if not (has $ns $existing) -}}
{{- $out = append $out $ns -}}
{{- end -}}
{{- end -}}
{{ toJson $out }}
{{- end -}}

{{- define "ftpipeline.watchAll" -}}
{{- if has "*" .Values.watchNamespaces }}true{{ end -}}
{{- end -}}

{{/* What the operator may do in a namespace it watches, and nothing more: run worker pods with their
Service, ConfigMap and PodDisruptionBudget, read the Secrets pipelines reference and write each run's worker credentials. */}}
{{- define "ftpipeline.namespacedRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["create", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "update"]  # get: endpoints' secretRefs; create/update: each run's worker credentials
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch"]  # each pipeline's workers' budget
{{- if .Values.networkPolicy.enabled }}
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "patch"]  # each pipeline's worker policy
{{- end }}
{{- end -}}

{{/* The Secret holding the chart Redis's admin password (key "password"); empty when Redis needs none. */}}
{{- define "ftpipeline.redisAuthSecret" -}}
{{- if .Values.redis.auth.enabled -}}
{{- if .Values.redis.auth.existingSecret -}}
{{ .Values.redis.auth.existingSecret }}
{{- else if .Values.redis.enabled -}}
{{ include "ftpipeline.fullname" . }}-redis-auth
{{- else -}}
{{ fail "redis.auth.enabled with an external Redis needs redis.auth.existingSecret (its admin password), or set redis.auth.enabled=false" }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the chart ZooKeeper's super-user password (key "password"); empty without one. */}}
{{- define "ftpipeline.zookeeperAuthSecret" -}}
{{- if .Values.zookeeper.auth.enabled -}}
{{- if .Values.zookeeper.auth.existingSecret -}}
{{ .Values.zookeeper.auth.existingSecret }}
{{- else if .Values.zookeeper.enabled -}}
{{ include "ftpipeline.fullname" . }}-zookeeper-auth
{{- else -}}
{{ fail "zookeeper.auth.enabled with an external ZooKeeper needs zookeeper.auth.existingSecret (its super user's password), or set zookeeper.auth.enabled=false" }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Worker pods of every pipeline this release runs, as a NetworkPolicy peer. */}}
{{- define "ftpipeline.workerPeer" -}}
- podSelector:
    matchLabels:
      app.kubernetes.io/managed-by: ftpipeline-operator
      app.kubernetes.io/component: worker
  {{- if include "ftpipeline.watchAll" . }}
  namespaceSelector: {}
  {{- else }}
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: {{ include "ftpipeline.watchNamespaces" . }}
  {{- end }}
- podSelector:
    matchLabels:
      {{- include "ftpipeline.selector" . | nindent 6 }}
      app.kubernetes.io/component: operator
{{- end -}}

{{/* Where pipelines that name no Kafka cluster find one: the chart's broker, or the external one given. */}}
{{- define "ftpipeline.kafkaBootstrap" -}}
{{- if .Values.kafka.enabled -}}
{{ include "ftpipeline.fullname" . }}-kafka.{{ .Release.Namespace }}.svc:9092
{{- else -}}
{{ .Values.kafka.externalBootstrapServers }}
{{- end -}}
{{- end -}}

{{/*
Where a store's pod may run: its nodeSelector, affinity and tolerations, plus, with
nodeLostTolerationSeconds, how long it stays bound to a node that stopped answering (not-ready,
unreachable) before Kubernetes evicts it and the Deployment starts it elsewhere (Kubernetes' default:
300 s). Takes the component's values.
*/}}
{{- define "ftpipeline.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $tolerations := .tolerations | default list }}
{{- with .nodeLostTolerationSeconds }}
{{- $seconds := . }}
{{- range $key := list "node.kubernetes.io/not-ready" "node.kubernetes.io/unreachable" }}
{{- $tolerations = append $tolerations (dict "key" $key "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int $seconds)) }}
{{- end }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
