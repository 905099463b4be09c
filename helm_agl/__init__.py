"""helm_agl package."""
