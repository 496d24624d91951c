"""What every service process shares: the Redis Streams bus, the service loop, settings,
metrics, the embedded Redis server and the ingress client."""
