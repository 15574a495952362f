"""The database: models, engine, transitions. Importing it registers the flush listener
that keeps the usage records (:mod:`gateway.db.usage`), wherever kernels are written."""

from gateway.db import usage as usage
