"""Fit ElasticNet on iris.csv (petal width from the other measurements) and log to MLflow.

MLFLOW_TRACKING_URI and MLFLOW_RUN_ID come from the environment (the backend sets them),
so ``mlflow.start_run()`` continues the run ``mlflow run`` created.
"""

import argparse
import csv

import mlflow
import mlflow.sklearn
import numpy as np
from mlflow.models import infer_signature
from sklearn.linear_model import ElasticNet
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

parser = argparse.ArgumentParser()
parser.add_argument("--alpha", type=float, required=True)
parser.add_argument("--l1-ratio", type=float, required=True)
parser.add_argument("--register", default="", help="register the model under this name")
args = parser.parse_args()

with open("iris.csv") as handle:
    rows = np.array([[float(v) for v in row[:4]] for row in csv.reader(handle) if row[0][0] != "s"])
X, y = rows[:, :3], rows[:, 3]
train, test = np.arange(len(rows)) % 5 != 0, np.arange(len(rows)) % 5 == 0

with mlflow.start_run():
    model = ElasticNet(alpha=args.alpha, l1_ratio=args.l1_ratio, random_state=0)
    model.fit(X[train], y[train])
    predicted = model.predict(X[test])
    rmse = float(np.sqrt(mean_squared_error(y[test], predicted)))
    mlflow.log_metrics(
        {
            "rmse": rmse,
            "mae": float(mean_absolute_error(y[test], predicted)),
            "r2": float(r2_score(y[test], predicted)),
        }
    )
    mlflow.sklearn.log_model(
        model,
        name="model",
        signature=infer_signature(X[:2], predicted[:2]),
        pip_requirements=["scikit-learn", "numpy"],
        registered_model_name=args.register or None,
    )
    print(f"ElasticNet(alpha={args.alpha}, l1_ratio={args.l1_ratio}): rmse {rmse:.4f}")
