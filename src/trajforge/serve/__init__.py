"""Serving a trained student: its codec, batched generation, and the OpenAI-compatible server."""
