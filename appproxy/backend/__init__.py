"""How traffic is forwarded: HTTP through a lean pooled client, WebSockets (see README.md)."""
