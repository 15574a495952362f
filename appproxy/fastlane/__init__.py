"""The fast lane: the common inference request served from uvicorn's parser callbacks."""
