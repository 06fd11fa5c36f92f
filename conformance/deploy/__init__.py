"""Deploy checks: profiles, flags, the platform matrix, overlays, precedence, sampling, upstream's files and loader, profile boots."""
