"""The AWS node termination handler's pure parts: SQS message parsing and the webhook."""
