-- finetune_lora: (instruction, target) examples from Kafka -> a LoRA adapter trained on
-- CPU (peft, torch) -> a new adapter version every PUBLISH_EVERY examples on the
-- adapters topic, exactly-once. Input records are JSON {"id", "instruction", "target"}
-- with an optional "adapter" (the adapter it trains; ADAPTER otherwise). Bad records
-- go to the dead-letter topic with a reason and their source offset; they never stop
-- the job.
--
-- Training is deterministic: keep the examples topic at one partition (examples are
-- trained in offset order), and the same examples give byte-identical versions, across
-- restarts too (flinkai.operators.finetune).
--
-- Adapter records: key = the adapter's name, value = its .onnx_adapter bytes, headers
-- action=publish, version=<n>, sha256=<hex of the value>. An r = 8 adapter on q/v of
-- SmolLM2 is about 1.84 MB, above Kafka's default 1 MB: create the adapters topic with
-- max.message.bytes >= ADAPTER_MAX_BYTES (flinkai.kafka.adapter_feed.adapter_topic_configs).
-- Readers use isolation.level=read_committed: a version from an aborted attempt is
-- never visible.
--
-- Checkpoint storage: the trainer state of one SmolLM2 adapter is about 5.6 MB (weights
-- and AdamW's two moments), above the 5 MB of Flink's in-memory checkpoint storage, the
-- MiniCluster's default. Give the job a checkpoint directory (a cluster sets
-- execution.checkpointing.dir; locally runtime.flink_conf in the flinkai config).
--
-- Placeholders (fill with --var NAME=VALUE, env vars, or `vars:` in configs/*.yaml):
--   KAFKA_BOOTSTRAP, EXAMPLES_TOPIC, ADAPTERS_TOPIC, DLQ_TOPIC,
--   SCAN_BOUNDED_MODE (unbounded | latest-offset: stop at the offsets seen at start),
--   FINETUNE_MODEL (the serving export folder, with LoRA inputs of rank LORA_RANK;
--     default: the folder of `flinkai model export-llm --lora-rank LORA_RANK`),
--   ADAPTER (default "default"), PUBLISH_EVERY (default 100, a multiple of BATCH_SIZE),
--   BATCH_SIZE (4), LEARNING_RATE (1e-3), LORA_RANK (8), LORA_ALPHA (16), SEED (0),
--   TORCH_THREADS (1), MAX_TOKENS (512), ADAPTER_MAX_BYTES (16777216),
--   DELIVERY_GUARANTEE (default exactly-once), TRANSACTIONAL_ID_PREFIX (built in).

SET 'pipeline.name' = 'flinkai-finetune-lora';
-- One optimizer step runs per timer firing; close bundles after 20 ms instead of
-- Flink's 1 s, so a version leaves the worker with the step that made it and a
-- checkpoint barrier waits for one step at most.
SET 'python.fn-execution.bundle.time' = '20';

-- Raw bytes, not 'json': the operator sees every record and dead-letters a bad one.
CREATE TEMPORARY TABLE examples_raw (
  payload BYTES,
  `partition` INT METADATA FROM 'partition' VIRTUAL,
  `offset` BIGINT METADATA FROM 'offset' VIRTUAL
) WITH (
  'connector' = 'kafka',
  'topic' = '${EXAMPLES_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'properties.group.id' = '${GROUP_ID:-flinkai-finetune-lora}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = '${SCAN_BOUNDED_MODE}',
  'format' = 'raw'
);

-- Key: the adapter's name (raw); value: the adapter file (raw); headers: what it is.
CREATE TEMPORARY TABLE adapters_out (
  adapter STRING,
  adapter_bytes BYTES,
  `headers` MAP<STRING, BYTES> METADATA
) WITH (
  'connector' = 'kafka',
  'topic' = '${ADAPTERS_TOPIC}',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP}',
  'key.format' = 'raw',
  'key.fields' = 'adapter',
  'value.format' = 'raw',
  'value.fields-include' = 'EXCEPT_KEY',
  -- Exactly-once: a version is committed with the checkpoint holding the trainer state
  -- that made it.
  'sink.delivery-guarantee' = '${DELIVERY_GUARANTEE:-exactly-once}',
  'sink.transactional-id-prefix' = '${TRANSACTIONAL_ID_PREFIX}-adapters',
  'properties.transaction.timeout.ms' = '900000',
  -- An adapter is one record of about 1.84 MB (SmolLM2, r = 8, q/v): above the
  -- producer's default 1 MB request limit.
  'properties.max.request.size' = '${ADAPTER_MAX_BYTES:-16777216}'
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

-- The key is the adapter an example trains, read on the JVM side (a record that is not
-- JSON gets the default and is dead-lettered by the operator).
CREATE TEMPORARY VIEW examples AS
SELECT COALESCE(JSON_VALUE(CAST(payload AS STRING), '$.adapter'), '${ADAPTER:-default}') AS adapter,
       payload, `partition` AS source_partition, `offset` AS source_offset
FROM examples_raw;

CREATE TEMPORARY VIEW trained AS
  APPLY OPERATOR 'flinkai.operators.finetune.train_lora' TO examples
  WITH ('key' = 'adapter', 'payload' = 'payload',
        'partition' = 'source_partition', 'offset' = 'source_offset',
        'model' = '${FINETUNE_MODEL:-}', 'adapter' = '${ADAPTER:-default}',
        'publish_every' = '${PUBLISH_EVERY:-100}', 'batch_size' = '${BATCH_SIZE:-4}',
        'learning_rate' = '${LEARNING_RATE:-1e-3}', 'rank' = '${LORA_RANK:-8}',
        'alpha' = '${LORA_ALPHA:-16}', 'seed' = '${SEED:-0}',
        'threads' = '${TORCH_THREADS:-1}', 'max_tokens' = '${MAX_TOKENS:-512}');

INSERT INTO adapters_out
SELECT adapter, adapter_bytes,
       MAP['action', CAST('publish' AS BYTES),
           'version', CAST(CAST(version AS STRING) AS BYTES),
           'sha256', CAST(sha256 AS BYTES)]
FROM trained
WHERE error_reason IS NULL;

INSERT INTO dead_letters
SELECT error_reason, error_detail, payload_base64, '${EXAMPLES_TOPIC}', source_partition,
       source_offset, CURRENT_TIMESTAMP
FROM trained
WHERE error_reason IS NOT NULL;
