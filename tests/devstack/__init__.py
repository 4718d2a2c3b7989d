"""Tests of devstack."""
