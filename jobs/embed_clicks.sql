-- embed_clicks: click events from Kafka -> text_to_vector -> embeddings on Kafka.
-- Events that cannot be embedded go to a dead-letter topic with the reason and their
-- source offset; they never stop the job and are never dropped.
--
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, CLICKS_TOPIC, EMBEDDINGS_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start)

SET 'pipeline.name' = 'flinkai-embed-clicks';

CREATE TEMPORARY FUNCTION parse_click AS 'events.parse_click' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION to_base64_bytes AS 'events.to_base64_bytes' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION text_to_vector AS 'vectorizer.text_to_vector' LANGUAGE PYTHON;

-- Raw bytes, not 'json': a JSON format would fail the job (or, with
-- ignore-parse-errors, silently drop) on a bad record; parse_click dead-letters it instead.
CREATE TEMPORARY TABLE clicks_raw (
  payload BYTES,
  `topic` STRING METADATA FROM 'topic' VIRTUAL,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${CLICKS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-embed-clicks}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

CREATE TEMPORARY TABLE click_embeddings (
  user_id STRING,
  embedding_vec ARRAY<FLOAT>,
  event_time STRING,
  model_version STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '${EMBEDDINGS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  -- keyed by user so one user's embeddings stay in order on one partition
  'key.format' = 'raw',
  'key.fields' = 'user_id',
  'value.format' = 'json',
  'value.fields-include' = 'ALL'
);

CREATE TEMPORARY TABLE click_dead_letters (
  reason STRING,
  detail STRING,
  payload_base64 STRING,
  source_topic STRING,
  source_partition INT,
  source_offset BIGINT,
  model_version STRING,
  failed_at TIMESTAMP_LTZ(3)
) WITH (
  'connector' = 'kafka',
  'topic' = '${DLQ_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'format' = 'json'
);

CREATE TEMPORARY VIEW parsed AS
SELECT payload, `topic`, `partition`, `offset`, parse_click(payload) AS c
FROM clicks_raw;

CREATE TEMPORARY VIEW embedded AS
SELECT payload, `topic`, `partition`, `offset`, user_id, event_time,
       text_to_vector(click_text) AS e
FROM (
  SELECT payload, `topic`, `partition`, `offset`,
         c.user_id AS user_id, c.click_text AS click_text, c.event_time AS event_time
  FROM parsed
  WHERE c.error_reason IS NULL
);

INSERT INTO click_embeddings
SELECT user_id, e.embedding, event_time, e.model_version
FROM embedded
WHERE e.error IS NULL;

INSERT INTO click_dead_letters
SELECT c.error_reason, c.error_detail, to_base64_bytes(payload),
       `topic`, `partition`, `offset`, CAST(NULL AS STRING), CURRENT_TIMESTAMP
FROM parsed
WHERE c.error_reason IS NOT NULL
UNION ALL
SELECT SPLIT_INDEX(e.error, ':', 0), e.error, to_base64_bytes(payload),
       `topic`, `partition`, `offset`, e.model_version, CURRENT_TIMESTAMP
FROM embedded
WHERE e.error IS NOT NULL;
