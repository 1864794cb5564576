"""Streaming LoRA fine-tuning: examples, a deterministic trainer, its state as one blob.

The training job (``jobs/finetune_lora.sql``, :mod:`flinkai.operators.finetune`) feeds
``(instruction, target)`` examples from Kafka to a :class:`~flinkai.finetune.trainer.LoraTrainer`
and publishes an :class:`~flinkai.llm.lora.Adapter` version every N examples. torch and
peft are imported lazily, only by the trainer and the base-model loader: parsing
examples needs neither, and ``flinkai.llm`` (the serving path) never imports them.
"""
