"""Readers for document formats beyond plain text: each turns a file's bytes into sections.

:mod:`crag.documents.loaders` picks the reader by the file's extension.
"""
