"""Helpers every benchmark may use: process-tree memory and CPU sampling."""
