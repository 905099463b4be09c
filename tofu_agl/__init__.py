"""tofu_agl package."""
