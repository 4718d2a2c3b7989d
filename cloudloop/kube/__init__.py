"""Kubernetes helpers: clients, informers (list+watch), conditions, events, leader election."""
