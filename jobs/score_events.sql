-- score_events: feature vectors from Kafka -> predict (any ONNX model) -> scores on Kafka.
-- The model comes from the `predict:` config section (model_path, input/output names);
-- e.g. FLINKAI_PREDICT_MODEL_PATH=/models/fraud.onnx. Malformed records and rows the
-- model cannot take (wrong length, NaN, infinity) go to a dead-letter topic with the
-- reason and their source offset; they never stop the job and are never dropped.
--
-- Input records: {"id": "...", "features": [f0, f1, ...]}.
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, FEATURES_TOPIC, SCORES_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start)
--   DELIVERY_GUARANTEE (default exactly-once), TRANSACTIONAL_ID_PREFIX (built in: per job)

SET 'pipeline.name' = 'flinkai-score-events';

CREATE TEMPORARY FUNCTION parse_feature_event AS 'feature_events.parse_feature_event' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION predict AS 'scoring.predict' LANGUAGE PYTHON;

-- Raw bytes, so a malformed record reaches parse_feature_event and is dead-lettered.
CREATE TEMPORARY TABLE features_raw (
  payload BYTES,
  `topic` STRING METADATA FROM 'topic' VIRTUAL,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${FEATURES_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-score-events}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

-- One sink for both outcomes, routed per row by the writable `topic` column, as in
-- embed_clicks.sql: one output record per input event, one model call per event.
CREATE TEMPORARY TABLE score_outputs (
  `topic` STRING METADATA,
  id STRING,
  score ARRAY<FLOAT>,
  model_version STRING,
  reason STRING,
  detail STRING,
  payload_base64 STRING,
  source_topic STRING,
  source_partition INT,
  source_offset BIGINT,
  failed_at TIMESTAMP_LTZ(3)
) WITH (
  'connector' = 'kafka',
  'topic' = '${SCORES_TOPIC};${DLQ_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'key.format' = 'raw',
  'key.fields' = 'id',
  'value.format' = 'json',
  'value.fields-include' = 'ALL',
  'value.json.encode.ignore-null-fields' = 'true',
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}',
  'properties.transaction.timeout.ms' = '900000'
);

CREATE TEMPORARY VIEW parsed AS
SELECT payload, `topic` AS source_topic, `partition` AS source_partition,
       `offset` AS source_offset, parse_feature_event(payload) AS f
FROM features_raw;

-- f.features is NULL for malformed events; predict returns an error for them without
-- running the model. The row and the field name, rather than f.features, let Flink run
-- both functions in one Python operator (see embed_clicks.sql).
CREATE TEMPORARY VIEW scored AS
SELECT payload, source_topic, source_partition, source_offset, f,
       predict(f, 'features') AS s
FROM parsed;

CREATE TEMPORARY VIEW outcomes AS
SELECT *, (f.error_reason IS NULL AND s.error IS NULL) AS ok
FROM scored;

INSERT INTO score_outputs
SELECT
  IF(ok, '${SCORES_TOPIC}', '${DLQ_TOPIC}'),
  f.id,
  s.score,
  s.model_version,
  IF(ok, CAST(NULL AS STRING), COALESCE(f.error_reason, SPLIT_INDEX(s.error, ':', 0))),
  IF(ok, CAST(NULL AS STRING), COALESCE(f.error_detail, s.error)),
  -- invalid events: parse_feature_event kept the raw bytes; valid ones (the model failed) are
  -- UTF-8, so the cast back to bytes is exact
  IF(ok, CAST(NULL AS STRING), COALESCE(f.payload_base64, TO_BASE64(CAST(payload AS STRING)))),
  IF(ok, CAST(NULL AS STRING), source_topic),
  IF(ok, CAST(NULL AS INT), source_partition),
  IF(ok, CAST(NULL AS BIGINT), source_offset),
  IF(ok, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM outcomes;
