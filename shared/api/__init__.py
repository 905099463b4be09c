"""Kubernetes API conventions as plain data.

Status errors, the REST storage contract, selectors, patches, Table, discovery documents, names, durations.
"""
