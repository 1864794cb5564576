-- llm_complete: prompts from Kafka -> greedy LLM completion with prefix reuse -> Kafka.
-- Input records are JSON {"id": ..., "prompt": ...}. Each yields exactly one output
-- record: a completion {id, completion, model_version, prompt_tokens, cached_tokens,
-- ttft_ms} or a dead letter {reason, detail, payload_base64, source offset...}.
-- Empty, over-long, non-UTF-8 and non-JSON records go to the dead-letter topic; they
-- never stop the job.
--
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, PROMPTS_TOPIC, COMPLETIONS_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start)
--   DELIVERY_GUARANTEE (default exactly-once), TRANSACTIONAL_ID_PREFIX (built in: per job)
-- The model, max_new_tokens and the prefix store come from the `llm` config section
-- (e.g. FLINKAI_LLM_STORE=kafka FLINKAI_LLM_MAX_NEW_TOKENS=8).

SET 'pipeline.name' = 'flinkai-llm-complete';

CREATE TEMPORARY FUNCTION parse_prompt AS 'llm.parse_prompt' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION llm_complete AS 'llm.llm_complete' LANGUAGE PYTHON;

-- Raw bytes, not 'json': parse_prompt sees every record and dead-letters a bad one.
CREATE TEMPORARY TABLE prompts_raw (
  payload BYTES,
  `topic` STRING METADATA FROM 'topic' VIRTUAL,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${PROMPTS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-llm-complete}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

-- One sink, routed per row by the writable `topic` column (see embed_clicks.sql).
CREATE TEMPORARY TABLE llm_outputs (
  `topic` STRING METADATA,
  id STRING,
  completion STRING,
  model_version STRING,
  prompt_tokens INT,
  cached_tokens INT,
  ttft_ms DOUBLE,
  reason STRING,
  detail STRING,
  payload_base64 STRING,
  source_topic STRING,
  source_partition INT,
  source_offset BIGINT,
  failed_at TIMESTAMP_LTZ(3)
) WITH (
  'connector' = 'kafka',
  'topic' = '${COMPLETIONS_TOPIC};${DLQ_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'value.format' = 'json',
  'value.json.encode.ignore-null-fields' = 'true',
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}',
  'properties.transaction.timeout.ms' = '900000'
);

-- llm_complete(p, 'prompt') takes parse_prompt's row, so both run in one Python
-- operator; rows whose parse failed are passed on without calling the model.
CREATE TEMPORARY VIEW completed AS
SELECT payload, `topic` AS source_topic, `partition` AS source_partition,
       `offset` AS source_offset, p, llm_complete(p, 'prompt') AS r
FROM (SELECT *, parse_prompt(payload) AS p FROM prompts_raw);

CREATE TEMPORARY VIEW outcomes AS
SELECT *, (p.error_reason IS NULL AND r.error IS NULL) AS ok
FROM completed;

INSERT INTO llm_outputs
SELECT
  IF(ok, '${COMPLETIONS_TOPIC}', '${DLQ_TOPIC}'),
  p.id,
  r.completion,
  r.model_version,
  r.prompt_tokens,
  r.cached_tokens,
  r.ttft_ms,
  IF(ok, CAST(NULL AS STRING), COALESCE(p.error_reason, SPLIT_INDEX(r.error, ':', 0))),
  IF(ok, CAST(NULL AS STRING), COALESCE(p.error_detail, r.error)),
  -- invalid records: parse_prompt kept the raw bytes; valid ones are UTF-8
  IF(ok, CAST(NULL AS STRING), COALESCE(p.payload_base64, TO_BASE64(CAST(payload AS STRING)))),
  IF(ok, CAST(NULL AS STRING), source_topic),
  IF(ok, CAST(NULL AS INT), source_partition),
  IF(ok, CAST(NULL AS BIGINT), source_offset),
  IF(ok, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM outcomes;
