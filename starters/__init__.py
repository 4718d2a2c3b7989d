"""Starters: small leader-elected watchers and loops that turn Kubernetes changes into workflows."""
