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
-- Placeholders: KAFKA_BOOTSTRAP, QUESTIONS_TOPIC, ANSWERS_TOPIC, DLQ_TOPIC,
--   TOP_K (default 5), SCAN_BOUNDED_MODE, GROUP_ID, DELIVERY_GUARANTEE,
--   TRANSACTIONAL_ID_PREFIX (built in)
-- The decoder, max_new_tokens, max_prompt_tokens (passages are cut to fit it) and the
-- prefix store come from the `llm` config section, as for llm_complete.sql.

SET 'pipeline.name' = 'flinkai-rag-answer';

CREATE TEMPORARY FUNCTION parse_question AS 'rag.parse_question' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION retrieve AS 'rag.retrieve' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION rag_answer AS 'rag_answer.rag_answer' LANGUAGE PYTHON;

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

CREATE TEMPORARY VIEW parsed AS
SELECT payload, `topic` AS source_topic, `partition` AS source_partition,
       `offset` AS source_offset, parse_question(payload) AS q
FROM questions_raw;

-- The passages are read only from rag_answer's result (it echoes its argument): the
-- planner copies retrieve(...) into every column that reads it, one embedding and
-- index search per copy, and the written passages are the ones the answer used.
-- An invalid question (q.question NULL) gets an empty array from retrieve and a NULL
-- row from rag_answer, and no model call; so does a question with no passages (a
-- fixed answer, empty sources). A question retrieve cannot embed (NULL passages)
-- comes back with error 'inference_failed: ...'.
CREATE TEMPORARY VIEW answered AS
SELECT payload, source_topic, source_partition, source_offset, q,
       rag_answer(q.question, retrieve(q.question, ${TOP_K:-5})) AS a
FROM parsed;

CREATE TEMPORARY VIEW outcomes AS
SELECT *, (q.error_reason IS NULL AND a.error IS NULL) AS ok
FROM answered;

INSERT INTO answer_outputs
SELECT
  IF(ok, '${ANSWERS_TOPIC}', '${DLQ_TOPIC}'),
  q.id,
  IF(ok, q.question, CAST(NULL AS STRING)),
  a.passages,
  a.answer,
  a.sources,
  a.cited,
  a.model_version,
  a.prompt_tokens,
  a.cached_tokens,
  a.ttft_ms,
  a.truncated_passages,
  a.dropped_passages,
  IF(ok, CURRENT_TIMESTAMP, CAST(NULL AS TIMESTAMP_LTZ(3))),
  IF(ok, CAST(NULL AS STRING),
     COALESCE(q.error_reason, SPLIT_INDEX(a.error, ':', 0))),
  IF(ok, CAST(NULL AS STRING),
     COALESCE(q.error_detail, a.error)),
  -- invalid records: parse_question kept the raw bytes; valid ones are UTF-8
  IF(ok, CAST(NULL AS STRING), COALESCE(q.payload_base64, TO_BASE64(CAST(payload AS STRING)))),
  IF(ok, CAST(NULL AS STRING), source_topic),
  IF(ok, CAST(NULL AS INT), source_partition),
  IF(ok, CAST(NULL AS BIGINT), source_offset),
  IF(ok, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM outcomes;
