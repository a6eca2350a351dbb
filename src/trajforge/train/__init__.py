"""Training on what trajforge produces: supervised fine-tuning and held-out evaluation.

Heavy libraries (torch, transformers) are imported inside the functions that need them, so
importing this package (and starting the CLI) stays fast.
"""
