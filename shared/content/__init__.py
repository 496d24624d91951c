"""Reasoning content for real models: prompts and step delimiters, datasets, and grading."""
