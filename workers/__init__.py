"""Worker processes: host every workflow and the activities of the configured cloud."""
