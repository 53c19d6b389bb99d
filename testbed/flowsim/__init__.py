"""Flow-level discrete-event simulator: fluid max-min network plus serving model."""
