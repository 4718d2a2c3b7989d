"""Tests of loadbalancer."""
