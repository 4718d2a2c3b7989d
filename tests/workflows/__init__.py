"""Tests of the workflows alone: time-skipping server, fake activities, replayed histories."""
