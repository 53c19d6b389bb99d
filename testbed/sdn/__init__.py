"""SDN controller (os-ken app, ECMP, DSCP queues, congestion oracle, Prometheus)."""
