"""Training the embedded target's own drafters: the prompts, the target's answers, an EAGLE-3 head
(vLLM's speculators) and a draft model (transformers). Heavy imports stay inside functions."""
