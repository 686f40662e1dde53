"""HTTP routers, one module per group of protocol endpoints."""
