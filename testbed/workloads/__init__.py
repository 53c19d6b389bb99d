"""Request streams: Mooncake traces, workload profiles, a seeded synthetic generator."""
