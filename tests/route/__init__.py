"""Tests of route."""
