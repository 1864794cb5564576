-- risk_decisions: card transactions from Kafka -> a LangGraph decision graph per event
-- (fraud -> credit -> limit -> decide; ONNX models; per-account 24 h spend in keyed
-- state, checkpointed as plain data) -> decisions on Kafka, exactly-once.
-- Transactions are keyed by a bucket of their account (RISK_BUCKETS buckets) and wait
-- in the bucket's state for a few ms (RISK_FLUSH_MS); then the bucket's rows are decided
-- together: one ONNX call per model, each account's state read and written once, each
-- account's rows in arrival order (flinkai.operators.agents).
-- Transactions that cannot be parsed (not JSON, a missing or unknown field, NaN or
-- Infinity) go to a dead-letter topic with the reason and their source offset; they
-- never stop the job. An account missing from the account table is a decision with
-- reason unknown_account.
--
-- Input records: {"tx_id", "account_id", "ts" (epoch ms), "amount", "V1".."V28"}.
-- Output: one record per transaction: the decision (see flinkai.operators.agents).
--
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, TRANSACTIONS_TOPIC, DECISIONS_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start),
--   RISK_MODELS (default: $FLINKAI_HOME/models/risk), RISK_ACCOUNTS (default: the
--   shared credit_default.csv), DELIVERY_GUARANTEE (default exactly-once),
--   TRANSACTIONAL_ID_PREFIX (built in: per job),
--   RISK_BUCKETS (default 1: keys, each with its own timer, batch and state requests;
--   set it to at least the parallelism: a subtask without a bucket idles),
--   RISK_FLUSH_MS (default 5: how long a transaction waits for others).
-- Build the models first: flinkai model train-risk.

SET 'pipeline.name' = 'flinkai-risk-decisions';
-- A Python bundle closes after 5 ms instead of Flink's 1 s: a decision waits for its
-- bundle in the operator's Python worker (at 2 events/s, 50 ms bundles gave a median
-- of 89 ms from send to decision; 5 ms bundles, 48 ms).
SET 'python.fn-execution.bundle.time' = '5';
-- Flush network buffers between operators after 5 ms instead of Flink's 100 ms: the
-- keyBy before the operator is a network exchange, and each exchange would add up
-- to the timeout to a decision's latency.
SET 'execution.buffer-timeout.interval' = '5 ms';
-- Keep up to 100,000 accounts' spend per bucket in the Python worker's read cache
-- (PyFlink's default: 1,000 map entries per key). A read that misses it waits for a
-- round trip to the JVM. The operator reads each bucket's map whole once, so while it
-- fits here the cache also answers for accounts the map lacks (a first transaction).
SET 'python.map-state.read-cache-size' = '100000';

-- Raw bytes, so a malformed record reaches the operator and is dead-lettered.
CREATE TEMPORARY TABLE transactions_raw (
  payload BYTES,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL,
  `topic` STRING METADATA FROM 'topic' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${TRANSACTIONS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-risk-decisions}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

CREATE TEMPORARY TABLE decisions_out (
  tx_id STRING,
  account_id STRING,
  ts_ms BIGINT,
  amount DOUBLE,
  approved BOOLEAN,
  reasons ARRAY<STRING>,
  fraud_score DOUBLE,
  credit_status STRING,
  credit_score DOUBLE,
  spend_24h DOUBLE,
  credit_limit DOUBLE,
  path ARRAY<STRING>,
  graph_version STRING,
  fraud_model_version STRING,
  credit_model_version STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '${DECISIONS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'key.format' = 'raw',
  'key.fields' = 'account_id',
  'value.format' = 'json',
  'value.fields-include' = 'ALL',
  -- Exactly-once: Kafka transactions committed by Flink checkpoints.
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}-decisions',
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

-- One Python stage: the account id is read in SQL only to key the stream (NULL for
-- a record that is not JSON or has none; those share the key ''), and the operator
-- validates the bytes and dead-letters what fails, with its reason.
CREATE TEMPORARY VIEW transactions AS
SELECT COALESCE(JSON_VALUE(CAST(payload AS STRING), '$.account_id'), '') AS account_id,
       payload, `partition` AS source_partition, `offset` AS source_offset
FROM transactions_raw;

CREATE TEMPORARY VIEW decided AS
  APPLY OPERATOR 'flinkai.operators.agents.decide' TO transactions
  WITH ('key' = 'account_id', 'payload' = 'payload',
        'partition' = 'source_partition', 'offset' = 'source_offset',
        'models' = '${RISK_MODELS:-}', 'accounts' = '${RISK_ACCOUNTS:-}',
        'buckets' = '${RISK_BUCKETS:-1}', 'flush_ms' = '${RISK_FLUSH_MS:-5}');

INSERT INTO decisions_out
SELECT tx_id, account_id, ts_ms, amount, approved, reasons, fraud_score, credit_status,
       credit_score, spend_24h, credit_limit, path, graph_version, fraud_model_version,
       credit_model_version
FROM decided
WHERE error_reason IS NULL;

INSERT INTO dead_letters
SELECT error_reason, error_detail, payload_base64, '${TRANSACTIONS_TOPIC}', source_partition,
       source_offset, CURRENT_TIMESTAMP
FROM decided
WHERE error_reason IS NOT NULL;
