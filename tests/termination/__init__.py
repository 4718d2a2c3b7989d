"""Tests of termination."""
