{{/* Names and labels shared by every template of the chart. */}}

{{- define "ftpipeline.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
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

{{- define "ftpipeline.redisUrl" -}}
{{- if .Values.redis.enabled -}}
redis://{{ include "ftpipeline.fullname" . }}-redis.{{ .Release.Namespace }}.svc:6379/0
{{- else -}}
{{ .Values.redis.externalUrl }}
{{- end -}}
{{- end -}}

{{- define "ftpipeline.zookeeperConnect" -}}
{{- if .Values.zookeeper.enabled -}}
{{ include "ftpipeline.fullname" . }}-zookeeper.{{ .Release.Namespace }}.svc:2181
{{- else -}}
{{ .Values.zookeeper.externalConnect }}
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
