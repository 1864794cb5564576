-- drift_monitor: text events from Kafka -> text_to_vector -> per-stream semantic drift
-- detection (a keyed DataStream operator with checkpointed state) -> drift events on Kafka,
-- and adaptive micro-batch windows per stream (length from the processing delay, cut
-- short on drift) -> window aggregates on Kafka.
-- Events that cannot be embedded go to a dead-letter topic with the reason and their
-- source offset; they never stop the job. Each event is embedded once.
--
-- Input records: {"stream_id": ..., "text": ..., "event_time": epoch ms or ISO-8601}.
-- Drift periods follow the events' event_time (see flinkai.operators.drift).
--
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, TEXT_TOPIC, DRIFT_TOPIC, WINDOW_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start)
--   DELIVERY_GUARANTEE (default exactly-once), TRANSACTIONAL_ID_PREFIX (built in: per job)
-- Detector settings: Flink options 'flinkai.drift.<field>' (SET or runtime.flink_conf),
-- or 'drift.<field>' options on the APPLY OPERATOR statements below; window bounds:
-- 'flinkai.adaptive_window.<field>' or 'window.<field>'.
-- 'flinkai.drift_detector' = 'cusum' (or 'detector' = 'cusum' on a statement) picks the
-- per-event detector instead of the period-based one; its settings: 'flinkai.cusum.<field>'.

SET 'pipeline.name' = 'flinkai-drift-monitor';

CREATE TEMPORARY FUNCTION parse_text_event AS 'text_events.parse_text_event' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION to_base64_bytes AS 'events.to_base64_bytes' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION text_to_vector AS '${EMBED_FUNCTION:-vectorizer.text_to_vector}' LANGUAGE PYTHON;

-- Raw bytes, so a malformed record reaches parse_text_event and is dead-lettered.
CREATE TEMPORARY TABLE text_raw (
  payload BYTES,
  `topic` STRING METADATA FROM 'topic' VIRTUAL,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${TEXT_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-drift-monitor}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

CREATE TEMPORARY TABLE drift_out (
  stream_id STRING,
  period_start_ms BIGINT,
  period_end_ms BIGINT,
  jsd DOUBLE,
  z DOUBLE,
  n INT,
  detected_at_ms BIGINT
) WITH (
  'connector' = 'kafka',
  'topic' = '${DRIFT_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'key.format' = 'raw',
  'key.fields' = 'stream_id',
  'value.format' = 'json',
  'value.fields-include' = 'ALL',
  -- Exactly-once: Kafka transactions committed by Flink checkpoints.
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}-drift',
  'properties.transaction.timeout.ms' = '900000'
);

CREATE TEMPORARY TABLE windows_out (
  stream_id STRING,
  window_start_ms BIGINT,
  window_end_ms BIGINT,
  n INT,
  mean_norm DOUBLE,
  delay_ms DOUBLE,
  next_window_ms BIGINT,
  closed_by STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '${WINDOW_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'key.format' = 'raw',
  'key.fields' = 'stream_id',
  'value.format' = 'json',
  'value.fields-include' = 'ALL',
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}-windows',
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
SELECT payload, `topic` AS source_topic, `partition` AS source_partition,
       `offset` AS source_offset, parse_text_event(payload) AS p
FROM text_raw;

-- p.text is NULL for invalid events; text_to_vector skips NULLs without the model.
-- The row and the field name, rather than p.text, let Flink run both functions in
-- one Python operator (see embed_clicks.sql).
CREATE TEMPORARY VIEW vectorized AS
SELECT payload, source_topic, source_partition, source_offset, p,
       text_to_vector(p, 'text') AS e
FROM parsed;

-- Three consumers read the embedded events (drift, windows, dead letters); without
-- this, Flink would plan one Kafka reader and one model call per consumer.
CREATE TEMPORARY VIEW vectorized_once AS
  APPLY OPERATOR 'flinkai.operators.share.share' TO vectorized;

CREATE TEMPORARY VIEW embedded AS
SELECT p.stream_id AS stream_id, p.event_ms AS event_ms, e.embedding AS embedding
FROM vectorized_once
WHERE p.error_reason IS NULL AND e.error IS NULL;

CREATE TEMPORARY VIEW drift_events AS
  APPLY OPERATOR 'flinkai.operators.drift.detect_drift' TO embedded
  WITH ('key' = 'stream_id', 'time' = 'event_ms', 'embedding' = 'embedding');

INSERT INTO drift_out
SELECT `key`, period_start_ms, period_end_ms, jsd, z, n, detected_at_ms
FROM drift_events;

CREATE TEMPORARY VIEW windows AS
  APPLY OPERATOR 'flinkai.operators.drift.adaptive_windows' TO embedded
  WITH ('key' = 'stream_id', 'time' = 'event_ms', 'embedding' = 'embedding');

INSERT INTO windows_out
SELECT `key`, window_start_ms, window_end_ms, n, mean_norm, delay_ms, next_window_ms, closed_by
FROM windows;

INSERT INTO dead_letters
SELECT
  COALESCE(p.error_reason, SPLIT_INDEX(e.error, ':', 0)),
  COALESCE(p.error_detail, e.error),
  to_base64_bytes(payload),
  source_topic,
  source_partition,
  source_offset,
  CURRENT_TIMESTAMP
FROM vectorized_once
WHERE p.error_reason IS NOT NULL OR e.error IS NOT NULL;
