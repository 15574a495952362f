"""An entry point that runs until it is cancelled (the cancel test)."""

import sys
import time

import mlflow

with mlflow.start_run():
    mlflow.log_metric("started", 1)
    print("sleeping", flush=True)
    time.sleep(float(sys.argv[1]))
