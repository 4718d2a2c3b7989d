"""Kubernetes helpers: client loading, informers (list+watch), conditions, events, leader election."""
