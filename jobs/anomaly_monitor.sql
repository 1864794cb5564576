-- anomaly_monitor: time-series points from Kafka -> per-series anomaly scores (by
-- default Beam's z-score through Numenta's anomaly likelihood; or an LSTM + attention
-- forecaster, ONNX step; keyed state in Flink checkpoints) -> anomaly events on Kafka,
-- exactly-once. Points that cannot be parsed or scored
-- (not JSON, missing field, NaN/Infinity, out of order) go to a dead-letter topic with
-- the reason and their source offset; they never stop the job.
--
-- Input records: {"series": "...", "ts": epoch ms or ISO-8601, "value": number}.
-- Output: one record per scored point: series, ts_ms, value, score, is_anomaly,
-- model_version (see flinkai.operators.anomaly).
--
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, POINTS_TOPIC, ANOMALY_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start),
--   ANOMALY_MODEL (default zscore: no model files, or cad when a range is given;
--   cad: CAD OSE, within a known range
--   given by ANOMALY_VALUE_MIN and ANOMALY_VALUE_MAX, or with both empty within a range
--   learnt per series; or hybrid / lstm under $FLINKAI_HOME/models/anomaly, built by
--   flinkai model train-anomaly, or a folder),
--   ANOMALY_THRESHOLD (default: the model's own, 0.5091 for zscore, 0.7521 for cad
--   with a range, 0.7718 for cad with a learnt one),
--   DELIVERY_GUARANTEE (default exactly-once), TRANSACTIONAL_ID_PREFIX (built in: per job).
--   An empty setting is unset: the Flink option flinkai.anomaly.<name>, else the
--   operator's default, applies.

SET 'pipeline.name' = 'flinkai-anomaly-monitor';

CREATE TEMPORARY FUNCTION parse_point AS 'anomaly_points.parse_point' LANGUAGE PYTHON;

-- Raw bytes, so a malformed record reaches parse_point and is dead-lettered.
CREATE TEMPORARY TABLE points_raw (
  payload BYTES,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL,
  `topic` STRING METADATA FROM 'topic' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${POINTS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-anomaly-monitor}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

CREATE TEMPORARY TABLE anomalies_out (
  series STRING,
  ts_ms BIGINT,
  `value` DOUBLE,
  score DOUBLE,
  is_anomaly BOOLEAN,
  model_version STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '${ANOMALY_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'key.format' = 'raw',
  'key.fields' = 'series',
  'value.format' = 'json',
  'value.fields-include' = 'ALL',
  -- Exactly-once: Kafka transactions committed by Flink checkpoints.
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}-anomalies',
  'properties.transaction.timeout.ms' = '900000'
);

CREATE TEMPORARY TABLE dead_letters (
  reason STRING,
  detail STRING,
  payload_base64 STRING,
  source_topic STRING,
  source_partition INT,
  source_offset BIGINT,
  failed_at TIMESTAMP_LTZ(3)
) WITH (
  'connector' = 'kafka',
  'topic' = '${DLQ_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'value.format' = 'json',
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  -- a different prefix per sink: two sinks sharing one would fence each other
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}-dlq',
  'properties.transaction.timeout.ms' = '900000'
);

CREATE TEMPORARY VIEW parsed AS
SELECT `topic` AS source_topic, `partition` AS source_partition, `offset` AS source_offset,
       parse_point(payload) AS p
FROM points_raw;

-- Valid points with their origin; the operator dead-letters the ones it cannot score
-- (out of order), keeping partition, offset and payload.
CREATE TEMPORARY VIEW points AS
SELECT p.series AS series, p.ts_ms AS ts_ms, p.`value` AS `value`,
       source_partition, source_offset, p.payload_base64 AS raw_base64
FROM parsed
WHERE p.error_reason IS NULL;

CREATE TEMPORARY VIEW scored AS
  APPLY OPERATOR 'flinkai.operators.anomaly.detect_anomalies' TO points
  WITH ('key' = 'series', 'time' = 'ts_ms', 'value' = 'value',
        'partition' = 'source_partition', 'offset' = 'source_offset',
        'payload' = 'raw_base64',
        'model' = '${ANOMALY_MODEL:-}', 'threshold' = '${ANOMALY_THRESHOLD:-}',
        'value_min' = '${ANOMALY_VALUE_MIN:-}', 'value_max' = '${ANOMALY_VALUE_MAX:-}');

INSERT INTO anomalies_out
SELECT `key`, ts, `value`, score, is_anomaly, model_version
FROM scored
WHERE error_reason IS NULL;

INSERT INTO dead_letters
SELECT p.error_reason, p.error_detail, p.payload_base64, source_topic, source_partition,
       source_offset, CURRENT_TIMESTAMP
FROM parsed
WHERE p.error_reason IS NOT NULL
UNION ALL
SELECT error_reason, error_detail, payload_base64, '${POINTS_TOPIC}', source_partition,
       source_offset, CURRENT_TIMESTAMP
FROM scored
WHERE error_reason IS NOT NULL;
