"""The EvalStop control plane: HTTP API, durable store, decision pipeline, enforcement."""
