"""What all Burrow servers share: the event log, the admin HTTP server, config and limits."""
