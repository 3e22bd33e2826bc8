"""Bridges to training frameworks. Each subpackage imports its framework only when used (optional extras)."""
