-- llm_complete: prompts from Kafka -> greedy LLM completion, many prompts in flight per
-- worker -> Kafka. Input records are JSON {"id", "prompt"} with optional "priority"
-- (-100..100, higher first), "session" (turns of one conversation, run in order),
-- "max_new_tokens" and "adapter". Each yields exactly one output record: a completion
-- {id, completion, model_version, adapter, prompt_tokens, cached_tokens, ttft_ms,
-- queue_ms, e2e_ms, finish_reason, session} or a dead letter {reason, detail, payload_base64,
-- source offset...}. Bad records go to the dead-letter topic; they never stop the job.
--
-- Decoding runs beside the bundles (flinkai.operators.llm): a prompt waits in keyed
-- state until its completion is emitted, so a burst slows the job down and never
-- holds a checkpoint (docs/llm.md, "Serving under load").
--
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, PROMPTS_TOPIC, COMPLETIONS_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start)
--   DELIVERY_GUARANTEE (default exactly-once), TRANSACTIONAL_ID_PREFIX (built in: per job)
--   LLM_BUCKETS (default 8: keys, each with one timer; at least the parallelism)
-- The model, budgets and the prefix store come from the `llm` config section
-- (e.g. FLINKAI_LLM_STORE=kafka FLINKAI_LLM_KV_BUDGET_BYTES=268435456).
-- Adapters: with llm.adapters_topic set (and a decoder exported with --lora-rank), an
-- event's "adapter" picks a LoRA adapter, hot-plugged from that topic; `adapter` in the
-- output is the name@version it decoded with (docs/llm.md, "Adapters").

SET 'pipeline.name' = 'flinkai-llm-complete';
-- A finished completion leaves the worker with the bundle of the timer that found it:
-- close bundles after 20 ms instead of Flink's 1 s.
SET 'python.fn-execution.bundle.time' = '20';

-- Raw bytes, not 'json': the operator sees every record and dead-letters a bad one.
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
  adapter STRING,
  prompt_tokens INT,
  cached_tokens INT,
  ttft_ms DOUBLE,
  queue_ms DOUBLE,
  e2e_ms DOUBLE,
  finish_reason STRING,
  `session` STRING,
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

-- The key is a bucket of the session (or the id), computed on the JVM side: a
-- session's turns share a bucket and run in order; a record that is not JSON lands
-- in a bucket too and is dead-lettered by the operator.
CREATE TEMPORARY VIEW prompts AS
SELECT CAST(MOD(ABS(HASH_CODE(COALESCE(JSON_VALUE(CAST(payload AS STRING), '$.session'),
                                       JSON_VALUE(CAST(payload AS STRING), '$.id'), ''))),
                ${LLM_BUCKETS:-8}) AS STRING) AS bucket,
       payload, `partition` AS source_partition, `offset` AS source_offset
FROM prompts_raw;

CREATE TEMPORARY VIEW completed AS
  APPLY OPERATOR 'flinkai.operators.llm.complete' TO prompts
  WITH ('key' = 'bucket', 'payload' = 'payload', 'buckets' = '${LLM_BUCKETS:-8}',
        'partition' = 'source_partition', 'offset' = 'source_offset');

INSERT INTO llm_outputs
SELECT
  IF(error_reason IS NULL, '${COMPLETIONS_TOPIC}', '${DLQ_TOPIC}'),
  id, completion, model_version, adapter, prompt_tokens, cached_tokens, ttft_ms, queue_ms, e2e_ms,
  finish_reason, `session`, error_reason, error_detail, payload_base64,
  IF(error_reason IS NULL, CAST(NULL AS STRING), '${PROMPTS_TOPIC}'),
  source_partition, source_offset,
  IF(error_reason IS NULL, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM completed;
