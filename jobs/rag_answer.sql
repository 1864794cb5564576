-- rag_answer: questions from Kafka -> retrieve(question, k) -> the top-k passages from
-- the live index (kept current by rag_ingest.sql) -> rag_answer: an LLM answer from
-- those passages that names its sources -> Kafka.
--
-- Input records: {"id", "question"}. Output: {id, question, passages: [{doc_id,
-- chunk_id, score, text}], answer, sources: [chunk_id...], cited: [chunk_id...],
-- model_version, prompt_tokens, cached_tokens, ttft_ms, truncated_passages,
-- dropped_passages, retrieved_at}. `sources` are the chunk ids of the passages put in
-- the prompt (numbered [1]..[n] there), `cited` those the answer names as [n]. A
-- question with no passages gets a fixed answer, empty sources and no model call.
-- Bad records, questions that cannot be embedded and prompts the model refuses go to
-- the dead-letter topic with a reason.
--
-- The answer is decoded by the scheduled LLM operator (flinkai.operators.llm), beside
-- the bundles: a question waits in keyed state, never in a bundle that a checkpoint
-- would wait for (docs/llm.md, "Serving under load"). rag_prompt builds the grounded
-- prompt and carries the passages through the operator in `meta`; rag_finish reads
-- them back and parses the citations.
--
-- Placeholders: KAFKA_BOOTSTRAP, QUESTIONS_TOPIC, ANSWERS_TOPIC, DLQ_TOPIC,
--   TOP_K (default 5), SCAN_BOUNDED_MODE, GROUP_ID, DELIVERY_GUARANTEE,
--   TRANSACTIONAL_ID_PREFIX (built in)
-- The decoder, max_new_tokens, max_prompt_tokens (passages are cut to fit it) and the
-- prefix store come from the `llm` config section, as for llm_complete.sql.

SET 'pipeline.name' = 'flinkai-rag-answer';

CREATE TEMPORARY FUNCTION parse_question AS 'rag.parse_question' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION retrieve AS 'rag.retrieve' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION rag_prompt AS 'rag_answer.rag_prompt' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION rag_finish AS 'rag_answer.rag_finish' LANGUAGE PYTHON;
-- A completed answer leaves the worker with the bundle of the timer that found it.
SET 'python.fn-execution.bundle.time' = '20';

CREATE TEMPORARY TABLE questions_raw (
  payload BYTES,
  `topic` STRING METADATA FROM 'topic' VIRTUAL,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${QUESTIONS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-rag-answer}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

CREATE TEMPORARY TABLE answer_outputs (
  `topic` STRING METADATA,
  id STRING,
  question STRING,
  passages ARRAY<ROW<doc_id STRING, chunk_id STRING, score DOUBLE, `text` STRING>>,
  answer STRING,
  sources ARRAY<STRING>,
  cited ARRAY<STRING>,
  model_version STRING,
  prompt_tokens INT,
  cached_tokens INT,
  ttft_ms DOUBLE,
  truncated_passages INT,
  dropped_passages INT,
  retrieved_at TIMESTAMP_LTZ(3),
  reason STRING,
  detail STRING,
  payload_base64 STRING,
  source_topic STRING,
  source_partition INT,
  source_offset BIGINT,
  failed_at TIMESTAMP_LTZ(3)
) WITH (
  'connector' = 'kafka',
  'topic' = '${ANSWERS_TOPIC};${DLQ_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'format' = 'json',
  'json.encode.ignore-null-fields' = 'true',
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}',
  'properties.transaction.timeout.ms' = '900000'
);

-- retrieve runs once per question, inside rag_prompt's argument: the passages are
-- read only from rag_prompt's result (see udfs/rag_answer.py), and `share` keeps the
-- two readers below from planning the view twice.
CREATE TEMPORARY VIEW planned_view AS
SELECT payload, `topic` AS source_topic, `partition` AS source_partition,
       `offset` AS source_offset, q,
       rag_prompt(q.id, q.question, retrieve(q.question, ${TOP_K:-5}), payload) AS p
FROM (SELECT *, parse_question(payload) AS q FROM questions_raw);

CREATE TEMPORARY VIEW planned AS
  APPLY OPERATOR 'flinkai.operators.share.share' TO planned_view;

-- Questions with a prompt go to the model; the key buckets them for the timers.
CREATE TEMPORARY VIEW to_model AS
SELECT CAST(MOD(ABS(HASH_CODE(COALESCE(q.id, ''))), ${LLM_BUCKETS:-8}) AS STRING) AS bucket,
       CAST(p.request AS BYTES) AS request, source_partition, source_offset
FROM planned
WHERE p.request IS NOT NULL;

CREATE TEMPORARY VIEW completed AS
  APPLY OPERATOR 'flinkai.operators.llm.complete' TO to_model
  WITH ('key' = 'bucket', 'payload' = 'request', 'buckets' = '${LLM_BUCKETS:-8}',
        'partition' = 'source_partition', 'offset' = 'source_offset');

CREATE TEMPORARY VIEW answered AS
SELECT *, rag_finish(completion, meta) AS f, (error_reason IS NULL) AS ok
FROM completed;

-- The rest is final without a model call: an invalid record, no passages, an error.
CREATE TEMPORARY VIEW direct AS
SELECT *, (q.error_reason IS NULL AND p.error IS NULL) AS ok
FROM planned
WHERE p.request IS NULL;

INSERT INTO answer_outputs
SELECT
  IF(ok, '${ANSWERS_TOPIC}', '${DLQ_TOPIC}'),
  id,
  IF(ok, f.question, CAST(NULL AS STRING)),
  CASE WHEN ok THEN f.passages END,
  completion,
  CASE WHEN ok THEN f.sources END,
  f.cited,
  model_version,
  prompt_tokens,
  cached_tokens,
  ttft_ms,
  IF(ok, f.truncated_passages, CAST(NULL AS INT)),
  IF(ok, f.dropped_passages, CAST(NULL AS INT)),
  IF(ok, CURRENT_TIMESTAMP, CAST(NULL AS TIMESTAMP_LTZ(3))),
  error_reason,
  error_detail,
  IF(ok, CAST(NULL AS STRING), COALESCE(f.payload_base64, payload_base64)),
  IF(ok, CAST(NULL AS STRING), '${QUESTIONS_TOPIC}'),
  IF(ok, CAST(NULL AS INT), source_partition),
  IF(ok, CAST(NULL AS BIGINT), source_offset),
  IF(ok, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM answered
UNION ALL
SELECT
  IF(ok, '${ANSWERS_TOPIC}', '${DLQ_TOPIC}'),
  q.id,
  IF(ok, q.question, CAST(NULL AS STRING)),
  p.passages,
  p.answer,
  p.sources,
  p.sources,  -- cited: nothing to cite without a model call (sources is [] then)
  CAST(NULL AS STRING),
  IF(ok, 0, CAST(NULL AS INT)),
  IF(ok, 0, CAST(NULL AS INT)),
  CAST(NULL AS DOUBLE),
  p.truncated_passages,
  p.dropped_passages,
  IF(ok, CURRENT_TIMESTAMP, CAST(NULL AS TIMESTAMP_LTZ(3))),
  IF(ok, CAST(NULL AS STRING), COALESCE(q.error_reason, SPLIT_INDEX(p.error, ':', 0))),
  IF(ok, CAST(NULL AS STRING), COALESCE(q.error_detail, p.error)),
  -- invalid records: parse_question kept the raw bytes; valid ones are UTF-8
  IF(ok, CAST(NULL AS STRING), COALESCE(q.payload_base64, TO_BASE64(CAST(payload AS STRING)))),
  IF(ok, CAST(NULL AS STRING), source_topic),
  IF(ok, CAST(NULL AS INT), source_partition),
  IF(ok, CAST(NULL AS BIGINT), source_offset),
  IF(ok, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM direct;
