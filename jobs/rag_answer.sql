-- rag_answer: questions from Kafka -> retrieve(question, k) -> questions with their
-- top-k passages from the live index (kept current by rag_ingest.sql) -> Kafka.
--
-- Input records: {"id", "question"}. Output: {id, question, passages: [{doc_id,
-- chunk_id, score, text}], retrieved_at}. Bad records and questions that cannot be
-- embedded go to the dead-letter topic with a reason.
--
-- Placeholders: KAFKA_BOOTSTRAP, QUESTIONS_TOPIC, ANSWERS_TOPIC, DLQ_TOPIC,
--   TOP_K (default 5), SCAN_BOUNDED_MODE, GROUP_ID, DELIVERY_GUARANTEE,
--   TRANSACTIONAL_ID_PREFIX (built in)

SET 'pipeline.name' = 'flinkai-rag-answer';

CREATE TEMPORARY FUNCTION parse_question AS 'rag.parse_question' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION retrieve AS 'rag.retrieve' LANGUAGE PYTHON;

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
SELECT `topic` AS source_topic, `partition` AS source_partition, `offset` AS source_offset,
       parse_question(payload) AS q
FROM questions_raw;

-- retrieve is not called for invalid questions (q.question is NULL: empty array).
CREATE TEMPORARY VIEW retrieved AS
SELECT source_topic, source_partition, source_offset, q,
       retrieve(q.question, ${TOP_K:-5}) AS passages
FROM parsed;

CREATE TEMPORARY VIEW outcomes AS
SELECT *, (q.error_reason IS NULL AND passages IS NOT NULL) AS ok
FROM retrieved;

INSERT INTO answer_outputs
SELECT
  IF(ok, '${ANSWERS_TOPIC}', '${DLQ_TOPIC}'),
  q.id,
  IF(ok, q.question, CAST(NULL AS STRING)),
  passages,
  IF(ok, CURRENT_TIMESTAMP, CAST(NULL AS TIMESTAMP_LTZ(3))),
  IF(ok, CAST(NULL AS STRING), COALESCE(q.error_reason, 'inference_failed')),
  IF(ok, CAST(NULL AS STRING), COALESCE(q.error_detail, 'the question could not be embedded')),
  q.payload_base64,
  IF(ok, CAST(NULL AS STRING), source_topic),
  IF(ok, CAST(NULL AS INT), source_partition),
  IF(ok, CAST(NULL AS BIGINT), source_offset),
  IF(ok, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM outcomes;
