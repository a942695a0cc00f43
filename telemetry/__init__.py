"""callgate's OpenTelemetry side (in progress)."""
