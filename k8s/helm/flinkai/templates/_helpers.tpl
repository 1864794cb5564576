{{/* Names and labels shared by every template. */}}

{{- define "flinkai.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "flinkai.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "flinkai.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "flinkai.selectorLabels" . }}
{{- end -}}

{{- define "flinkai.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flinkai.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "flinkai.jobmanager" -}}{{ include "flinkai.fullname" . }}-jobmanager{{- end -}}
{{- define "flinkai.taskmanager" -}}{{ include "flinkai.fullname" . }}-taskmanager{{- end -}}
{{- define "flinkai.triton" -}}{{ include "flinkai.fullname" . }}-triton{{- end -}}

{{- define "flinkai.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "flinkai.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "flinkai.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "flinkai.storageIsS3" -}}
{{- if hasPrefix "s3://" .Values.flink.storageDir -}}true{{- end -}}
{{- end -}}

{{/* The flinkai config as mounted: values + Kafka bootstrap + Triton URL. */}}
{{- define "flinkai.appConfig" -}}
{{- $cfg := deepCopy .Values.flinkai.config -}}
{{- $kafka := get $cfg "kafka" | default dict -}}
{{- $_ := set $kafka "bootstrap_servers" .Values.kafka.bootstrapServers -}}
{{- $_ := set $cfg "kafka" $kafka -}}
{{- if .Values.triton.enabled -}}
{{- $triton := get $cfg "triton" | default dict -}}
{{- if not (get $triton "url") -}}
{{- $_ := set $triton "url" (printf "%s:%v" (include "flinkai.triton" .) .Values.triton.ports.grpc) -}}
{{- end -}}
{{- $_ := set $cfg "triton" $triton -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Checks that turn a bad combination of values into an install-time error. */}}
{{- define "flinkai.validate" -}}
{{- if hasKey .Values.flink "resourceStabilizationTimeout" -}}
{{- fail "flink.resourceStabilizationTimeout is gone: in Flink 2.2 its key is the submission-phase timeout, not the rescale one; set flink.rescale.stabilizationTimeout, flink.rescale.cooldown and flink.rescale.submissionStabilizationTimeout" -}}
{{- end -}}
{{- if .Values.autoscaling.enabled -}}
{{- $slots := int .Values.taskmanager.numberOfTaskSlots -}}
{{- $max := int .Values.autoscaling.maxReplicas -}}
{{- $partitions := int .Values.kafka.sourcePartitions -}}
{{- if gt (mul $max $slots) $partitions -}}
{{- fail (printf "autoscaling.maxReplicas (%d) x taskmanager.numberOfTaskSlots (%d) = %d exceeds kafka.sourcePartitions (%d): the extra source subtasks would get no partition and their TaskManagers would idle" $max $slots (mul $max $slots) $partitions) -}}
{{- end -}}
{{- $a := .Values.autoscaling -}}
{{- if not (or $a.backlog.enabled (include "flinkai.gpuMetrics" .) $a.embeddedRows.enabled $a.embeddingBatchMs.enabled) -}}
{{- fail "autoscaling is enabled but none of backlog, gpuUtilization (with a TaskManager GPU), embeddedRows, embeddingBatchMs is" -}}
{{- end -}}
{{- if lt $max (int .Values.autoscaling.minReplicas) -}}
{{- fail "autoscaling.maxReplicas must be >= autoscaling.minReplicas" -}}
{{- end -}}
{{- end -}}
{{- if and (not (include "flinkai.storageIsS3" .)) (not .Values.flink.persistence.enabled) -}}
{{- fail "flink.storageDir is not s3://...: enable flink.persistence (a ReadWriteMany volume shared by all pods) and point storageDir at file://<persistence.mountPath>/..." -}}
{{- end -}}
{{- if and (eq (toString .Values.flinkai.config.embedding.backend) "triton") (not .Values.triton.enabled) (not (and .Values.flinkai.config.triton .Values.flinkai.config.triton.url)) -}}
{{- fail "flinkai.config.embedding.backend is triton: enable triton or set flinkai.config.triton.url" -}}
{{- end -}}
{{- end -}}

{{/* Volumes and mounts every Flink pod shares. */}}
{{- define "flinkai.flinkVolumes" -}}
- name: flinkai-config
  configMap:
    name: {{ include "flinkai.fullname" . }}-config
{{- if .Values.flink.persistence.enabled }}
- name: flink-data
  persistentVolumeClaim:
    claimName: {{ .Values.flink.persistence.existingClaim | default (printf "%s-data" (include "flinkai.fullname" .)) }}
{{- end }}
{{- with .Values.kafka.security.existingSecret }}
- name: kafka-credentials
  secret:
    secretName: {{ . }}
    defaultMode: 0400
{{- end }}
{{- end -}}

{{- define "flinkai.flinkMounts" -}}
- name: flinkai-config
  mountPath: /etc/flinkai
  readOnly: true
{{- if .Values.flink.persistence.enabled }}
- name: flink-data
  mountPath: {{ .Values.flink.persistence.mountPath }}
{{- end }}
{{- if .Values.kafka.security.existingSecret }}
- name: kafka-credentials
  mountPath: /etc/flinkai-secrets/kafka
  readOnly: true
{{- end }}
{{- end -}}

{{/* Environment every Flink container gets. */}}
{{- define "flinkai.flinkEnv" -}}
# The image's entry point merges these "key: value" lines into conf/config.yaml.
- name: FLINK_PROPERTIES
  valueFrom:
    configMapKeyRef:
      name: {{ include "flinkai.fullname" . }}-flink
      key: flink-properties
- name: FLINKAI_CONFIG
  value: /etc/flinkai/flinkai.yaml
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- if include "flinkai.storageIsS3" . }}
- name: ENABLE_BUILT_IN_PLUGINS
  value: {{ .Values.flink.s3.plugin | quote }}
{{- end }}
{{- include "flinkai.kafkaSecurityEnv" . }}
{{- end -}}

{{/* kafka.security as FLINKAI_KAFKA_SECURITY_* variables. Secrets are only ever file
paths into the mounted existingSecret: the password never sits in values or a ConfigMap. */}}
{{- define "flinkai.kafkaSecurityEnv" -}}
{{- $sec := .Values.kafka.security }}
{{- if ne $sec.protocol "PLAINTEXT" }}
- name: FLINKAI_KAFKA_SECURITY_PROTOCOL
  value: {{ $sec.protocol | quote }}
{{- if hasPrefix "SASL_" $sec.protocol }}
{{- if not (and $sec.existingSecret $sec.username $sec.saslMechanism) }}
{{- fail "kafka.security with SASL needs existingSecret, username and saslMechanism" }}
{{- end }}
- name: FLINKAI_KAFKA_SECURITY_SASL_MECHANISM
  value: {{ $sec.saslMechanism | quote }}
- name: FLINKAI_KAFKA_SECURITY_USERNAME
  value: {{ $sec.username | quote }}
- name: FLINKAI_KAFKA_SECURITY_PASSWORD_FILE
  value: /etc/flinkai-secrets/kafka/{{ $sec.passwordKey }}
{{- end }}
{{- if and $sec.existingSecret $sec.caKey }}
- name: FLINKAI_KAFKA_SECURITY_CA_FILE
  value: /etc/flinkai-secrets/kafka/{{ $sec.caKey }}
{{- end }}
{{- if and $sec.existingSecret $sec.certKey }}
{{- if not $sec.keyKey }}
{{- fail "kafka.security.certKey needs keyKey (the client certificate's private key)" }}
{{- end }}
- name: FLINKAI_KAFKA_SECURITY_CERT_FILE
  value: /etc/flinkai-secrets/kafka/{{ $sec.certKey }}
- name: FLINKAI_KAFKA_SECURITY_KEY_FILE
  value: /etc/flinkai-secrets/kafka/{{ $sec.keyKey }}
{{- with $sec.keyPasswordKey }}
- name: FLINKAI_KAFKA_SECURITY_KEY_PASSWORD_FILE
  value: /etc/flinkai-secrets/kafka/{{ . }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "flinkai.flinkEnvFrom" -}}
{{- if and (include "flinkai.storageIsS3" .) .Values.flink.s3.credentialsSecret }}
envFrom:
  - secretRef:
      name: {{ .Values.flink.s3.credentialsSecret }}
{{- end }}
{{- end -}}

{{/* "true" when TaskManagers have a GPU and run flinkai.gpu_metrics next to Flink. */}}
{{- define "flinkai.gpuExporter" -}}
{{- if and .Values.taskmanager.gpu.enabled .Values.metrics.gpu.enabled -}}true{{- end -}}
{{- end -}}

{{/* "true" when the HPA reads gpu_utilization_ratio: a pod without a GPU has no series. */}}
{{- define "flinkai.gpuMetrics" -}}
{{- if and .Values.autoscaling.gpuUtilization.enabled (include "flinkai.gpuExporter" .) -}}true{{- end -}}
{{- end -}}

{{- define "flinkai.metricsAnnotations" -}}
{{- if .Values.metrics.scrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{- define "flinkai.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 9999
runAsGroup: 9999
fsGroup: 9999
{{- end -}}

{{- define "flinkai.containerSecurityContext" -}}
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
{{- end -}}
