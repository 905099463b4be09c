"""The aggregated API server's HTTP layer: requests resolved once, then routed to reads, writes and watches."""
