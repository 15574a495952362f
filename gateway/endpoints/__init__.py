"""What an inference endpoint is made of below the loops and services: its replica session
rows (``replicas``) and the readiness and load the app proxies report (``observe``). The
controller loop and its leader lease are in ``gateway.loops`` (see gateway/README.md)."""
