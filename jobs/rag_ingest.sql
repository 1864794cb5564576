-- rag_ingest: document events from Kafka -> chunk -> embed -> the live vector index.
--
-- Input records: {"doc_id", "text", "updated_at", "op": "upsert"|"delete"} keyed by
-- doc_id, or a tombstone (null value, key = doc_id), which deletes the document.
-- index_document writes each event to the index (rag: config section, a Chroma server)
-- with its version (updated_at in epoch ms; a tombstone: the record timestamp): the
-- index replaces a document only for a newer version, so the writes are idempotent
-- and a replay after a restart converges to the topic's final state (docs/rag.md).
-- Every input record yields one record on the acks topic (what the index did) or on
-- the dead-letter topic (why not), written exactly-once.
--
-- Placeholders: KAFKA_BOOTSTRAP, DOCS_TOPIC, ACKS_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset), GROUP_ID,
--   DELIVERY_GUARANTEE (default exactly-once), TRANSACTIONAL_ID_PREFIX (built in)

SET 'pipeline.name' = 'flinkai-rag-ingest';
-- Freshness is this job's figure of merit, and a document waits for its Python bundle to
-- close: 50 ms instead of the 200 ms default (runtime.python_bundle_time_ms) halved it in
-- flinkai bench rag at 10 documents/s on a quiet 2-core machine (docs/rag.md). This line
-- wins over the config; remove it to use runtime.python_bundle_time_ms again.
SET 'python.fn-execution.bundle.time' = '50';

CREATE TEMPORARY FUNCTION parse_doc_event AS 'rag.parse_doc_event' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION index_document AS 'rag.index_document' LANGUAGE PYTHON;

-- Key and value as raw bytes. A null value (tombstone) reaches parse_doc_event as a
-- NULL payload with its key; the 'raw' format does not drop it
-- (tests/integration/test_rag_jobs.py deletes documents by tombstone through this table).
CREATE TEMPORARY TABLE docs_raw (
  doc_key BYTES,
  payload BYTES,
  `topic` STRING METADATA FROM 'topic' VIRTUAL,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL,
  record_time TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${DOCS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-rag-ingest}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'key.format' = 'raw',
  'key.fields' = 'doc_key',
  'value.format' = 'raw',
  'value.fields-include' = 'EXCEPT_KEY'
);

-- One sink for both outcomes; each row names its topic (see embed_clicks.sql).
CREATE TEMPORARY TABLE rag_outputs (
  `topic` STRING METADATA,
  doc_id STRING,
  op STRING,
  version BIGINT,
  outcome STRING,
  chunks INT,
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
  'topic' = '${ACKS_TOPIC};${DLQ_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'format' = 'json',
  'json.encode.ignore-null-fields' = 'true',
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}',
  'properties.transaction.timeout.ms' = '900000'
);

CREATE TEMPORARY VIEW parsed AS
SELECT payload, `topic` AS source_topic, `partition` AS source_partition,
       `offset` AS source_offset, parse_doc_event(doc_key, payload, record_time) AS d
FROM docs_raw;

-- index_document takes the parse row whole, so Flink runs both functions in one
-- Python operator. It skips invalid events (d.error_reason set) without writing.
CREATE TEMPORARY VIEW indexed AS
SELECT payload, source_topic, source_partition, source_offset, d, index_document(d) AS r
FROM parsed;

CREATE TEMPORARY VIEW outcomes AS
SELECT *, (d.error_reason IS NULL AND r.error IS NULL) AS ok
FROM indexed;

INSERT INTO rag_outputs
SELECT
  IF(ok, '${ACKS_TOPIC}', '${DLQ_TOPIC}'),
  COALESCE(d.doc_id, CAST(NULL AS STRING)),
  d.op,
  d.version,
  r.outcome,
  r.chunks,
  r.model_version,
  IF(ok, CAST(NULL AS STRING), COALESCE(d.error_reason, SPLIT_INDEX(r.error, ':', 0))),
  IF(ok, CAST(NULL AS STRING), COALESCE(d.error_detail, r.error)),
  -- valid events that failed later (the model) are UTF-8 JSON, so the cast is exact
  IF(ok, CAST(NULL AS STRING), COALESCE(d.payload_base64, TO_BASE64(CAST(payload AS STRING)))),
  source_topic,
  source_partition,
  source_offset,
  IF(ok, CAST(NULL AS TIMESTAMP_LTZ(3)), CURRENT_TIMESTAMP)
FROM outcomes;
