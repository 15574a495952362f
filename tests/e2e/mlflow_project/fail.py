"""An entry point that fails: the run ends FAILED, its log shows why."""

import mlflow

with mlflow.start_run():
    mlflow.log_param("stage", "loading")
    raise SystemExit("training data is missing: no such file data/train.parquet")
