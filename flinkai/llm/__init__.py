"""LLM decoding with no torch at run time: an ONNX decoder with an explicit KV cache.

``cache`` holds the per-layer key/value tensors, ``decoder`` runs the exported ONNX
model, ``tokenizer`` renders the model's chat template and ``generate`` decodes
greedily. ``docs/llm.md`` describes the export and the figures.
"""
